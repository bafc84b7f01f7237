"""Facts every rank states about itself in its log: one typed record per process (NCCL's
host:pid, or the rank a launcher prefix names), resolved to global ranks at the end.
Core layer, stdlib only.

What is read (the format strings are NCCL's, torch's and the launchers' own; see
tests/fixtures/source_sites/ for where each is printed):
  NCCL   "NCCL version 2.21.5+cuda12.4", "Bootstrap : Using [0]eth0:10.0.0.1<0>",
         "NET/Socket : Using [0]eth0:...", "NET/IB : Using [0]mlx5_0:1/RoCE ...; OOB ...",
         "Using network IB", "comm 0x.. rank 3 nranks 8 ... commId 0x.. - Init START",
         "NCCL_IB_GID_INDEX set by environment to 3", "... via NET/IB/0" / "via P2P/IPC"
  torch  "ProcessGroupNCCL initialization options: size: 8, global rank: 3",
         "ProcessGroupNCCL environments: NCCL version: 2.21.5", rendezvous results
         ("master_addr=", "master_port=", "global_world_sizes=[...]")
  Lightning "initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/8"; DeepSpeed "dist_world_size=16"
Only lines the prefilter lets through reach here (their triggers are in
prefilter.CONTEXT_TRIGGERS), and each pattern is tried only behind a plain substring test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

from ddptui.diagnosis.ncclfacts import (
    BOOTSTRAP,
    IB_DEV,
    INIT,
    NETWORK,
    SOCKET_DEV,
    VERSION,
)
from ddptui.diagnosis.ncclfacts import SOCKET_DEVS as SOCKET_USING

IB_USING: Final = re.compile(
    r"NET/IB ?: Using(?P<devs>(?: \[\d+\][\w.-]+:\d+/[\w/]+)*)"
    r"(?: ?\[RO\])? ?(?:; OOB (?P<oobif>[^:\s]+):(?P<oobip>[^<\s]+)<\d+>)?"
)
# NCCL <= 2.4 listed each socket interface on its own line.
OLD_NET: Final = re.compile(r"\bNET : Using interface (?P<if>[^:\s]+):(?P<ip>[^<\s]+)<\d+>")
# Which network plugin NCCL loaded (2.19+ wording, then older): a path, or none.
PLUGIN_PATH: Final = re.compile(
    r"\bPlugin Path : (?P<path>\S+)|NET/Plugin ?: Loaded net plugin (?P<name>.+?)\s*(?:\(|$)"
)
PLUGIN_NONE: Final = re.compile(r"NET/Plugin ?: (?:Could not find: libnccl-net|No plugin found)")
SET_BY_ENV: Final = re.compile(r"\b(?P<var>NCCL_\w+) set by environment to (?P<val>\S*)")
VIA: Final = re.compile(r"(?:Channel|Ring) \d+(?:/\d+)? : .* via (?P<t>NET/\w+|P2P|SHM|CollNet)")
# one edge of a ring or channel: rank[its CUDA device] -> rank[device] over a transport
EDGE: Final = re.compile(r"\b(?P<r1>\d+)\[(?P<d1>\d+)\] -> (?P<r2>\d+)\[(?P<d2>\d+)\]")
# torch's default process group (PG ID 0) states the world; subgroups state their own size.
TORCH_OPTIONS: Final = re.compile(
    r"\[PG ID 0 [^\]]*\] ProcessGroupNCCL initialization options: size: (?P<size>\d+), "
    r"global rank: (?P<rank>\d+)"
)
TORCH_NCCL_VERSION: Final = re.compile(
    r"Rank (?P<rank>\d+)\] ProcessGroupNCCL environments: NCCL version: (?P<ver>[\d.]+)"
)
LIGHTNING: Final = re.compile(r"GLOBAL_RANK: (?P<rank>\d+), MEMBER: (?P<member>\d+)/(?P<world>\d+)")
# torch with TORCH_DISTRIBUTED_DEBUG=DETAIL, before every collective of a rank.
FINGERPRINT: Final = re.compile(
    r"\[Rank (?P<rank>\d+)\] Running collective: CollectiveFingerPrint\(SequenceNumber=(?P<seq>\d+), "
    r"OpType=(?P<op>\w+)"
)
# torchrun's agent waits in the store for the ranks assigned to its own node rank.
# The agent of node rank 0 collects every node's role_info and assigns the ranks.
ASSIGNED: Final = re.compile(r"/torchelastic/(?:assigned_ranks/(?P<node>\d+)\b|role_info/)")
# c10d's store-based barrier (torch < 2.1): every process that ever joined this store key
# counts; more workers than the world means keys left by earlier runs (a FileStore file
# or a long-lived TCPStore reused), so the count can never equal the world again.
STORE_BARRIER: Final = re.compile(
    r"store.based barrier\b.*\(world_size=(?P<world>\d+), worker_count=(?P<count>\d+)"
)
# nccl-tests / rccl-tests list the devices they run on: "#   Rank  0 Pid   1688 on fastmoe device  0"
# (pasted without the "#" too)
TESTS_DEVICE: Final = re.compile(
    r"(?:#|^)\s*Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)\s+device"
)
# logs11: nccl-tests' header ("# Using devices", printed once per run) and its summary
# ("# Avg bus bandwidth    : 3.94145"): with MPI only rank 0 prints them
BENCH_HEADER: Final = re.compile(r"^\s*#\s*Using devices\s*$")
BENCH_SUMMARY: Final = re.compile(r"^\s*#?\s*Avg bus bandwidth\s*: *[\d.]+")
# logs14: a process stating it is rank 0 of a world of 1 (an MPI hello world's "process 0
# of 1", "rank 0 out of 1"), and the launcher's command line asking for N processes
WORLD_OF_ONE: Final = re.compile(r"(?i)\b(?:process(?:or)?|rank|task)\s*#?\s*0\s+(?:out\s+)?of\s+1\b(?![\d.])")
LAUNCH_N: Final = re.compile(
    r"(?:^|[\s$#>:;])(?:mpirun|mpiexec|orterun|prterun)\b[^|;&]*?\s(?:-np?|--np|-c)\s*(?P<n>\d+)\b"
    r"|\bsrun\b[^|;&]*?\s(?:-n\s*|--ntasks[= ])(?P<sn>\d+)\b"
)
# torchrun's launch configuration, one line per key ("  max_nodes : 3"); under the static
# rendezvous its node rank is in rdzv_configs ("{'timeout': '15', 'rank': 1}").
AGENT_NODES: Final = re.compile(r"\b(?P<k>min_nodes|max_nodes)\s+: (?P<v>\d+)\s*$")
AGENT_RANK: Final = re.compile(r"\brdzv_configs\s+: \{.*'rank': '?(?P<rank>\d+)")
# c10d's client socket: the name it was given (one line per name and port) and each address
# that name resolved to and failed (torch's socket.cpp format strings).
C10D_NAME: Final = re.compile(
    r"(?:any network address of|an IPv[46] address of) \((?P<name>[^,\s()]+), (?P<port>\d+)\)"
)
C10D_TRIED: Final = re.compile(
    r"failed to connect to \[?(?P<addr>[^\s\[\]()]+?)\]?:(?P<port>\d+) \(errno"
)
# a GPU model as nccl-tests' device list and torch/framework device lines name it
# ("device  0 [0000:00:06] NVIDIA H100 80GB HBM3"); read by the rule LOGS-NCCL-PREDATES-GPU
GPU_MODEL: Final = re.compile(r"\bNVIDIA (?P<model>(?:GeForce )?[A-Z][\w-]*(?: [\w-]+){0,3})")
KV: Final = re.compile(
    r"\b(?P<k>master_addr|master_port|group_world_size|dist_world_size|global_world_sizes|"
    r"MASTER_ADDR|MASTER_PORT|WORLD_SIZE|backend)\s*[=:]\s*'?(?P<v>\[[\d, ]*\]|[^\s,'\]]+)"
)


@dataclass
class ProcFacts:
    """What one process said about itself.  `evidence` holds the line behind each fact
    ("version", "bootstrap", "socket", "ib", "init", "world", "rank") as "where: text"."""

    source: str
    host: str | None = None
    pid: int | None = None
    rank: int | None = None  # global rank, when any line said it
    world_size: int | None = None
    nccl_version: str | None = None
    cuda_version: str | None = None
    bootstrap_if: str | None = None
    bootstrap_ip: str | None = None
    network: str | None = None  # "Socket", "IB", a plugin's name
    net_plugin: str | None = None  # the external net plugin NCCL loaded, "internal" for none
    socket_devs: list[tuple[str, str]] = field(default_factory=list)
    ib_devs: list[str] = field(default_factory=list)  # "mlx5_0:1/RoCE"
    oob_if: str | None = None
    oob_ip: str | None = None
    comm_ranks: dict[str, int] = field(default_factory=dict)  # commId (or "?") -> rank
    # gpu11: commId -> (nranks, the line) of a communicator it started and never completed
    comm_pending: dict[str, tuple[int, str]] = field(default_factory=dict)
    comm_ids: set[str] = field(default_factory=set)  # gpu11: every commId it started or completed
    transports: set[str] = field(default_factory=set)  # NET/IB, NET/Socket, P2P, SHM
    nccl_env: dict[str, str] = field(default_factory=dict)
    launcher: dict[str, str] = field(default_factory=dict)  # master_addr, master_port, ...
    init_complete: bool = False
    collective: tuple[int, str] | None = None  # the last (SequenceNumber, OpType) it entered
    node_rank: int | None = None  # torchrun's group rank (node rank) its agent waits as
    store_count: tuple[int, int] | None = None  # store barrier (worker_count, world_size)
    nnodes: dict[str, int] = field(default_factory=dict)  # torchrun's min_nodes, max_nodes
    evidence: dict[str, str] = field(default_factory=dict)

    @property
    def interfaces(self) -> list[tuple[str, str, str]]:
        """(role, interface, address) NCCL chose: bootstrap, then NET/Socket devices."""
        out = []
        if self.bootstrap_if is not None and self.bootstrap_ip is not None:
            out.append(("bootstrap", self.bootstrap_if, self.bootstrap_ip))
        out += [("NET/Socket", name, addr) for name, addr in self.socket_devs]
        if self.oob_if is not None and self.oob_ip is not None:
            out.append(("NET/IB OOB", self.oob_if, self.oob_ip))
        return out


ProcKey = tuple[str, str | None, int | None, int | None]  # source, host, pid, rank


class FactCollector:
    """Feeds on candidate lines; `processes(pid_rank)` resolves them to ranks."""

    def __init__(self) -> None:
        self.procs: dict[ProcKey, ProcFacts] = {}
        self.claims: dict[tuple[str, int], int] = {}  # (source, rank) -> launcher lines
        # c10d: (name it was given, address it tried, port) -> the lines saying so
        self.c10d_pairs: dict[tuple[str, str, str], list[str]] = {}
        self.gpus: dict[str, str] = {}  # GPU model named after "NVIDIA " -> "where: line"
        self._tried: list[tuple[str, str, str]] = []  # addresses failed, their name not yet said
        # NCCL's intra-node edges (P2P, SHM): (rank, device, peer rank, device, "where: line")
        self.local_edges: list[tuple[int, int, int, int, str]] = []
        # logs11: nccl-tests' summaries per source since its last header; the first pair
        # one source printed with no header between them ("where: line")
        self._bench: dict[str, list[str]] = {}
        self.bench_repeated: tuple[str, ...] = ()
        # logs13: nccl-tests' header per source with no device line or summary after it yet;
        # the first two headers one source printed back to back ("where: line")
        self._bench_open: dict[str, str] = {}
        self.bench_headers: tuple[str, ...] = ()
        # logs14: lines stating "rank 0 of 1", and the first launch line asking for N
        self.world_of_one: list[str] = []
        self.launch_n: tuple[int, str] | None = None

    def _proc(self, source: str, host: str | None, pid: int | None, rank: int | None) -> ProcFacts:
        key = (source, host, pid, None if pid is not None else rank)
        p = self.procs.get(key)
        if p is None:
            if len(self.procs) >= 4096:  # bounded: a huge interleaved log keeps the first
                return ProcFacts(source)
            p = self.procs[key] = ProcFacts(source, host, pid, rank)
        return p

    def feed(
        self, source: str, where: str, text: str, host: str | None, pid: int | None, rank: int | None
    ) -> None:
        self._unowned(where, text)
        self._world(where, text)
        if "Avg bus bandwidth" in text or "Using devices" in text:
            self._bench_line(source, where, text)
        # logs15: NCCL's own "NET/Socket : Using [0]if:addr<0>" pasted without its
        # "host:pid:tid [dev] NCCL INFO" prefix states the devices of this file's process
        if ("NCCL" in text and pid is not None) or (pid is None and "NET/Socket : Using [" in text):
            self._nccl(self._proc(source, host, pid, rank), where, text)
        if "GLOBAL_RANK: " in text and (m := LIGHTNING.search(text)) is not None:
            # Printed once per process: a second line for one rank is a second process.
            n = self.claims[(source, int(m["rank"]))] = self.claims.get((source, int(m["rank"])), 0) + 1
            p = self._proc(source, f"{host or ''}#{n}" if n > 1 else host, None, int(m["rank"]))
            p.rank, p.world_size = int(m["rank"]), int(m["world"])
            p.evidence.setdefault("world", f"{where}: {text.strip()}")
            p.evidence.setdefault("rank", f"{where}: {text.strip()}")
            return
        if "Running collective" in text and (m := FINGERPRINT.search(text)) is not None:
            r = int(m["rank"])
            p = self._proc(source, host, pid, r)
            p.rank = r
            seq = int(m["seq"])
            if p.collective is None or seq >= p.collective[0]:
                p.collective = (seq, m["op"])
                p.evidence["collective"] = f"{where}: {text.strip()[:300]}"
            return
        if self._store(source, where, text, host, pid, rank) or self._agent(
            source, where, text, host, pid, rank
        ):
            return
        if "initialization options" in text and (m := TORCH_OPTIONS.search(text)) is not None:
            r = int(m["rank"])
            p = self._proc(source, host, pid, r)
            p.rank, p.world_size = r, int(m["size"])
            p.evidence.setdefault("world", f"{where}: {text.strip()}")
            return
        if "environments: NCCL version" in text and (m := TORCH_NCCL_VERSION.search(text)):
            p = self._proc(source, host, pid, int(m["rank"]))
            p.rank = int(m["rank"])
            if p.nccl_version is None:
                p.nccl_version = m["ver"]
                p.evidence["version"] = f"{where}: {text.strip()}"
            return
        if ("=" in text or ":" in text) and (kvs := KV.findall(text)):
            p = self._proc(source, host, pid, rank)
            for k, v in kvs:
                p.launcher.setdefault(k.lower(), v)
                # The world in ranks (group_world_size counts nodes, not ranks).
                world = v.strip("[]").split(",")[0].strip()
                if k in ("WORLD_SIZE", "dist_world_size", "global_world_sizes") and world.isdigit():
                    p.world_size = p.world_size or int(world)
                    p.evidence.setdefault("world", f"{where}: {text.strip()}")

    def _world(self, where: str, text: str) -> None:
        """logs14: a process stating it is rank 0 of a world of 1; the launcher's command
        line asking for N processes (the first one)."""
        if "of 1" in text and len(self.world_of_one) < 64 and WORLD_OF_ONE.search(text):
            self.world_of_one.append(f"{where}: {text.strip()[:300]}")
        if self.launch_n is None and "run" in text and (m := LAUNCH_N.search(text)) is not None:
            self.launch_n = (int(m["n"] or m["sn"]), f"{where}: {text.strip()[:300]}")

    def _bench_line(self, source: str, where: str, text: str) -> None:
        """nccl-tests' header starts a run; a second summary before the next header is a
        second process that printed its own (logs11: bench_repeated); a second header
        before any device line or summary of the first is a second process starting a test
        of its own at the same time (logs13: bench_headers)."""
        if BENCH_HEADER.search(text):
            self._bench[source] = []
            line = f"{where}: {text.strip()[:300]}"
            if (prev := self._bench_open.get(source)) is not None and not self.bench_headers:
                self.bench_headers = (prev, line)
            if len(self._bench_open) < 1024:
                self._bench_open[source] = line
        elif BENCH_SUMMARY.search(text) and len(self._bench) < 1024:
            self._bench_open.pop(source, None)
            seen = self._bench.setdefault(source, [])
            seen.append(f"{where}: {text.strip()[:300]}")
            if len(seen) >= 2 and not self.bench_repeated:
                self.bench_repeated = tuple(seen[:2])

    def _store(
        self, source: str, where: str, text: str, host: str | None, pid: int | None, rank: int | None
    ) -> bool:
        """What a process said while waiting in a store: torchrun's agent for its node rank,
        c10d's store barrier for its workers."""
        if "/torchelastic/" in text and (m := ASSIGNED.search(text)) is not None:
            p = self._proc(source, host, pid, rank)
            if p.node_rank is None:
                p.node_rank = int(m["node"]) if m["node"] is not None else 0
                p.evidence["node_rank"] = f"{where}: {text.strip()[:300]}"
            return True
        if "_count=" in text and (m := STORE_BARRIER.search(text)) is not None:
            p = self._proc(source, host, pid, rank)
            count, world = int(m["count"]), int(m["world"])
            if p.store_count is None or count > p.store_count[0]:
                p.store_count = (count, world)
                p.evidence["store_count"] = f"{where}: {text.strip()[:300]}"
            return True
        return False

    def _c10d(self, where: str, text: str) -> None:
        """Pair the name c10d was given with the addresses it tried for it: c10d prints
        each address that failed, then the name ("any network address of (name, port)"),
        or both in one exception message."""
        said = f"{where}: {text.strip()[:300]}"
        names = [(m["name"], m["port"]) for m in C10D_NAME.finditer(text)]
        tried = [(m["addr"], m["port"], said) for m in C10D_TRIED.finditer(text)]
        if names:
            tried += self._tried
            self._tried = []
            for name, port in names:
                for addr, p, ev in tried:
                    if p == port and len(self.c10d_pairs) < 256:
                        self.c10d_pairs.setdefault((name, addr, port), [ev, said] if ev != said else [said])
        elif tried:
            self._tried = (self._tried + tried)[-16:]

    def _agent(
        self, source: str, where: str, text: str, host: str | None, pid: int | None, rank: int | None
    ) -> bool:
        """torchrun's launch configuration: how many nodes, and (static rendezvous) which
        node rank this agent is; nccl-tests' device list: the host of each rank."""
        if "Pid " in text and (m := TESTS_DEVICE.search(text)) is not None:
            self._bench_open.pop(source, None)  # logs13: the header's device list
            p = self._proc(source, m["host"], None, int(m["rank"]))
            p.rank = int(m["rank"])
            p.evidence.setdefault("rank", f"{where}: {text.strip()}")
            return True
        if "_nodes " not in text and "_configs " not in text:
            return False
        if (m := AGENT_NODES.search(text)) is not None:
            p = self._proc(source, host, pid, rank)
            p.nnodes.setdefault(m["k"], int(m["v"]))
            p.evidence.setdefault("nnodes", f"{where}: {text.strip()[:300]}")
            return True
        if (m := AGENT_RANK.search(text)) is not None:
            p = self._proc(source, host, pid, rank)
            if p.node_rank is None:
                p.node_rank = int(m["rank"])
                p.evidence["node_rank"] = f"{where}: {text.strip()[:300]}"
            return True
        return False

    @staticmethod
    def _plugin(p: ProcFacts, said: str, text: str) -> None:
        if (m := PLUGIN_PATH.search(text)) is not None:
            p.net_plugin = (m["path"] or m["name"] or "").strip()
            p.evidence["net_plugin"] = said
        elif p.net_plugin is None and PLUGIN_NONE.search(text):
            p.net_plugin = "internal"
            p.evidence["net_plugin"] = said

    def _nccl(self, p: ProcFacts, where: str, text: str) -> None:
        said = f"{where}: {text.strip()}"
        if "NCCL version " in text and p.nccl_version is None and (m := VERSION.search(text)):
            p.nccl_version, p.cuda_version = m["ver"], m["cuda"]
            p.evidence["version"] = said
        elif "Bootstrap" in text and p.bootstrap_if is None and (m := BOOTSTRAP.search(text)):
            p.bootstrap_if, p.bootstrap_ip = m["if"], m["ip"]
            p.evidence["bootstrap"] = said
        elif "Plugin" in text:
            self._plugin(p, said, text)
        elif "Using interface" in text and (m := OLD_NET.search(text)):
            if (m["if"], m["ip"]) not in p.socket_devs:
                p.socket_devs.append((m["if"], m["ip"]))
            p.evidence.setdefault("socket", said)
        elif "NET/Socket" in text and (m := SOCKET_USING.search(text)):
            p.socket_devs = [(d["name"], d["addr"]) for d in SOCKET_DEV.finditer(m["devs"])]
            p.evidence.setdefault("socket", said)
        elif "NET/IB" in text and (m := IB_USING.search(text)):
            p.ib_devs = [d["dev"] for d in IB_DEV.finditer(m["devs"] or "")]
            p.oob_if, p.oob_ip = m["oobif"], m["oobip"]
            p.evidence.setdefault("ib", said)
        elif "Using network" in text and (m := NETWORK.search(text)):
            p.network = m["net"]
            p.evidence.setdefault("network", said)
        elif " nranks " in text and (m := INIT.search(text)):
            _init(p, m, said)
        elif "set by environment" in text and (m := SET_BY_ENV.search(text)):
            p.nccl_env.setdefault(m["var"], m["val"].rstrip("."))
            p.evidence.setdefault(f"env:{m['var']}", said)
        elif " via " in text and (m := VIA.search(text)):
            p.transports.add(m["t"])

    def _unowned(self, where: str, text: str) -> None:
        """Facts that belong to no one process: c10d's name and address pairs, and the
        intra-node edges of NCCL's rings (any version; "INFO Ring" before 2.5)."""
        if "connect to " in text:
            self._c10d(where, text)
        if " via " in text and "] -> " in text:
            self._edge(where, text)
        if "NVIDIA " in text and len(self.gpus) < 16 and (m := GPU_MODEL.search(text)):
            self.gpus.setdefault(m["model"], f"{where}: {text.strip()[:300]}")

    def _edge(self, where: str, text: str) -> None:
        """An intra-node edge of a ring or channel (P2P or SHM) and its ranks' devices."""
        m = VIA.search(text)
        e = EDGE.search(text) if m is not None and m["t"] in ("P2P", "SHM") else None
        if e is not None and len(self.local_edges) < 256:
            r1, d1, r2, d2 = (int(e[k]) for k in ("r1", "d1", "r2", "d2"))
            self.local_edges.append((r1, d1, r2, d2, f"{where}: {text.strip()[:300]}"))

    def processes(self, pid_rank: dict[tuple[str, int], int]) -> list[ProcFacts]:
        """Every process, its rank filled from what the whole log told about its pid; what
        a rank said without a pid (torch's glog lines, a launcher's prefix) joins the one
        NCCL process of that rank in that source."""
        for p in self.procs.values():
            if p.rank is None and p.pid is not None:
                p.rank = pid_rank.get((p.source, p.pid))
        with_pid: dict[tuple[str, int], list[ProcFacts]] = {}
        for p in self.procs.values():
            if p.pid is not None and p.rank is not None:
                with_pid.setdefault((p.source, p.rank), []).append(p)
        out = []
        for p in self.procs.values():
            owners = with_pid.get((p.source, p.rank), []) if p.rank is not None else []
            if p.pid is None and len(owners) == 1 and (p.host is None or "#" not in p.host):
                _join(owners[0], p)
                continue
            out.append(p)
        return out


