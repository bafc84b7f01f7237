"""What the job probe saw on each node, as typed immutable data. Pure core.

Built from the probe's JSON records (probes/job.py); every value was redacted on the
node. Missing facts are None ("n/a"), never an exception."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddptui.job.stacks import Dump, Place, parse_dump, place_of, stack_key


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@dataclass(frozen=True)
class StackSample:
    """One py-spy dump of one rank (or why there is none)."""

    sample: int
    dump: Dump | None
    error: str | None
    blocking: bool = False

    @property
    def place(self) -> Place:
        return place_of(self.dump.main if self.dump else None)

    @property
    def key(self) -> tuple[tuple[str, str, int | None], ...]:
        return stack_key(self.dump.main if self.dump else None)


@dataclass(frozen=True)
class Output:
    """Where a rank's stdout/stderr goes and how it moved during the look."""

    kind: str  # file, pipe, socket, tty, null, other, unknown
    path: str | None
    size: int | None = None
    grew: int | None = None  # bytes written during the sampling window
    age_s: float | None = None  # seconds since the file last changed


@dataclass(frozen=True)
class RankView:
    node: str
    pid: int
    rank: int | None
    local_rank: int | None
    world_size: int | None
    group_rank: int | None
    state: str  # R S D Z T, or "gone" when it exited during the look
    cpu_pct: float | None
    rss_bytes: int | None
    threads: int | None
    started: float | None
    wchan: str | None
    cmd: str
    stdout: Output
    stderr: Output
    env: dict[str, str]
    gpu: dict[str, Any] | None
    stacks: tuple[StackSample, ...] = ()

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"

    @property
    def output_age_s(self) -> float | None:
        """Seconds since its output (a file) last grew; None when it goes elsewhere."""
        ages = [o.age_s for o in (self.stdout, self.stderr) if o.age_s is not None]
        return min(ages) if ages else None

    @property
    def output_grew(self) -> bool:
        return any((o.grew or 0) > 0 for o in (self.stdout, self.stderr))

    def good_stacks(self) -> list[StackSample]:
        return [s for s in self.stacks if s.dump is not None and s.dump.threads]

    @property
    def stack_error(self) -> str | None:
        errors = [s.error for s in self.stacks if s.error]
        return errors[-1] if errors and not self.good_stacks() else None


@dataclass(frozen=True)
class LogFile:
    node: str  # the node that read it
    path: str
    lines: tuple[str, ...]
    pids: tuple[int, ...]  # the processes on `node` writing to it (fd 1/2)
    age_s: float | None
    error: str | None = None
    fid: dict[str, Any] | None = None  # what identifies it across nodes (probes/_fileid.py)
    seen_on: tuple[str, ...] = ()  # every node that sees this same file (shared filesystem)
    writers: tuple[str, ...] = ()  # the nodes whose ranks write to it; () = not known

    @property
    def shared(self) -> bool:
        return len(self.seen_on) > 1


@dataclass(frozen=True)
class Candidate:
    node: str
    pid: int
    cmd: str
    started: float | None
    ranks: tuple[int, ...]
    key: str


@dataclass(frozen=True)
class NodeView:
    """One node: reachable or not, the job's processes there, and what they show."""

    node: str
    problem: str | None = None  # why nothing could be looked at (unreachable, probe error)
    hostname: str | None = None
    boot: str | None = None  # the kernel's boot id
    user: str | None = None
    ptrace_scope: int | None = None
    cap_sys_ptrace: bool | None = None
    me_uid: int | None = None
    candidates: tuple[Candidate, ...] = ()
    agent: dict[str, Any] | None = None
    ranks: tuple[RankView, ...] = ()
    logs: tuple[LogFile, ...] = ()
    ras: tuple[dict[str, Any], ...] = ()
    fr: tuple[dict[str, Any], ...] = ()
    fr_config: dict[str, Any] | None = None
    inspector: tuple[dict[str, Any], ...] = ()  # NCCL Inspector plugin: collectives per rank
    gpu_note: str | None = None
    gpu_devices: bool = False  # /dev/nvidiactl exists: a GPU node
    stacks_unavailable: str | None = None
    evidence: tuple[str, ...] = field(default_factory=tuple)

    @property
    def found(self) -> bool:
        return self.agent is not None


def _output(raw: object) -> Output:
    d = raw if isinstance(raw, dict) else {}
    return Output(
        str(d.get("kind") or "unknown"),
        d.get("path") if isinstance(d.get("path"), str) else None,
        _int(d.get("size")),
        _int(d.get("grew")),
        _float(d.get("age_s")),
    )


