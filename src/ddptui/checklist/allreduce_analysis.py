"""What the allreduce step saw, and what it means: results per rank, bandwidth,
classified logs, hang classification. Core layer (no transport, no UI)."""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.kb import kb_finding, signature_finding
from ddptui.diagnosis.logstore import LogLine, LogStore
from ddptui.diagnosis.model import Status, bandwidth_outliers, node_status_from
from ddptui.diagnosis.ranking import rank_findings
from ddptui.transport.base import ProbeOutput

if TYPE_CHECKING:
    from ddptui.checklist.base import StepContext
    from ddptui.diagnosis.signatures import Match

REPORT_LINES = 60  # lines per node kept in the step's node data (the report)
NCCL_KEEP = 2000  # NCCL-ish lines kept per rank for its facts (init comes first)
PHASES = ("start", "imported", "init", "pg_ready", "verify", "sweep", "done")
PHASE_MEANING = {
    "start": "starting Python (never finished importing torch)",
    "imported": "imported torch, about to join the process group",
    "init": "inside init_process_group: waiting for the rendezvous store or for peers",
    "pg_ready": "joined the process group, about to run the check allreduce",
    "verify": "inside the first allreduce (data path between ranks)",
    "sweep": "inside the bandwidth sweep",
    "done": "finished",
}


@dataclass
class RankState:
    rank: int
    node: str
    local_rank: int
    phase: str = "start"
    phase_at: float = 0.0
    versions: dict[str, Any] = field(default_factory=dict)
    verify: dict[str, Any] | None = None
    bw: list[dict[str, Any]] = field(default_factory=list)
    heartbeat_at: float = 0.0
    sweep_stop: dict[str, Any] | None = None  # the sweep stopped growing the size (time)


