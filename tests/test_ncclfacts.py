"""NCCL_DEBUG=INFO parsing across NCCL versions, the R8 progress ladder and the cross-rank
findings.  No GPU here: the logs are built from the exact formats quoted in
../shared/reference/failure-signatures.md (sections 1-2), line by line."""

# ruff: noqa: E501  (NCCL log lines are quoted whole; wrapping them would change the data)

from __future__ import annotations

import pytest

from ddptui.diagnosis.ncclfacts import RankFacts, nccl_findings, parse_nccl_lines

# NCCL 2.21 (rank 0): bare version line, "Bootstrap : Using" with a space, internal
# plugin line, 2.21 Init START/COMPLETE with the API name, ring dump + channel lines.
V221_RANK0 = """\
node0:4101:4101 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>
node0:4101:4101 [0] NCCL INFO NET/Plugin: Using internal network plugin.
node0:4101:4101 [0] NCCL INFO cudaDriverVersion 12040
NCCL version 2.21.5+cuda12.4
node0:4101:4190 [0] NCCL INFO Failed to open libibverbs.so[.1]
node0:4101:4190 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>
node0:4101:4190 [0] NCCL INFO Using network Socket
node0:4101:4190 [0] NCCL INFO ncclCommInitRank comm 0x55d1c8a0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x9f3c21e5a0b4d7e2 - Init START
node0:4101:4190 [0] NCCL INFO Channel 00/02 :    0   1
node0:4101:4190 [0] NCCL INFO Channel 01/02 :    0   1
node0:4101:4190 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0
node0:4101:4190 [0] NCCL INFO Channel 01/0 : 1[0] -> 0[0] [receive] via NET/Socket/0
node0:4101:4190 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0
node0:4101:4190 [0] NCCL INFO Connected all rings
node0:4101:4190 [0] NCCL INFO Connected all trees
node0:4101:4190 [0] NCCL INFO ncclCommInitRank comm 0x55d1c8a0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x9f3c21e5a0b4d7e2 localSize 1 used 1050624 bytes on core 3 - Init COMPLETE
""".splitlines()

# NCCL 2.21, rank 1: no version line (only comm rank 0 prints it at <=2.21).
V221_RANK1 = """\
node1:3301:3301 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>
node1:3301:3390 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>
node1:3301:3390 [0] NCCL INFO Using network Socket
node1:3301:3390 [0] NCCL INFO ncclCommInitRank comm 0x5612 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x9f3c21e5a0b4d7e2 - Init START
""".splitlines()

# NCCL 2.27 under torchrun's [rank1]: prefix: INFO version line, "Bootstrap: Using"
# without the space, IB device list, 2.26+ timestamped WARN (after the blank line).
V227_RANK1 = """\
[rank1]:node1:3301:3301 [0] NCCL INFO Bootstrap: Using ib0:192.168.1.2<0>
[rank1]:node1:3301:3301 [0] NCCL INFO NCCL version 2.27.7+cuda12.9
[rank1]:node1:3301:3390 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so.
[rank1]:node1:3301:3390 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ib0:192.168.1.2<0>
[rank1]:node1:3301:3390 [0] NCCL INFO Using network IB
[rank1]:node1:3301:3390 [0] NCCL INFO ncclCommInitRankConfig comm 0x7f2c rank 1 nranks 4 cudaDev 1 nvmlDev 1 busId 4c000 commId 0x11aa - Init START
[rank1]:node1:3301:3390 [0] NCCL INFO ncclCommInitRankConfig comm 0x7f2c rank 1 nranks 4 cudaDev 1 nvmlDev 1 busId 4c000 commId 0x11aa localSize 2 used 2 bytes on core 7 - Init COMPLETE
[rank1]:node1:3301:3390 [0] NCCL INFO Init timings - ncclCommInitRankConfig: rank 1 nranks 4 total 0.61 (kernels 0.12)
[rank1]:
[rank1]:[2025-01-01 12:00:00] node1:3301:3400 [0] transport/net_ib.cc:2458 NCCL WARN NET/IB : Got completion from peer 10.0.0.3<58622> with status=12 opcode=0 len=0 vendor err 129 (Send) hca mlx5_0
""".splitlines()

# NCCL 2.30: "(func)" in WARN lines; HEAD's "[Rank N] " before the init lines.
V230_WARN = [
    "node2:77:99 [3] transport/net_socket.cc:50 (ncclNetSocketInit) NCCL WARN "
    "NET/Socket : no interface found",
    "node2:77:77 [3] NCCL INFO NCCL version 2.30.7+cuda13.0",
    "node2:77:77 [3] NCCL INFO [Rank 5] ncclCommInitRank comm 0xabc rank 5 nranks 8 cudaDev 3 "
    "nvmlDev 3 busId 9c000 commId 0xdead - Init START",
]