def node_from_records(node: str, records: list[dict[str, Any]]) -> NodeView:
    """A NodeView from the probe's records (what a node answered, however odd)."""
    host = next((r for r in records if r.get("kind") == "host"), {})
    cands = next((r for r in records if r.get("kind") == "candidates"), {})
    agent = next((r for r in records if r.get("kind") == "agent"), None)
    stacks: dict[int, list[StackSample]] = {}
    for r in records:
        if r.get("kind") != "stack" or _int(r.get("pid")) is None:
            continue
        text = str(r.get("text") or "")
        dump = parse_dump(text) if r.get("rc") == 0 and text.strip() else None
        error = None if dump is not None else (str(r.get("error") or "") or "py-spy failed")
        stacks.setdefault(int(r["pid"]), []).append(
            StackSample(int(r.get("sample") or 0), dump, error, bool(r.get("blocking")))
        )
    ranks = []
    for r in records:
        if r.get("kind") != "rank" or _int(r.get("pid")) is None:
            continue
        raw_out = r.get("out")
        out: dict[str, Any] = raw_out if isinstance(raw_out, dict) else {}
        pid = int(r["pid"])
        ranks.append(
            RankView(
                node=node,
                pid=pid,
                rank=_int(r.get("rank")),
                local_rank=_int(r.get("local_rank")),
                world_size=_int(r.get("world_size")),
                group_rank=_int(r.get("group_rank")),
                state=str(r.get("state") or "?"),
                cpu_pct=_float(r.get("cpu_pct")),
                rss_bytes=_int(r.get("rss_bytes")),
                threads=_int(r.get("threads")),
                started=_float(r.get("started")),
                wchan=str(r["wchan"]) if r.get("wchan") else None,
                cmd=str(r.get("cmd") or ""),
                stdout=_output(out.get("1")),
                stderr=_output(out.get("2")),
                env={str(k): str(v) for k, v in (r.get("env") or {}).items()},
                gpu=r.get("gpu") if isinstance(r.get("gpu"), dict) else None,
                stacks=tuple(sorted(stacks.get(pid, []), key=lambda s: s.sample)),
            )
        )
    ranks.sort(key=lambda v: (v.rank if v.rank is not None else 1 << 30, v.pid))
    logs = tuple(
        LogFile(
            node,
            str(r.get("path") or "?"),
            tuple(str(x) for x in r.get("lines") or ()),
            tuple(int(p) for p in r.get("pids") or () if isinstance(p, int)),
            _float(r.get("age_s")),
            str(r["error"]) if r.get("error") else None,
            r["fid"] if isinstance(r.get("fid"), dict) else None,
            (node,),
            (node,) if r.get("pids") else (),
        )
        for r in records
        if r.get("kind") == "log"
    )
    unavailable = next((r for r in records if r.get("kind") == "stacks_unavailable"), None)
    gpu: dict[str, Any] = next((r for r in records if r.get("kind") == "gpu"), {})
    return NodeView(
        node=node,
        hostname=host.get("hostname"),
        boot=str(host["boot"]) if host.get("boot") else None,
        user=host.get("user"),
        ptrace_scope=_int(host.get("ptrace_scope")),
        cap_sys_ptrace=host.get("cap_sys_ptrace")
        if isinstance(host.get("cap_sys_ptrace"), bool)
        else None,
        me_uid=_int(host.get("me_uid")),
        candidates=tuple(
            Candidate(
                node,
                int(c.get("pid") or 0),
                str(c.get("cmd") or ""),
                _float(c.get("started")),
                tuple(x for x in c.get("ranks") or () if isinstance(x, int)),
                str(c.get("key") or ""),
            )
            for c in cands.get("items") or ()
            if isinstance(c, dict)
        ),
        agent=agent,
        ranks=tuple(ranks),
        logs=logs,
        ras=tuple(r for r in records if r.get("kind") == "ras"),
        fr=tuple(r for r in records if r.get("kind") == "fr"),
        fr_config=next((r for r in records if r.get("kind") == "fr_config"), None),
        inspector=tuple(r for r in records if r.get("kind") == "inspector" and "rank" in r),
        gpu_note=str(gpu["note"]) if gpu.get("note") else None,
        gpu_devices=bool(gpu.get("devices")),
        stacks_unavailable=str(unavailable["reason"]) if unavailable else None,
    )