@dataclass
class ArRun:
    """Everything the launchers sent, as it arrived (arrival time is the clock)."""

    backend: str
    deadline_s: float
    forced: dict[str, str]
    unset: list[str]
    started: float
    finished: float = 0.0
    timed_out: bool = False
    stopped_early: bool = False
    stopping: bool = False
    launch: dict[str, dict[str, Any]] = field(default_factory=dict)
    exits: dict[str, dict[str, Any]] = field(default_factory=dict)
    ranks: dict[int, RankState] = field(default_factory=dict)
    local_to_rank: dict[tuple[str, int], int] = field(default_factory=dict)
    # Lines are classified as they arrive (the run keeps no unbounded copy): the
    # signature matches with the id of their line, each rank's NCCL lines for its
    # facts, and each node's last lines (LogStore ids travel with them).
    matches: list[tuple[float, str, Match]] = field(default_factory=list)
    match_lines: dict[int, str] = field(default_factory=dict)
    nccl_lines: dict[int, list[str]] = field(default_factory=dict)
    tails: dict[str, deque[LogLine]] = field(default_factory=dict)
    outputs: dict[str, ProbeOutput] = field(default_factory=dict)
    trouble: dict[str, Finding] = field(default_factory=dict)

    def take(self, node: str, rec: dict[str, Any], now: float, logs: LogStore | None) -> None:
        kind = rec.get("kind")
        if kind == "log":
            self._line(node, rec, now, logs)
        elif kind == "worker":
            self._worker(node, rec.get("record") or {}, now)
        elif kind == "launch":
            self.launch[node] = rec
        elif kind == "exit":
            self.exits[node] = rec

    def _worker(self, node: str, rec: dict[str, Any], now: float) -> None:
        rank, local = rec.get("rank"), rec.get("local_rank")
        if not isinstance(rank, int) or not isinstance(local, int):
            return
        self.local_to_rank[(node, local)] = rank
        st = self.ranks.setdefault(rank, RankState(rank, node, local, phase_at=now))
        kind = rec.get("kind")
        if kind == "phase":
            st.phase, st.phase_at = str(rec.get("phase")), now
        elif kind == "heartbeat":
            st.heartbeat_at = now
        elif kind == "versions":
            st.versions = {k: rec.get(k) for k in ("torch", "cuda", "nccl", "backend")}
        elif kind == "verify":
            st.verify = {k: rec.get(k) for k in ("ok", "expected", "got", "mismatches")}
        elif kind == "bw":
            keys = ("bytes", "time_us", "algbw_gbps", "busbw_gbps", "warmup", "iters", "ok", "debug")
            st.bw.append({k: rec.get(k) for k in keys})
        elif kind == "sweep_stop":
            st.sweep_stop = {
                k: rec.get(k) for k in ("next_bytes", "estimate_s", "left_s", "measured")
            }

    def _line(self, node: str, rec: dict[str, Any], now: float, logs: LogStore | None) -> None:
        """One streamed line: the launcher tags it with the worker's GLOBAL rank and its
        local rank (torchrun's --tee prefix)."""
        from ddptui.diagnosis.signatures import classify_line

        raw_rank, raw_local = rec.get("rank"), rec.get("local_rank")
        local = raw_local if isinstance(raw_local, int) else None
        rank = raw_rank if isinstance(raw_rank, int) else None
        if rank is None and local is not None:
            rank = self.local_to_rank.get((node, local))
        text = str(rec.get("line", ""))
        stream = str(rec.get("stream"))
        line = (
            logs.append(node, text, rank=rank, local_rank=local, stream=stream, t=now)
            if logs is not None
            else LogLine(node, 0, rank, local, stream, text, now)
        )
        self.tails.setdefault(node, deque(maxlen=REPORT_LINES)).append(line)
        if rank is not None and ("NCCL" in text or "Channel" in text or "Bootstrap" in text):
            kept = self.nccl_lines.setdefault(rank, [])
            if len(kept) < NCCL_KEEP:
                kept.append(text)
        m = classify_line(text)
        if m is not None:
            self.matches.append((now, node, m))
            self.match_lines[id(m)] = line.id

    def rank_lines(self, rank: int) -> list[str]:
        """The NCCL lines one global rank printed (for its facts)."""
        return self.nccl_lines.get(rank, [])

    def tail(self, node: str, n: int = REPORT_LINES) -> list[str]:
        return [ln.tagged() for ln in list(self.tails.get(node, ()))[-n:]]


def analyze(
    ctx: StepContext, run: ArRun
) -> tuple[list[Finding], dict[str, Any], dict[str, tuple[Status, str, dict[str, Any]]]]:
    """(findings, step data, {node: (status, summary, data)})."""
    from ddptui.diagnosis.ncclfacts import nccl_findings, parse_nccl_lines
    from ddptui.diagnosis.signatures import root_cause

    findings: list[Finding] = list(run.trouble.values())
    matches = sorted(run.matches, key=lambda item: item[0])
    root = root_cause(matches)
    ok_ranks = [r for r in run.ranks.values() if r.verify and r.verify.get("ok")]
    world = sum(int(run.launch[n].get("nproc", 0)) for n in run.launch) or len(ctx.targets)
    all_ok = (
        len(ok_ranks) == world
        and not run.timed_out
        and all(run.exits.get(t.name, {}).get("code") == 0 for t in ctx.targets)
    )

    # NCCL facts per rank (only when NCCL ran), and their cross-rank rules.
    per_rank_facts = {}
    if run.backend == "nccl":
        for st in run.ranks.values():
            per_rank_facts[st.rank] = parse_nccl_lines(run.rank_lines(st.rank))
        ib = {t.name: bool((inv := ctx.inventory(t.name)) and inv.ib_active) for t in ctx.targets}
        findings += nccl_findings(
            per_rank_facts, {r: s.node for r, s in run.ranks.items()}, ib_expected=ib
        )

    if not all_ok:
        findings += _failure_findings(ctx, run, matches, root)
    bw_table, bw_findings = _bandwidth(ctx, run)
    findings += bw_findings
    # Loopback on one host is no fault; a real cause leads its consequences (ranking.yaml).
    findings = rank_findings(findings, ctx.topology())

    per_node: dict[str, tuple[Status, str, dict[str, Any]]] = {}
    for t in ctx.targets:
        ranks = sorted((r for r in run.ranks.values() if r.node == t.name), key=lambda r: r.rank)
        status: Status = node_status_from(findings, t.name)
        if status == "pass" and not all_ok:
            status = "warn"  # not the culprit, but its ranks did not finish either
        data = {
            "backend": run.backend,
            "exit_code": run.exits.get(t.name, {}).get("code"),
            "ranks": {
                str(r.rank): {
                    "phase": r.phase,
                    "versions": r.versions,
                    "verify": r.verify,
                    "bw": r.bw,
                }
                for r in ranks
            },
            "log_tail": run.tail(t.name),
        }
        per_node[t.name] = (status, _node_summary(run, ranks, t.name, all_ok), data)
    data = {
        "backend": run.backend,
        "world_size": world,
        "deadline_s": run.deadline_s,
        "seconds": round(run.finished - run.started, 2),
        "timed_out": run.timed_out,
        "stopped_early": run.stopped_early,
        "forced_env": run.forced,
        "unset_env": run.unset,
        "bandwidth": bw_table,
        "root_line": root[2].line if root else None,
        "nccl": {str(r): vars(f) | {"marker": f.marker()} for r, f in per_rank_facts.items()},
    }
    return findings, _jsonable(data), per_node


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [_jsonable(v) for v in obj]
    return obj


