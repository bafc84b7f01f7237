"""From what the nodes showed to a verdict with its fix: healthy and progressing; hung
(who, where, since when); crashed (who, why, what the others did); slow (a straggler).
Pure core: the texts live in diagnosis/kb/job.yaml, the code fills in the facts."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.kb import kb_entry, kb_finding
from ddptui.job.joblogs import (
    Exit,
    classify,
    exits,
    failed_collective_where,
    is_secondary,
    rank_lines,
    root_causes,
)
from ddptui.job.model import NodeView, RankView
from ddptui.job.stacks import (
    StackGroup,
    describe_groups,
    group_ranks,
    rank_ranges,
    ranks_phrase,
)

State = Literal[
    "healthy",
    "waiting",
    "hung",
    "crashed",
    "slow",
    "stalled",
    "ended",
    "none",
    "ambiguous",
    "unknown",
]

IDLE_CPU_PCT = 5.0  # below this over the look, a rank did no work of its own


@dataclass(frozen=True)
class JobVerdict:
    state: State
    headline: str
    findings: tuple[Finding, ...]  # the verdict's own finding first
    groups: tuple[StackGroup, ...]
    ranks: tuple[RankView, ...]
    world_size: int | None
    missing: tuple[int, ...]
    progressing: tuple[int, ...]
    stuck: tuple[int, ...]


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    s = int(seconds)
    return (
        f"{s // 3600}h{s % 3600 // 60:02d}m"
        if s >= 3600
        else (f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s")
    )


def progressed(r: RankView) -> bool | None:
    """Whether a rank moved during the look: its output grew, its stack changed between
    samples, or it used CPU outside a collective (CUDA and NCCL spin while they wait, so
    CPU spent waiting is no progress); None when there is too little to tell."""
    if r.output_grew:
        return True
    good = r.good_stacks()
    if len({s.key for s in good}) > 1:
        return True
    waiting = bool(good) and good[-1].place.kind in ("collective", "sync")
    if r.cpu_pct is not None and r.cpu_pct >= IDLE_CPU_PCT and not waiting:
        return True
    if len(good) >= 2 or r.cpu_pct is not None:
        return False
    return None


def _since(ranks: Sequence[RankView], window_s: float) -> str:
    ages = [a for r in ranks if (a := r.output_age_s) is not None]
    if ages:
        return f"no output for {_ago(min(ages))}"
    return f"no progress during the {window_s:.0f} s ddptui watched"


@dataclass(frozen=True)
class _Seen:
    """What every rule reads: the ranks and how they moved during the look."""

    views: Sequence[NodeView]
    ranks: tuple[RankView, ...]
    live: tuple[RankView, ...]
    node_of: dict[int, str]
    world: int | None
    present: frozenset[int]
    dead: tuple[int, ...]
    missing: tuple[int, ...]
    moving: tuple[int, ...]
    idle: tuple[int, ...]
    groups: tuple[StackGroup, ...]
    exits: tuple[Exit, ...]
    window_s: float
    hang_after_s: float

    @property
    def everyone_idle(self) -> bool:
        return bool(self.idle) and not self.moving and len(self.idle) == len(self.live)


Rule = Callable[[_Seen], tuple[State, Finding] | None]


def judge(views: Sequence[NodeView], *, window_s: float, hang_after_s: float = 60.0) -> JobVerdict:
    """The verdict over every node's view: the first rule that has something to say."""
    ranks = tuple(r for v in views for r in v.ranks)
    worlds = [r.world_size for r in ranks if r.world_size]
    world = max(worlds) if worlds else None
    present = frozenset(r.rank for r in ranks if r.rank is not None and r.state not in _GONE)
    live = tuple(r for r in ranks if r.state not in _GONE)
    moves = {r.rank: progressed(r) for r in live if r.rank is not None}
    seen = _Seen(
        views=views,
        ranks=ranks,
        live=live,
        node_of={r.rank: r.node for r in ranks if r.rank is not None},
        world=world,
        present=present,
        dead=tuple(sorted(r.rank for r in ranks if r.rank is not None and r.state in _GONE)),
        missing=tuple(sorted(set(range(world)) - present)) if world else (),
        moving=tuple(sorted(k for k, v in moves.items() if v)),
        idle=tuple(sorted(k for k, v in moves.items() if v is False)),
        groups=tuple(_groups(live)),
        exits=tuple(_exits(views)),
        window_s=window_s,
        hang_after_s=hang_after_s,
    )
    for rule in RULES:
        said = rule(seen)
        if said is not None:
            state, f = said
            return JobVerdict(
                state,
                f.summary,
                (f,),
                seen.groups,
                ranks,
                world,
                seen.missing,
                seen.moving,
                seen.idle,
            )
    return JobVerdict("none", "no job found", (), (), (), None, (), (), ())


_GONE = ("Z", "gone")


