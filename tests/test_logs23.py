"""Round logs23 (issue 15, blind batch P).  nccl-tests#115: a benchmark whose ranks all
run on one host stops after NCCL's init lines, before its first size; the veth devices
NCCL's socket transport listed carry nothing between machines there, so they explain
nothing, and the stop leads (P2P-IOMMU).  NCCL#2428: an IB device NCCL could not open
while channels run over a second IB device is an error, not a warning.  Each is checked
on the real excerpt and on a neighbour that must not be read the same way."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from corpus_excerpts import CORPUS, excerpt, ids, lead

from ddptui.logs.diagnose import diagnose_lines

P2P = "p1-p2p-iommu-hang-nccl-tests-115"
TABLE = [
    "#                                                              out-of-place                       in-place          ",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
    "           8             2     float     sum      -1    10.91    0.00    0.00      0    10.62    0.00    0.00      0",
]


def test_a_one_host_benchmark_stopped_in_nccl_init_is_the_gpu_path() -> None:
    d = excerpt(P2P)
    assert lead(d) == "P2P-IOMMU", ids(d)
    assert "AR-BOOT-VIRTUAL" not in ids(d)
    assert d.first is not None and "SAIS1020" in d.first.summary


def test_the_same_benchmark_that_reaches_its_first_size_is_not_it() -> None:
    d = diagnose_lines([*CORPUS[P2P].lines, *TABLE], "x")
    assert "P2P-IOMMU" not in ids(d) and "AR-BOOT-VIRTUAL" not in ids(d), ids(d)
    # NCCL#318's device list alone; NCCL#259's healthy 2.4.8 run, cut by its reporter at
    # "Setting affinity for GPU 0" (no "Using network" line in that release)
    for name in ("p1-healthy-allreduce-perf-8gpu-nccl-318", "d-healthy-noplugin-ibverbs-nccl-259"):
        healthy = excerpt(name)
        assert healthy.first is None, (name, ids(healthy))


def test_a_warning_after_nccl_init_is_not_one_it_went_on_past() -> None:
    late = "SAIS1020:28329:28341 [0] transport/net_socket.cc:300 NCCL WARN NET/Socket : something late"
    d = diagnose_lines([*CORPUS[P2P].lines, late], "x")
    assert "P2P-IOMMU" not in ids(d), ids(d)


def test_veth_devices_still_count_where_the_ranks_span_two_hosts() -> None:
    lines = [ln.replace("Rank  1 Pid  28330 on   SAIS1020", "Rank  1 Pid  28330 on   SAIS1021") for ln in CORPUS[P2P].lines]
    d = diagnose_lines(lines, "x")
    assert "AR-BOOT-VIRTUAL" in ids(d), ids(d)
    assert "P2P-IOMMU" not in ids(d)


def test_an_ib_device_not_opened_while_channels_use_a_second_one_is_an_error() -> None:
    d = excerpt("p1-ib-netmismatch-hang-nccl-2428")
    assert lead(d) == "IB-OPEN", ids(d)
    assert d.first is not None and d.first.severity == "error"
    assert any("NET/IB/1" in e for e in d.first.evidence)


def test_an_ib_device_not_opened_before_a_fall_back_to_sockets_stays_a_warning() -> None:
    d = excerpt("r2c-ib-nccl-451")
    assert lead(d) == "IB-OPEN" and d.first is not None and d.first.severity == "warning"
    only_ib0 = [ln.replace("NET/IB/1", "NET/IB/0") for ln in CORPUS["p1-ib-netmismatch-hang-nccl-2428"].lines]
    d = diagnose_lines(only_ib0, "x")
    assert d.first is not None and d.first.severity == "warning", ids(d)


def test_an_nccl_that_prints_init_start_after_using_network_is_a_cut_log() -> None:
    """NCCL 2.18+ prints "Init START" right after "Using network": a log that stops at the
    latter is cut there (tinygrad/open-gpu-kernel-modules#45, healthy, stays silent)."""
    newer = [ln.replace("NCCL version 2.14.3", "NCCL version 2.18.3") for ln in CORPUS[P2P].lines]
    assert "P2P-IOMMU" not in ids(diagnose_lines(newer, "x"))
    assert excerpt("j3-healthy-p2p-off-run-tinygrad-ogkm-45").first is None