def _node_summary(run: ArRun, ranks: list[RankState], node: str, all_ok: bool) -> str:
    if not ranks:
        code = run.exits.get(node, {}).get("code")
        return f"no rank started (torchrun exit {code})" if code is not None else "no rank started"
    best = [r.bw[-1]["busbw_gbps"] for r in ranks if r.bw]
    if all_ok and best and None in best:
        # One rank: no data cross a bus, busbw is n/a (nccl-tests prints 0); algbw stands.
        alg = [r.bw[-1]["algbw_gbps"] or 0.0 for r in ranks if r.bw]
        size = _size_text(int(ranks[0].bw[-1]["bytes"] or 0)) if ranks[0].bw else "?"
        return (
            f"{len(ranks)} rank(s) {run.backend}, sum verified, busbw n/a (one rank), "
            f"algbw {min(alg):.3f} GB/s at {size}"
        )
    if all_ok and best:
        return (
            f"{len(ranks)} rank(s) {run.backend}, sum verified, busbw "
            f"{min(best):.3f}-{max(best):.3f} GB/s"
        )
    phases = ", ".join(f"r{r.rank}:{r.phase}" for r in ranks)
    return f"ranks stopped at {phases}"


def _failure_findings(ctx: StepContext, run: ArRun, matches: list[Any], root: Any) -> list[Finding]:
    out: list[Finding] = []
    wrong = [r for r in run.ranks.values() if r.verify and not r.verify.get("ok")]
    if wrong:
        out.append(
            kb_finding(
                "AR-WRONG-RESULT",
                sorted({r.node for r in wrong}),
                f"the allreduce returned a wrong sum on rank(s) {', '.join(str(r.rank) for r in wrong)}",
                [
                    f"rank {r.rank} on {r.node}: expected {r.verify['expected']}, got {r.verify['got']} "
                    f"({r.verify['mismatches']} wrong elements)"
                    for r in wrong
                    if r.verify
                ],
            )
        )
    if root is not None:
        out.append(_root_finding(run, matches, root))
    hang = _hang_finding(ctx, run)
    if hang is not None:
        out.append(hang)
    if root is None and hang is None and not wrong:
        codes = {n: e.get("code") for n, e in run.exits.items() if e.get("code") != 0}
        nodes = sorted(codes) or [t.name for t in ctx.targets]
        tails = [f"{n}: {ln}" for n in nodes for ln in run.tail(n, 4)]
        out.append(
            kb_finding(
                "AR-FAILED",
                nodes,
                "torchrun failed on " + ", ".join(f"{n} (exit {c})" for n, c in codes.items()),
                tails,
            )
        )
    return out


