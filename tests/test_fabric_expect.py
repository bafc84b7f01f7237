"""What the hardware should give (fabric_expect.yaml), and the findings that compare a
measured fabric with it: IB from sysfs port rates, TCP from the NIC speed, intra-node
from the SKU table or NVLink count, and NCCL on sockets where IB is up. Hardware records
are shaped as probes/fabric.py sends them (sysfs `rate` text as Linux writes it)."""

from __future__ import annotations

from ddptui.checklist import fabric_expect
from ddptui.checklist.fabric_analysis import Sample, judge
from ddptui.checklist.fabric_findings import findings_and_data
from ddptui.checklist.fabric_plan import schedule
from ddptui.checklist.fabric_run import FabricRun

NDR = {
    "device": "mlx5_0",
    "port": "1",
    "state": "4: ACTIVE",
    "rate_gbps": 400.0,
    "rate_text": "400 Gb/sec (4X NDR)",
    "link_layer": "InfiniBand",
}
H100 = [
    {"index": i, "name": "NVIDIA H100 80GB HBM3", "nvlinks": 18, "nvlink_gen": 4} for i in range(8)
]


def test_expected_figures_from_sysfs_and_nvml() -> None:
    ib = fabric_expect.network({"ib": [NDR] * 8, "speed_mbps": 100000}, "nccl", "IB")
    assert ib is not None and ib.transport == "ib" and ib.gbs == 400 * 8 / 8 * 0.9
    tcp = fabric_expect.network({"ib": [NDR], "iface": "eth0", "speed_mbps": 10000}, "gloo", None)
    assert tcp is not None and tcp.transport == "socket" and tcp.gbs == 0.625
    assert fabric_expect.network({"speed_mbps": None}, "gloo", None) is None
    assert fabric_expect.tcp_where_ib({"ib": [NDR]}, "nccl", "Socket")
    assert not fabric_expect.tcp_where_ib({"ib": [dict(NDR, state="1: DOWN")]}, "nccl", "Socket")
    sku = fabric_expect.intra(H100)
    assert sku is not None and sku.gbs == 460.0 and "NHC" in sku.source
    four = fabric_expect.intra(H100[:4])  # not the SKU's 8: links x 25 GB/s x 0.7
    assert four is not None and four.gbs == 18 * 25.0 * 0.7
    assert fabric_expect.intra(H100[:1]) is None


def _run(
    n: int, hw: dict[str, object], gbs: float, backend: str = "nccl", net: str = "IB"
) -> FabricRun:
    run = FabricRun(names=[f"node{i}" for i in range(n)], deadline=0.0, op_timeout_s=5.0)
    for i in range(n):
        run.hw[i] = dict(hw)
    for k, pairs in enumerate(schedule(n)):
        for a, b in pairs:
            run.samples.append(Sample(k, a, b, gbs))
            run.results[(k, a)] = {"net": net}
    return run


def test_everything_equally_slow_is_below_hardware_and_sockets_where_ib_is_up() -> None:
    run = _run(4, {"ib": [NDR] * 8, "gpus": H100}, gbs=1.2, net="Socket")
    final = judge(4, run.samples)
    found, data = findings_and_data(run, "nccl", final, [], [], [], done=3, planned=3, budget=120)
    ids = [f.id for f in found]
    assert ids.count("FABRIC-TCP-NOT-IB") == 4
    assert "FABRIC-SLOW-NODE" not in ids and "FABRIC-SLOW-LINK" not in ids
    # NCCL said Socket: the expectation is the NIC's, not IB's
    assert data["transport"] == "Socket"


def test_a_slow_fabric_over_ib_names_no_node_but_the_hardware_gap() -> None:
    run = _run(8, {"ib": [NDR] * 8, "gpus": H100}, gbs=40.0)  # 360 GB/s expected
    final = judge(8, run.samples)
    found, data = findings_and_data(run, "nccl", final, [], [], [], done=7, planned=7, budget=120)
    (below,) = [f for f in found if f.id == "FABRIC-BELOW-HARDWARE"]
    assert len(below.nodes) == 8 and "IB 3200 Gb/s" in below.summary
    assert data["expected_gbs"] == 360.0 and data["reference_gbs"] == 40.0


def test_a_slow_intra_node_allreduce_names_its_node() -> None:
    run = _run(2, {"ib": [NDR], "gpus": H100}, gbs=45.0)
    run.intra = {0: {"busbw_gbs": 470.0, "gpus": 8}, 1: {"busbw_gbs": 120.0, "gpus": 8}}
    final = judge(2, run.samples)
    found, data = findings_and_data(run, "nccl", final, [], [], [], done=1, planned=1, budget=120)
    (slow,) = [f for f in found if f.id == "FABRIC-INTRA-SLOW"]
    assert slow.nodes == ("node1",) and "460" in slow.summary
    assert data["intra"]["node1"]["busbw_gbs"] == 120.0