# NCCL 2.14: COMPLETE only, no START line, no commId.
V214 = [
    "node3:12:40 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.4<0>",
    "node3:12:40 [0] NCCL INFO comm 0x55aa rank 3 nranks 4 cudaDev 0 busId 3b000 - Init COMPLETE",
]


def test_parse_v221_rank0() -> None:
    f = parse_nccl_lines(V221_RANK0)
    assert (f.nccl_version, f.cuda_version) == ("2.21.5", "12.4")
    assert (f.bootstrap_if, f.bootstrap_ip) == ("eth0", "10.0.0.1")
    assert f.transport == "Socket"
    assert f.socket_devs == ["eth0:10.0.0.1"]
    assert f.ib_devs == [] and not f.ib_no_device
    assert f.init_start and f.init_complete
    assert f.comm_ids == {"0x9f3c21e5a0b4d7e2"}
    assert f.nranks == 2 and f.bus_ids == ["1b000"]
    assert f.channels == 2 and f.rings_connected
    assert f.via_net == {"NET/Socket/0"}
    assert f.warns == []
    assert f.marker() == 4
    assert "Init COMPLETE" in f.evidence["init"]


def test_parse_v221_rank1_has_no_version() -> None:
    f = parse_nccl_lines(V221_RANK1)
    assert f.nccl_version is None
    assert f.bootstrap_ip == "10.0.0.2"
    assert f.init_start and not f.init_complete
    assert f.marker() == 2
    assert "bootstrap ring" in f.marker_text()


def test_parse_v227_with_launcher_prefix_and_timestamped_warn() -> None:
    f = parse_nccl_lines(V227_RANK1)
    assert f.nccl_version == "2.27.7" and f.cuda_version == "12.9"
    assert (f.bootstrap_if, f.bootstrap_ip) == ("ib0", "192.168.1.2")
    assert f.transport == "IB"
    assert f.ib_devs == ["mlx5_0:1/IB", "mlx5_1:1/RoCE"]
    assert f.init_complete and f.nranks == 4 and f.bus_ids == ["4c000"]
    assert f.comm_ids == {"0x11aa"}
    assert f.warns == [
        "NET/IB : Got completion from peer 10.0.0.3<58622> with status=12 opcode=0 len=0 "
        "vendor err 129 (Send) hca mlx5_0"
    ]
    assert f.marker() == 3  # lazy connect: Init COMPLETE, no channel yet


def test_parse_v230_func_warn_and_rank_prefix() -> None:
    f = parse_nccl_lines(V230_WARN)
    assert f.warns == ["NET/Socket : no interface found"]
    assert f.nccl_version == "2.30.7"
    assert f.init_start and f.nranks == 8 and f.comm_ids == {"0xdead"}


def test_parse_v214_complete_only() -> None:
    f = parse_nccl_lines(V214)
    assert f.init_complete and not f.init_start
    assert f.comm_ids == set() and f.bus_ids == ["3b000"]
    assert f.marker() == 3


def test_ib_gdr_channels_and_no_device() -> None:
    f = parse_nccl_lines(
        [
            "n:1:2 [0] NCCL INFO NET/IB : No device found.",
            "n:1:2 [0] NCCL INFO NET/IB : Using [RO]; OOB eth0:10.0.0.1<0>",
            "n:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA",
            "n:1:2 [0] NCCL INFO Channel 03/0 : 0[0] -> 1[1] via P2P/IPC",
            "n:1:2 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
        ]
    )
    assert f.ib_no_device and f.ib_devs == []
    assert f.via_net == {"NET/IB/0/GDRDMA"}
    assert f.channels == 2 and f.rings_connected


def test_plugin_network_name_with_a_space() -> None:
    f = parse_nccl_lines(["n:1:2 [0] NCCL INFO Using network AWS Libfabric"])
    assert f.transport == "AWS Libfabric"


@pytest.mark.parametrize(
    ("lines", "level"),
    [
        ([], 0),
        (["unrelated torch output"], 0),
        (["NCCL version 2.21.5+cuda12.4"], 1),
        (V221_RANK1[:1], 1),
        (V221_RANK1, 2),
        (V214, 3),
        (V221_RANK0, 4),
    ],
)
def test_marker_ladder(lines: list[str], level: int) -> None:
    f = parse_nccl_lines(lines)
    assert f.marker() == level
    assert f.marker_text()