def _init(p: ProcFacts, m: re.Match[str], said: str) -> None:
    """A process may join several communicators (subgroups): its world is the largest,
    its global rank the one it has there."""
    nranks = int(m["nranks"])
    if p.world_size is None or nranks > p.world_size:
        p.world_size, p.rank = nranks, int(m["rank"])
    elif nranks == p.world_size and p.rank is None:
        p.rank = int(m["rank"])
    p.comm_ranks[m["commId"] or m["comm"]] = int(m["rank"])
    if m["commId"]:
        p.comm_ids.add(m["commId"])
    if m["commId"] and m["what"] == "START":
        p.comm_pending.setdefault(m["commId"], (nranks, said))
    elif m["commId"]:
        p.comm_pending.pop(m["commId"], None)
    p.evidence.setdefault("init", said)
    if m["what"] == "COMPLETE":
        p.evidence.setdefault("complete", said)  # gpu12: where its init completed
    p.init_complete = p.init_complete or m["what"] == "COMPLETE"


def _join(into: ProcFacts, p: ProcFacts) -> None:
    """Facts of `p` that `into` lacks."""
    for name in ("world_size", "nccl_version", "cuda_version", "bootstrap_if", "bootstrap_ip",
                 "network", "oob_if", "oob_ip", "collective", "node_rank", "net_plugin", "store_count"):
        if getattr(into, name) is None:
            setattr(into, name, getattr(p, name))
    for k, n in p.nnodes.items():
        into.nnodes.setdefault(k, n)
    into.socket_devs = into.socket_devs or p.socket_devs
    into.ib_devs = into.ib_devs or p.ib_devs
    into.transports |= p.transports
    for k, v in p.nccl_env.items():
        into.nccl_env.setdefault(k, v)
    for k, v in p.launcher.items():
        into.launcher.setdefault(k, v)
    for k, v in p.evidence.items():
        into.evidence.setdefault(k, v)