def _rule_crash(s: _Seen) -> tuple[State, Finding] | None:
    """Ranks are gone (or the whole job) and the logs say what they died of."""
    if s.ranks and not s.missing:
        return None
    crash = _crash(s.views, s.exits, s.node_of if s.ranks else None, s.missing)
    return ("crashed", crash) if crash is not None else None


def _rule_ended(s: _Seen) -> tuple[State, Finding] | None:
    """Every rank exited while ddptui looked (and no log says why)."""
    if not s.ranks or s.live:
        return None
    f = kb_finding(
        "JOB-ENDED",
        sorted({r.node for r in s.ranks}),
        f"the job ended while ddptui looked at it (ranks {rank_ranges(s.node_of)})",
        [f"{r.label} ({r.node}) pid {r.pid}: {r.cmd[:120]}" for r in s.ranks][:8],
    )
    return "ended", f


def _rule_missing(s: _Seen) -> tuple[State, Finding] | None:
    if not s.missing or s.moving or not s.live:
        return None
    many = len(s.missing) > 1
    f = kb_finding(
        "JOB-RANKS-MISSING",
        sorted({r.node for r in s.live}),
        f"rank{'s' if many else ''} {rank_ranges(s.missing)} of {s.world} "
        f"{'are' if many else 'is'} not running on any node ddptui looked at; "
        f"the others wait ({_since(s.live, s.window_s)})",
        [f"WORLD_SIZE={s.world}", f"running: {rank_ranges(s.present) or 'none'}"]
        + ([f"dead (zombie or exited): {rank_ranges(s.dead)}"] if s.dead else []),
        missing=rank_ranges(s.missing),
        world=s.world,
        window=f"{s.window_s:.0f}",
    )
    return "hung", f


def _rule_diverged(s: _Seen) -> tuple[State, Finding] | None:
    """Some ranks wait in a collective the whole look; others are elsewhere: hung when
    the odd ones do not move either or the waiters have been quiet for long; slow else."""
    odd = [g for g in s.groups if g.odd]
    waiting = [g for g in s.groups if not g.odd and g.place.kind in ("collective", "sync")]
    if not odd or not waiting:
        return None
    odd_ranks = sorted(r for g in odd for r in g.ranks)
    waiters = sorted(r for g in waiting for r in g.ranks)
    if not all(r in s.idle for r in waiters):
        return None
    quiet = [r for r in s.live if r.rank in waiters]
    ages = [a for r in quiet if (a := r.output_age_s) is not None]
    long_quiet = bool(ages) and min(ages) >= s.hang_after_s
    hung = not any(r in s.moving for r in odd_ranks) or long_quiet
    first = odd[0]
    frame = first.place.user or first.place.top
    since = _since(quiet, s.window_s)
    text = describe_groups(s.groups, s.node_of)
    summary = (
        f"hung: {text} ({since})"
        if hung
        else f"slow: {text}; the job last printed {since.removeprefix('no output for ')} ago"
    )
    f = kb_finding(
        "JOB-HUNG-DIVERGED" if hung else "JOB-STRAGGLER",
        sorted({s.node_of.get(r, "?") for r in odd_ranks}),
        summary,
        _stack_evidence([*odd, *waiting], s.live),
        rank=odd_ranks[0],
        where=first.place.where,
        who=rank_ranges(odd_ranks),
        node=", ".join(sorted({s.node_of.get(r, "?") for r in odd_ranks})),
        func=frame.func if frame else "?",
        at=first.place.where or "?",
        op=waiting[0].place.op or "a collective",
        waiters=rank_ranges(waiters),
        since=since,
        window=f"{s.window_s:.0f}",
    )
    return ("hung" if hung else "slow"), f


def _rule_collective(s: _Seen) -> tuple[State, Finding] | None:
    """Every rank waits in the same place and nothing moved. Hung once the job has been
    quiet for hang_after_s. Before that it is also what a busy NCCL loop looks like
    (every sample lands in the collective), so it is said, not called a problem."""
    if not (s.everyone_idle and s.groups):
        return None
    if not all(g.place.kind in ("collective", "sync") for g in s.groups):
        return None
    g = s.groups[0]
    since = _since(s.live, s.window_s)
    ages = [a for r in s.live if (a := r.output_age_s) is not None]
    if ages and min(ages) < s.hang_after_s:
        f = kb_finding(
            "JOB-WAITING",
            sorted({r.node for r in s.live}),
            f"waiting: every rank was in `{g.place.op}` at {g.place.where or '?'} in every "
            f"sample; the job last printed {_ago(min(ages))} ago",
            _stack_evidence(s.groups, s.live),
            op=g.place.op or "a collective",
            hang_after=f"{s.hang_after_s:.0f}",
        )
        return "waiting", f
    f = kb_finding(
        "JOB-HUNG-COLLECTIVE",
        sorted({r.node for r in s.live}),
        f"hung: every rank waits in `{g.place.op}` at {g.place.where or '?'} ({since})",
        _stack_evidence(s.groups, s.live),
        where=g.place.where,
        at=g.place.where or "?",
        op=g.place.op or "a collective",
        since=since,
        window=f"{s.window_s:.0f}",
    )
    return "hung", f