def _root_finding(run: ArRun, matches: list[Any], root: Any) -> Finding:
    """The earliest failing rank's most specific error. When only a consequence was seen
    (a rank waiting on a store key), blame the rank the key names."""
    t, origin, m = root
    sig = m.signature
    nodes = sorted({o for _, o, mm in matches if mm.signature.id == sig.id}) or [origin]
    summary = f"{origin}: {sig.title} ({t - run.started:.1f}s after launch)"
    key_rank = re.search(r"/(\d+)$", m.groups.get("keys", "")) if sig.secondary else None
    if key_rank is not None:
        waited = next((r for r in run.ranks.values() if r.rank == int(key_rank.group(1))), None)
        if waited is not None:
            nodes = [waited.node]
            summary = (
                f"{waited.node}: rank {waited.rank} never answered its peers; "
                f"{origin} waited for it ({sig.title.lower()})"
            )
    others = [(o, mm) for _, o, mm in matches if mm is not m and not mm.signature.secondary][:4]
    secondary = [(o, mm) for _, o, mm in matches if mm.signature.secondary and mm is not m][:3]
    quoted = [(origin, m), *others, *secondary]
    return signature_finding(
        m,
        nodes,
        summary,
        severity="error",
        evidence=[
            f"{o}: {mm.line.strip()}" + (" (consequence)" if (o, mm) in secondary else "")
            for o, mm in quoted
        ],
        lines=[run.match_lines[id(mm)] for _, mm in quoted if id(mm) in run.match_lines],
    )


def _hang_finding(ctx: StepContext, run: ArRun) -> Finding | None:
    """On the deadline (or an early stop): which ranks never progressed, and what that means."""
    if not (run.timed_out or run.stopped_early):
        return None
    names = [t.name for t in ctx.targets]
    if not run.ranks:
        stuck_nodes = names
        detail = ["no rank reported: torchrun never started the workers (rendezvous)"]
    else:
        least = min(PHASES.index(r.phase) if r.phase in PHASES else 0 for r in run.ranks.values())
        stuck = [r for r in run.ranks.values() if PHASES.index(r.phase) == least]
        quiet = [n for n in names if not any(r.node == n for r in run.ranks.values())]
        stuck_nodes = sorted({r.node for r in stuck} | set(quiet), key=names.index)
        if len(stuck_nodes) == len(names) and len(names) > 1 and least > 0:
            stuck_nodes = names
        detail = [
            f"rank {r.rank} on {r.node}: {r.phase} — {PHASE_MEANING.get(r.phase, '')}"
            for r in sorted(run.ranks.values(), key=lambda r: r.rank)
        ]
        detail += [
            f"{n}: no rank started (its torchrun agent never finished rendezvous)" for n in quiet
        ]
    if run.timed_out:
        why = f"at the deadline ({run.deadline_s:.0f} s)"
    else:
        why = f"after {run.finished - run.started:.0f} s, when another node failed"
    return kb_finding(
        "AR-HANG",
        stuck_nodes,
        f"allreduce stopped {why}: {', '.join(stuck_nodes)} never got further",
        detail,
        severity="error" if run.timed_out else "info",
    )


def _size_text(nbytes: int) -> str:
    for shift, unit in ((30, "GiB"), (20, "MiB")):
        if nbytes >= 1 << shift:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes >> 10} KiB"


