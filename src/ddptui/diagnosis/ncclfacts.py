"""Facts per rank from NCCL_DEBUG=INFO output, and the cross-rank findings they support.

Formats follow failure-signatures.md sections 1-2 (line prefix, R1-R8) across NCCL
2.14 .. 2.30.  Core layer, stdlib only.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.kb import kb_finding
from ddptui.diagnosis.netmatch import is_loopback

# Section 1.1: optional 2.26+ timestamp, host:pid:tid [dev], optional file:line and
# 2.30 "(func)", then the level.  re.search, so launcher prefixes ([rank3]:) may precede.
NCCL_LINE: Final = re.compile(
    r"(?:\[(?P<ts>\d{4}-\d\d-\d\d[ T][\d:.,]+)\]\s*)?"
    r"(?P<host>[A-Za-z0-9_.-]+):(?P<pid>\d+):(?P<tid>\d+)\s+\[(?P<dev>\d+)\]\s+"
    r"(?:(?P<file>[\w./-]+\.(?:cc|cu|c|h)):(?P<line>\d+)(?:\s+\((?P<func>[^)]*)\))?\s+)?"
    r"NCCL\s+(?P<level>INFO|WARN|TRACE|CALL)\s(?P<msg>.*)$"
)
VERSION: Final = re.compile(
    r"NCCL version (?P<ver>\d+\.\d+\.\d+[^+\s]*)\+cuda(?P<cuda>\d+\.\d+)"
)  # R1
# The address may carry an IPv6 zone (fe80::1%ip6tnl0): anything up to the port's "<".
BOOTSTRAP: Final = re.compile(
    r"Bootstrap ?: Using (?:\[\d+\])?(?P<if>[^:\s]+):(?P<ip>[^<\s]+)<(?P<port>\d+)>"
)  # R2
NETWORK: Final = re.compile(r"Using network (?P<net>\S.*?)\s*$")  # R4, plugin names have spaces
SOCKET_DEVS: Final = re.compile(r"NET/Socket ?: Using(?P<devs>(?: \[\d+\][^:\s]+:[^<\s]+<\d+>)+)")
SOCKET_DEV: Final = re.compile(r"\[\d+\](?P<name>[^:\s]+):(?P<addr>[^<\s]+)<\d+>")
IB_DEVS: Final = re.compile(
    r"NET/IB ?: Using(?P<devs>(?: \[\d+\][\w.-]+:\d+/(?:IB|RoCE|UNSPECIFIED))*)"
)
IB_DEV: Final = re.compile(r"\[\d+\](?P<dev>[\w.-]+:\d+/\w+)")
IB_NODEV: Final = re.compile(r"NET/IB ?: No device found")
INIT: Final = re.compile(
    r"comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev \d+"
    r"(?: nvmlDev \d+)? busId (?P<busId>[0-9a-f]+)(?: commId (?P<commId>0x[0-9a-f]+))?"
    r".*- Init (?P<what>START|COMPLETE)"
)  # R5, all versions (2.21+ prefix the API name, HEAD prefixes "[Rank N] ")
RING: Final = re.compile(r"Channel (?P<ch>\d{2})/(?P<nch>\d{2}) :(?P<ranks>(?:\s+\d+)+)")  # R6
CHANNEL_PEER: Final = re.compile(
    r"Channel (?P<ch>\d\d)/\d+ : \d+\[\d+\] -> \d+\[\d+\] (?:\[(?:send|receive)\] )?via "
    r"(?P<transport>NET/(?P<net>[^/\s]+)/(?P<netdev>\d+)(?:\(\d+\))?(?P<gdr>/GDRDMA)?"
    r"|P2P/[\w/ ]+|SHM/[\w/]+)"
)
RINGS_CONNECTED: Final = re.compile(r"Connected all rings")

MARKER_TEXT: Final = (
    "no NCCL output: stuck before NCCL (rendezvous or TCPStore, or waiting for rank 0's "
    "NCCL unique id in the store)",
    "NCCL started (bootstrap interface chosen) but no Init START: waiting for rank 0's unique id",
    "Init START without Init COMPLETE: stuck in the NCCL bootstrap ring (TCP to the peers' "
    "ephemeral ports) or in topology detection",
    "Init COMPLETE but no channel connected: stuck connecting the transport (NET/IB or "
    "NET/Socket; NCCL 2.22+ connects lazily at the first collective)",
    "channels connected: the collective itself (data path) hung or failed",
)
VIRTUAL_IF_PREFIXES: Final = ("docker", "virbr", "veth", "cni", "flannel", "cali", "tailscale")
DOCKER_NET: Final = ipaddress.ip_network("172.17.0.0/16")


@dataclass
class RankFacts:
    """What one rank's NCCL INFO output says.  Device lists hold "name:detail" strings
    ("eth0:10.0.0.1", "mlx5_0:1/IB"); `channel_ids` are the channel numbers behind
    `channels`; `evidence` keeps the line behind each fact ("version", "bootstrap",
    "transport", "ib", "init")."""

    nccl_version: str | None = None
    cuda_version: str | None = None
    bootstrap_if: str | None = None
    bootstrap_ip: str | None = None
    transport: str | None = None
    socket_devs: list[str] = field(default_factory=list)
    ib_devs: list[str] = field(default_factory=list)
    ib_no_device: bool = False
    init_start: bool = False
    init_complete: bool = False
    comm_ids: set[str] = field(default_factory=set)
    nranks: int | None = None
    bus_ids: list[str] = field(default_factory=list)
    channels: int = 0
    rings_connected: bool = False
    via_net: set[str] = field(default_factory=set)
    warns: list[str] = field(default_factory=list)
    evidence: dict[str, str] = field(default_factory=dict)
    channel_ids: set[int] = field(default_factory=set)

    def marker(self) -> int:
        """R8 progress ladder: 0 nothing, 1 bootstrap (or version) seen, 2 Init START,
        3 Init COMPLETE, 4 channels or rings connected."""
        if self.channels or self.rings_connected or self.via_net:
            return 4
        if self.init_complete:
            return 3
        if self.init_start:
            return 2
        if self.bootstrap_if is not None or self.nccl_version is not None:
            return 1
        return 0

    def marker_text(self) -> str:
        """What the rank was waiting for when its output stopped at marker()."""
        return MARKER_TEXT[self.marker()]

    def _feed(self, raw: str) -> None:
        parsed = NCCL_LINE.search(raw)
        level, msg = (parsed["level"], parsed["msg"]) if parsed else (None, raw)
        if level == "WARN":
            self.warns.append(msg.strip())
            return
        if (m := VERSION.search(msg)) and self.nccl_version is None:
            self.nccl_version, self.cuda_version = m["ver"], m["cuda"]
            self.evidence["version"] = raw
        elif (m := BOOTSTRAP.search(msg)) and self.bootstrap_if is None:
            self.bootstrap_if, self.bootstrap_ip = m["if"], m["ip"]
            self.evidence["bootstrap"] = raw
        elif m := NETWORK.search(msg):
            self.transport = m["net"]
            self.evidence["transport"] = raw
        elif m := SOCKET_DEVS.search(msg):
            self.socket_devs = [f"{d['name']}:{d['addr']}" for d in SOCKET_DEV.finditer(m["devs"])]
        elif IB_NODEV.search(msg):
            self.ib_no_device = True
            self.evidence["ib"] = raw
        elif m := IB_DEVS.search(msg):
            self.ib_devs = [d["dev"] for d in IB_DEV.finditer(m["devs"])]
        elif m := INIT.search(msg):
            self._init(m, raw)
        elif m := CHANNEL_PEER.search(msg):
            self.channel_ids.add(int(m["ch"]))
            if m["net"] is not None:
                self.via_net.add(f"NET/{m['net']}/{m['netdev']}{m['gdr'] or ''}")
        elif m := RING.search(msg):
            self.channel_ids.add(int(m["ch"]))
        elif RINGS_CONNECTED.search(msg):
            self.rings_connected = True
        self.channels = len(self.channel_ids)

    def _init(self, m: re.Match[str], raw: str) -> None:
        if m["what"] == "START":
            self.init_start = True
        else:
            self.init_complete = True
            self.evidence.setdefault("init", raw)
        if m["commId"]:
            self.comm_ids.add(m["commId"])
        self.nranks = int(m["nranks"])
        if m["busId"] not in self.bus_ids:
            self.bus_ids.append(m["busId"])


def parse_nccl_lines(lines: Iterable[str]) -> RankFacts:
    """Facts from one rank's output (any mix of NCCL and other lines)."""
    facts = RankFacts()
    for raw in lines:
        if "NCCL" in raw or "Channel" in raw or "Bootstrap" in raw:  # cheap pre-filter
            facts._feed(raw.rstrip("\n"))
    return facts