def test_marker_texts_differ_per_level() -> None:
    texts = set()
    for level, lines in enumerate([[], V221_RANK1[:1], V221_RANK1, V214, V221_RANK0]):
        f = parse_nccl_lines(lines)
        assert f.marker() == level
        texts.add(f.marker_text())
    assert len(texts) == 5


# -- nccl_findings ----------------------------------------------------------------------


def rank(version: str | None = "2.27.7", ifname: str = "eth0", ip: str = "10.0.0.1",
         net: str = "Socket") -> RankFacts:  # fmt: skip
    lines = [f"h:1:1 [0] NCCL INFO Bootstrap: Using {ifname}:{ip}<0>"]
    if version:
        lines.append(f"h:1:1 [0] NCCL INFO NCCL version {version}+cuda12.9")
    lines.append(f"h:1:1 [0] NCCL INFO Using network {net}")
    return parse_nccl_lines(lines)


NODES = {0: "node0", 1: "node0", 2: "node1", 3: "node1"}


def ids(findings: list) -> list[str]:  # type: ignore[type-arg]
    return [f.id for f in findings]


def test_healthy_cluster_has_no_findings() -> None:
    per = {r: rank(ip=f"10.0.0.{r // 2 + 1}") for r in range(4)}
    assert nccl_findings(per, NODES, ib_expected={"node0": False, "node1": False}) == []


def test_loopback_bootstrap_is_an_error_on_multi_node() -> None:
    per = {0: rank(), 1: rank(), 2: rank(ifname="lo", ip="127.0.0.1"), 3: rank()}
    (f,) = nccl_findings(per, NODES)
    assert (f.id, f.severity, f.nodes) == ("AR-BOOT-LOOPBACK", "error", ("node1",))
    assert "Bootstrap: Using lo:127.0.0.1<0>" in f.evidence[0]
    assert "NCCL_SOCKET_IFNAME" in f.fix


def test_loopback_on_a_single_node_is_fine() -> None:
    per = {0: rank(ifname="lo", ip="127.0.0.1"), 1: rank(ifname="lo", ip="127.0.0.1")}
    assert nccl_findings(per, {0: "node0", 1: "node0"}) == []


@pytest.mark.parametrize(("ifname", "ip"), [("docker0", "172.18.0.1"), ("eth1", "172.17.0.2"),
                                            ("veth12ab", "10.1.0.2"), ("tailscale0", "100.64.0.1")])  # fmt: skip
def test_virtual_bridge_bootstrap_is_a_warning(ifname: str, ip: str) -> None:
    per = {0: rank(), 2: rank(ifname=ifname, ip=ip)}
    (f,) = nccl_findings(per, NODES)
    assert (f.id, f.severity, f.nodes) == ("AR-BOOT-VIRTUAL", "warning", ("node1",))


def test_transport_mismatch() -> None:
    per = {0: rank(net="IB"), 1: rank(net="IB"), 2: rank(net="Socket"), 3: rank(net="Socket")}
    (f,) = nccl_findings(per, NODES)
    assert (f.id, f.severity) == ("AR-TRANSPORT-MISMATCH", "error")
    assert f.nodes == ("node0", "node1")
    assert "IB on node0" in f.summary and "Socket on node1" in f.summary
    assert len(f.evidence) == 4


def test_version_mismatch_ignores_ranks_without_a_version_line() -> None:
    per = {0: rank("2.21.5"), 1: rank(None), 2: rank("2.27.7"), 3: rank(None)}
    (f,) = nccl_findings(per, NODES)
    assert (f.id, f.severity) == ("AR-NCCL-VERSION", "error")
    assert "2.21.5 on node0" in f.summary and "2.27.7 on node1" in f.summary
    per = {0: rank("2.21.5"), 1: rank(None), 2: rank(None)}
    assert nccl_findings(per, NODES) == []


def test_ib_present_but_unused() -> None:
    per = {r: rank(net="Socket") for r in range(4)}
    per[2] = parse_nccl_lines(
        [
            "h:1:1 [0] NCCL INFO NET/IB : No device found.",
            "h:1:1 [0] NCCL INFO Using network Socket",
        ]
    )
    (f,) = nccl_findings(per, NODES, ib_expected={"node0": False, "node1": True})
    assert (f.id, f.severity, f.nodes) == ("AR-IB-UNUSED", "warning", ("node1",))
    assert any("No device found" in e for e in f.evidence)
    assert nccl_findings(per, NODES) == []  # nothing expected, nothing to say


def test_unknown_rank_is_named_by_rank_number() -> None:
    per = {7: rank(ifname="lo", ip="127.0.0.1"), 0: rank()}
    (f,) = nccl_findings(per, {0: "node0", 1: "node1"})
    assert f.nodes == ("rank 7",)