def _bandwidth(ctx: StepContext, run: ArRun) -> tuple[list[dict[str, Any]], list[Finding]]:
    """busbw per rank at the largest size; the slowest rank; stragglers below half the median.
    With one rank busbw is None (n/a) and only algbw is reported."""
    table = []
    for r in sorted(run.ranks.values(), key=lambda r: r.rank):
        if r.bw:
            last = r.bw[-1]
            table.append(
                {
                    "rank": r.rank,
                    "node": r.node,
                    "bytes": last["bytes"],
                    "busbw_gbps": last["busbw_gbps"],
                    "algbw_gbps": last["algbw_gbps"],
                    "time_us": last["time_us"],
                    "sweep": r.bw,
                }
            )
    findings: list[Finding] = []
    cut = _sweep_cut(run, table)
    if cut is not None:
        findings.append(cut)
    if len(table) < 2 or any(row["busbw_gbps"] is None for row in table):
        return table, findings
    median, straggling, slowest = bandwidth_outliers([row["busbw_gbps"] for row in table])
    slow = table[slowest]
    for row in table:
        link = _link_gbps(ctx, row["node"])
        if link:
            row["link_gbps"] = link
            row["link_fraction"] = round(row["busbw_gbps"] * 8 / link, 3)
    stragglers = [table[i] for i in straggling]
    if stragglers:
        findings.append(
            kb_finding(
                "AR-STRAGGLER",
                sorted({row["node"] for row in stragglers}),
                f"rank(s) {', '.join(str(r['rank']) for r in stragglers)} run below half the "
                f"median bus bandwidth ({median:.3f} GB/s)",
                [
                    f"rank {r['rank']} on {r['node']}: busbw {r['busbw_gbps']:.3f} GB/s"
                    for r in table
                ],
            )
        )
    findings.append(
        kb_finding(
            "AR-BANDWIDTH",
            [slow["node"]],
            f"slowest rank {slow['rank']} on {slow['node']}: busbw {slow['busbw_gbps']:.3f} GB/s "
            f"(median {median:.3f} GB/s, {_size_text(slow['bytes'])} messages)",
            [
                f"rank {r['rank']} on {r['node']}: {r['busbw_gbps']:.3f} GB/s"
                + (
                    f" ({r['link_fraction']:.0%} of {r['link_gbps']:.0f} Gb/s)"
                    if "link_fraction" in r
                    else ""
                )
                for r in table
            ],
        )
    )
    return table, findings


def _sweep_cut(run: ArRun, table: list[dict[str, Any]]) -> Finding | None:
    """The sweep stopped growing the size because the next one would not have finished in
    time: a slow fabric, measured (not a hang). Every rank decides together, so one
    rank's record says it for all."""
    stops = [r for r in run.ranks.values() if r.sweep_stop]
    if not stops or not table:
        return None
    stop = stops[0].sweep_stop or {}
    low = min(table, key=lambda row: row["busbw_gbps"] or row["algbw_gbps"] or 0.0)
    bw = low["busbw_gbps"] if low["busbw_gbps"] is not None else low["algbw_gbps"]
    return kb_finding(
        "AR-SWEEP-CUT",
        sorted({row["node"] for row in table}),
        f"the bandwidth sweep stopped at {_size_text(int(low['bytes'] or 0))}: "
        f"{_size_text(int(stop.get('next_bytes') or 0))} would take ~{stop.get('estimate_s')} s "
        f"of the {stop.get('left_s')} s left; busbw {bw:.4f} GB/s (verified, not a hang)",
        [
            f"rank {row['rank']} on {row['node']}: {_size_text(int(row['bytes'] or 0))} "
            f"busbw {row['busbw_gbps']} GB/s algbw {row['algbw_gbps']} GB/s"
            for row in table
        ][:16],
        measured=_size_text(int(low["bytes"] or 0)),
        busbw=f"{bw:.4f}",
    )


def _link_gbps(ctx: StepContext, node: str) -> float | None:
    """Speed of the link this node uses to reach the master (sysfs), when known."""
    route, inventory = ctx.route(node), ctx.inventory(node)
    iface = inventory.interface(route.dev) if route and inventory else None
    return iface.speed_mbps / 1000.0 if iface and iface.speed_mbps else None