def _rule_no_progress(s: _Seen) -> tuple[State, Finding] | None:
    if not s.everyone_idle:
        return None
    ages = [a for r in s.live if (a := r.output_age_s) is not None]
    if ages and min(ages) < s.hang_after_s:
        f = kb_finding(
            "JOB-WAITING",
            sorted({r.node for r in s.live}),
            f"waiting: no rank moved during the {s.window_s:.0f} s look; the job last printed "
            f"{_ago(min(ages))} ago",
            [f"{r.label} ({r.node}): cpu {r.cpu_pct}% wchan {r.wchan or 'n/a'}" for r in s.live],
            op="their current place",
            hang_after=f"{s.hang_after_s:.0f}",
        )
        return "waiting", f
    where = (
        "; stacks: " + describe_groups(s.groups, s.node_of)
        if s.groups
        else "; no stacks to say where"
    )
    since = _since(s.live, s.window_s)
    f = kb_finding(
        "JOB-NO-PROGRESS",
        sorted({r.node for r in s.live}),
        f"no rank used CPU, printed or moved for {s.window_s:.0f} s ({since}){where}",
        [
            f"{r.label} ({r.node}): cpu {r.cpu_pct}% state {r.state} wchan {r.wchan or 'n/a'}"
            for r in s.live
        ],
        since=since,
        window=f"{s.window_s:.0f}",
    )
    return "stalled", f


def _rule_slow_rank(s: _Seen) -> tuple[State, Finding] | None:
    """The job moves, but one rank computes while the others wait for it (slowrank.py)."""
    from ddptui.job.slowrank import inspector_busbw, slow_rank

    f = slow_rank(s.live, s.moving, s.window_s, inspector_busbw(s.views))
    return ("slow", f) if f is not None else None


def _rule_gpu(s: _Seen) -> tuple[State, Finding] | None:
    f = _gpu_straggler(s.live)
    return ("slow", f) if f is not None else None


def _rule_healthy(s: _Seen) -> tuple[State, Finding] | None:
    if not s.live:
        return None
    n = len(s.live)
    f = kb_finding(
        "JOB-HEALTHY",
        sorted({r.node for r in s.live}),
        f"healthy: {n} rank{'s' if n != 1 else ''} running"
        + (f" of {s.world}" if s.world else "")
        + f", {len(s.moving)} progressed during the {s.window_s:.0f} s look",
        [
            f"{r.label} ({r.node}): cpu {r.cpu_pct}% output {'grew' if r.output_grew else 'quiet'}"
            for r in s.live
        ][:16],
        window=f"{s.window_s:.0f}",
    )
    return "healthy", f


RULES: tuple[Rule, ...] = (
    _rule_crash,
    _rule_ended,
    _rule_missing,
    _rule_diverged,
    _rule_slow_rank,
    _rule_collective,
    _rule_no_progress,
    _rule_gpu,
    _rule_healthy,
)


def _groups(live: Sequence[RankView]) -> list[StackGroup]:
    places = {}
    for r in live:
        good = r.good_stacks()
        if r.rank is not None and good:
            places[r.rank] = (good[-1].place, good[-1].key)
    return group_ranks(places)


def _stack_evidence(groups: Sequence[StackGroup], live: Sequence[RankView]) -> list[str]:
    out = []
    by_rank = {r.rank: r for r in live}
    for g in groups:
        r = by_rank.get(g.ranks[0])
        good = r.good_stacks() if r else []
        if not good or good[-1].dump is None or good[-1].dump.main is None:
            continue
        frames = [f"{f.func} ({f.file}:{f.line})" for f in good[-1].dump.main.python_frames][:8]
        out.append(f"ranks {rank_ranges(g.ranks)}: " + " <- ".join(frames))
    return out


def _gpu_straggler(live: Sequence[RankView]) -> Finding | None:
    util = {
        r.rank: float(r.gpu["sm_pct"])
        for r in live
        if r.rank is not None and r.gpu and isinstance(r.gpu.get("sm_pct"), int | float)
    }
    if len(util) < 3:
        return None
    median = statistics.median(util.values())
    low = sorted(k for k, v in util.items() if v < median / 3)
    if median < 30 or not low:
        return None
    node_of = {r.rank: r.node for r in live}
    return kb_finding(
        "JOB-GPU-STRAGGLER",
        sorted({node_of[k] for k in low if k in node_of}),
        f"slow: {ranks_phrase(low, {k: v for k, v in node_of.items() if k is not None})} "
        f"at {min(util[k] for k in low):.0f}% GPU while the median rank is at {median:.0f}%",
        [f"rank {k}: {v:.0f}% SM" for k, v in sorted(util.items())],
        rank=low[0],
        rank_list=rank_ranges(low),
        median=f"{median:.0f}",
    )