def _node(node_of_rank: dict[int, str], rank: int) -> str:
    return node_of_rank.get(rank, f"rank {rank}")


def _nodes(node_of_rank: dict[int, str], ranks: Iterable[int]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(_node(node_of_rank, r) for r in sorted(ranks)))


def _is_loopback(facts: RankFacts) -> bool:
    return (facts.bootstrap_if or "").startswith("lo") or (
        facts.bootstrap_ip is not None and is_loopback(facts.bootstrap_ip)
    )


def _is_virtual(facts: RankFacts) -> bool:
    if (facts.bootstrap_if or "").startswith(VIRTUAL_IF_PREFIXES):
        return True
    try:
        return ipaddress.ip_address((facts.bootstrap_ip or "").split("%")[0]) in DOCKER_NET
    except ValueError:
        return False


def _evidence(
    per_rank: dict[int, RankFacts], node_of_rank: dict[int, str], ranks: Iterable[int], key: str
) -> tuple[str, ...]:
    out = []
    for r in sorted(ranks):
        line = per_rank[r].evidence.get(key)
        if line is not None:
            out.append(f"rank {r} ({_node(node_of_rank, r)}): {line.strip()}")
    return tuple(out)


def _by_value(per_rank: dict[int, RankFacts], attr: str) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for r in sorted(per_rank):
        value = getattr(per_rank[r], attr)
        if value is not None:
            groups.setdefault(value, []).append(r)
    return groups


def _describe(groups: dict[str, list[int]], node_of_rank: dict[int, str]) -> str:
    return "; ".join(
        f"{value} on {', '.join(_nodes(node_of_rank, ranks))}" for value, ranks in groups.items()
    )


def _loopback_finding(
    per_rank: dict[int, RankFacts], node_of_rank: dict[int, str]
) -> Finding | None:
    ranks = [r for r in sorted(per_rank) if _is_loopback(per_rank[r])]
    if not ranks or len(set(node_of_rank.values())) <= 1:
        return None
    return kb_finding(
        "AR-BOOT-LOOPBACK",
        _nodes(node_of_rank, ranks),
        "NCCL bootstraps on the loopback interface",
        _evidence(per_rank, node_of_rank, ranks, "bootstrap"),
    )


def _virtual_finding(
    per_rank: dict[int, RankFacts], node_of_rank: dict[int, str]
) -> Finding | None:
    ranks = [
        r for r in sorted(per_rank) if _is_virtual(per_rank[r]) and not _is_loopback(per_rank[r])
    ]
    if not ranks:
        return None
    return kb_finding(
        "AR-BOOT-VIRTUAL",
        _nodes(node_of_rank, ranks),
        "NCCL bootstraps on a virtual bridge interface",
        _evidence(per_rank, node_of_rank, ranks, "bootstrap"),
    )


def _mismatch_finding(
    per_rank: dict[int, RankFacts], node_of_rank: dict[int, str], attr: str
) -> Finding | None:
    groups = _by_value(per_rank, attr)
    if len(groups) <= 1:
        return None
    ranks = [r for rs in groups.values() for r in rs]
    if attr == "transport":
        return kb_finding(
            "AR-TRANSPORT-MISMATCH",
            _nodes(node_of_rank, ranks),
            f"Ranks use different NCCL networks: {_describe(groups, node_of_rank)}",
            _evidence(per_rank, node_of_rank, ranks, "transport"),
        )
    return kb_finding(
        "AR-NCCL-VERSION",
        _nodes(node_of_rank, ranks),
        f"NCCL versions differ: {_describe(groups, node_of_rank)}",
        _evidence(per_rank, node_of_rank, ranks, "version"),
    )


def _ib_unused_finding(
    per_rank: dict[int, RankFacts], node_of_rank: dict[int, str], ib_expected: dict[str, bool]
) -> Finding | None:
    ranks = [
        r
        for r in sorted(per_rank)
        if ib_expected.get(_node(node_of_rank, r)) and per_rank[r].transport == "Socket"
    ]
    if not ranks:
        return None
    evidence = _evidence(per_rank, node_of_rank, ranks, "transport")
    evidence += _evidence(per_rank, node_of_rank, ranks, "ib")
    return kb_finding(
        "AR-IB-UNUSED",
        _nodes(node_of_rank, ranks),
        "InfiniBand is available but NCCL uses sockets",
        evidence,
    )


def nccl_findings(
    per_rank: dict[int, RankFacts],
    node_of_rank: dict[int, str],
    *,
    ib_expected: dict[str, bool] | None = None,
) -> list[Finding]:
    """Cross-rank checks: loopback or virtual bootstrap interfaces, transport or version
    mismatch, IB present but unused.  Nodes are named through node_of_rank."""
    candidates = [
        _loopback_finding(per_rank, node_of_rank),
        _virtual_finding(per_rank, node_of_rank),
        _mismatch_finding(per_rank, node_of_rank, "transport"),
        _mismatch_finding(per_rank, node_of_rank, "nccl_version"),
        _ib_unused_finding(per_rank, node_of_rank, ib_expected or {}),
    ]
    return [f for f in candidates if f is not None]