def _exits(views: Sequence[NodeView]) -> list[Exit]:
    from dataclasses import replace

    from ddptui.job.sharedfiles import node_of_host, rank_nodes

    out: list[Exit] = []
    where_ranks = rank_nodes(views)
    by_node = {v.node: v for v in views}
    for v in views:
        for log in v.logs:
            writers = log.writers or (() if log.shared or log.fid else (v.node,))
            # Unprefixed lines belong to the ranks of the nodes that write the file (the
            # reader's only when it is one of them); a file no one is known to write
            # (a shared log read by any node) gives its ranks by its prefixes alone.
            mine = [by_node[n] for n in writers if n in by_node]
            here = [r.rank for w in mine for r in w.ranks if r.rank is not None]
            l2g = (
                {r.local_rank: r.rank for r in mine[0].ranks if r.local_rank is not None and r.rank is not None}
                if len(mine) == 1
                else {}
            )
            causes = root_causes(log)
            ranks_here = here or [c.rank for c in causes if c.rank is not None][:1]
            if (
                not l2g
                and causes
                and causes[0].rank is not None
                and causes[0].local_rank is not None
            ):
                l2g = {causes[0].local_rank: causes[0].rank}
            found = exits(log, ranks_here, l2g)
            # A rank that died without a Python traceback (a signal, an abort after the
            # NCCL watchdog): torchrun's summary still says who and how.
            told = {e.rank for e in found}
            for c in causes:
                if c.rank is not None and c.rank not in told and c.exitcode not in (None, 0):
                    how = c.traceback or f"exit code {c.exitcode}"
                    where = failed_collective_where(log)
                    found.append(Exit(log.node, c.rank, f"exit code {c.exitcode}", how, where, how))
            hosts = {c.rank: c.host for c in causes if c.rank is not None}
            for e in found:
                node = where_ranks.get(e.rank) if e.rank is not None else None
                node = node or (node_of_host(views, hosts.get(e.rank)) if e.rank is not None else None)
                if node is None and len(writers) == 1:
                    node = writers[0]
                out.append(replace(e, node=node or log.path))  # unknown: the file, not its reader
    return out


def _crash(
    views: Sequence[NodeView],
    found: Sequence[Exit],
    node_of: Mapping[int, str] | None,
    missing: Sequence[int],
) -> Finding | None:
    if not found:
        return None
    primary = [e for e in found if not is_secondary(e)]
    pick = (primary or list(found))[0]
    others = [e for e in found if e is not pick]
    rank = pick.rank
    logs = [log for v in views if v.node == pick.node for log in v.logs]
    lines = [
        ln
        for log in logs
        for ln in (rank_lines(log, rank, [rank], {}) if rank is not None else log.lines)
    ]
    root, _ = classify(lines, f"{pick.node}:rank{rank}")
    if others:
        seen = sorted({f"{e.exc_type}: {e.message}"[:120] for e in others})
        other_ranks = sorted({e.rank for e in others if e.rank is not None})
        many = "s" if len(other_ranks) != 1 else ""
        then = f"rank{many} {rank_ranges(other_ranks)} then failed ({'; '.join(seen[:2])})"
    elif node_of:
        alive = sorted(k for k in node_of if k != rank and k not in missing)
        then = (
            f"ranks {rank_ranges(alive)} are still running (waiting for it)"
            if alive
            else "no other rank was seen"
        )
    else:
        then = "the other ranks' output was not available"
    generic = kb_entry("JOB-CRASH-GENERIC")
    who = f"rank {rank}" if rank is not None else "a rank"
    return kb_finding(
        "JOB-CRASHED",
        [pick.node],
        (
            f"crashed: {who} ({pick.node}) ended with {pick.exc_type} ({pick.message[:160]})"
            if pick.exc_type.startswith("exit code")
            else f"crashed: {who} ({pick.node}) raised {pick.exc_type}: {pick.message[:160]}"
        )
        + (f" at {pick.where}" if pick.where else "")
        + f"; {then}",
        [pick.line]
        + [e.line for e in others[:3]]
        + ([f"knowledge base: {root.id}: {root.summary}"] if root else []),
        rank=rank,
        where=pick.where,
        at=pick.where or "an unknown place",
        who=rank if rank is not None else "?",
        node=pick.node,
        exc=pick.exc_type,
        message=pick.message[:200],
        others=then,
        known_cause=root.cause if root else generic.cause,
        known_fix=root.fix if root else generic.fix.replace("{who}", str(rank)),
    )
