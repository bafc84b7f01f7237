"""Look at the user's job on every node at once: ship the job probe, gather what it saw,
judge. Read-only: nothing here signals, pauses or writes to the job (the flight
recorder trigger, asked for explicitly, is the one write)."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ddptui.checklist.runner import targets_from, utcnow
from ddptui.config import ClusterConfig
from ddptui.diagnosis.finding import Finding
from ddptui.job import lastknown
from ddptui.job.model import NodeView, node_from_records
from ddptui.job.sharedfiles import ReadPlan, merge_views, survey_reads
from ddptui.job.side import ambiguity, overruled, side_findings
from ddptui.job.verdict import JobVerdict, judge
from ddptui.transport import make_transports
from ddptui.transport.base import ConnectFailure, NodeTarget, Transport

PROBE_SLACK_S = 25.0  # python start, two py-spy rounds, RAS, flight recorder, logs


@dataclass(frozen=True)
class JobOptions:
    """What `ddptui job` was asked to do."""

    match: str | None = None
    window_s: float = 2.0
    stacks: bool = True
    native: bool = False
    allow_pause: bool = False
    pyspy: str | None = None
    logs: tuple[str, ...] = ()  # "GLOB" (every node) or "NODE:GLOB"
    trigger_dump: bool = False
    hang_after_s: float = 60.0
    remember: bool = True  # keep the job's log paths for a later post-mortem


@dataclass(frozen=True)
class JobLook:
    """Everything one look found."""

    config_path: str
    started_at: str
    finished_at: str
    duration_s: float
    targets: tuple[NodeTarget, ...]
    views: tuple[NodeView, ...]
    verdict: JobVerdict
    findings: tuple[Finding, ...]  # the verdict's first, then by severity
    options: JobOptions
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def state(self) -> str:
        return self.verdict.state


def split_log_args(logs: Sequence[str], names: Sequence[str]) -> dict[str | None, list[str]]:
    """{node or None (= every node): [globs]} from `--log GLOB` / `--log NODE:GLOB`."""
    out: dict[str | None, list[str]] = {}
    for item in logs:
        node, sep, rest = item.partition(":")
        if sep and node in names and rest:
            out.setdefault(node, []).append(rest)
        elif sep and node == "*" and rest:
            out.setdefault(None, []).append(rest)
        else:
            out.setdefault(None, []).append(item)
    return out


async def look_at_job(
    config: ClusterConfig,
    config_path: str,
    options: JobOptions,
    *,
    transports: dict[str, Transport] | None = None,
    on_node: Callable[[NodeView], None] | None = None,
) -> JobLook:
    started_at, t0 = utcnow(), time.monotonic()
    targets = targets_from(config)
    own = transports is None
    transports = transports if transports is not None else make_transports(config, targets)
    salt = secrets.token_hex(8)
    logs = split_log_args(options.logs, [t.name for t in targets])
    remembered = lastknown.load(config_path) if options.remember else {}
    remembered_fr = lastknown.load_fr(config_path) if options.remember else {}
    by_name = {n.display: n for n in config.nodes}
    order = [t.name for t in targets]
    globs = {n: logs.get(None, []) + logs.get(n, []) for n in order}
    fallback = {n: [] if options.logs else remembered.get(n, []) for n in order}
    reads = ReadPlan()

    async def one(t: NodeTarget, reads: ReadPlan, after: bool = False) -> NodeView:
        params: dict[str, Any] = {
            "user": by_name[t.name].user,
            "match": options.match,
            "salt": salt,
            "window_s": 0.0 if after else options.window_s,
            "pyspy": options.pyspy,
            "stacks": options.stacks and not after,
            "native": options.native,
            "allow_pause": options.allow_pause,
            "log_globs": [] if t.name in reads.surveyed else globs[t.name],
            "log_paths": reads.log_paths.get(t.name, []),
            "fallback_paths": reads.fallback_paths.get(t.name, []),
            "fr_paths": reads.fr_paths.get(t.name, []),
            "trigger_dump": options.trigger_dump and not after,
            # a Slurm job: ranks srun started (SLURM_PROCID), not only torchrun's
            "slurm_job": config.slurm.job if config.slurm is not None else None,
        }
        view = await _probe(transports[t.name], t, params, options.window_s + PROBE_SLACK_S)
        if on_node is not None and not after:
            on_node(view)
        return view

    try:
        if any(globs.values()):
            # Shared filesystems: each node says what it would read; each file is read once.
            reads = await survey_reads(transports, order, globs, {}, {}, PROBE_SLACK_S)
        views = tuple(await asyncio.gather(*(one(t, reads) for t in targets)))
        views = await _left_behind(views, targets, transports, fallback, remembered_fr, reads, one)
        views = merge_views(views, reads.owners)
    finally:
        if own:
            await asyncio.gather(
                *(tr.close() for tr in transports.values()), return_exceptions=True
            )
    verdict = judge(views, window_s=options.window_s, hang_after_s=options.hang_after_s)
    unclear = ambiguity(views)
    if unclear is not None:
        verdict = JobVerdict(
            "ambiguous", unclear.summary, (unclear,), (), verdict.ranks, None, (), (), ()
        )
    findings = side_findings(views, verdict, config, options.match, targets)
    verdict, findings = overruled(verdict, findings)
    notes: list[str] = [*reads.problems, *reads.notes]
    if options.trigger_dump:
        notes += [
            f"--trigger-dump: the job on {v.node} sets no TORCH_NCCL_DEBUG_INFO_PIPE_FILE; "
            "nothing was written"
            for v in views
            if v.found and not (v.fr_config or {}).get("pipe")
        ]
    if options.remember and verdict.ranks:
        saved = lastknown.save(config_path, views)
        if saved:
            notes.append(f"log paths remembered for a later post-mortem: {saved}")
    return JobLook(
        config_path,
        started_at,
        utcnow(),
        round(time.monotonic() - t0, 3),
        tuple(targets),
        views,
        verdict,
        findings,
        options,
        tuple(notes),
    )


async def _probe(tr: Transport, t: NodeTarget, params: dict[str, Any], timeout: float) -> NodeView:
    try:
        await tr.connect()
    except ConnectFailure as exc:
        return NodeView(t.name, problem=f"cannot connect ({exc.kind}): {exc.message}")
    out = await tr.run_probe("job", params, timeout=timeout)
    view = node_from_records(t.name, list(out.records))
    problem = out.problem()
    if problem is not None and not out.first("done"):
        return (
            NodeView(t.name, problem=problem) if not out.records else _with_problem(view, problem)
        )
    return view


async def _left_behind(
    views: tuple[NodeView, ...],
    targets: Sequence[NodeTarget],
    transports: Mapping[str, Transport],
    fallback: Mapping[str, list[str]],
    remembered_fr: Mapping[str, list[str]],
    reads: ReadPlan,
    one: Callable[..., Awaitable[NodeView]],
) -> tuple[NodeView, ...]:
    """Where no job runs any more: what it wrote and the dumps it left, each file read
    once (a second, short pass on those nodes only: a live look pays nothing for it)."""
    gone = [v.node for v in views if not v.found and not v.problem]
    left = {n: fallback[n] for n in gone if fallback[n]}
    dumps = {n: remembered_fr[n] for n in gone if remembered_fr.get(n)}
    if not (left or dumps):
        return views
    after = await survey_reads(transports, gone, {}, left, dumps, PROBE_SLACK_S)
    busy = [t for t in targets if t.name in after.fallback_paths or t.name in after.fr_paths]
    more = await asyncio.gather(*(one(t, after, after=True) for t in busy))
    by_node = {v.node: v for v in more}
    reads.notes += after.notes
    reads.problems += after.problems
    reads.owners.update(after.owners)
    return tuple(_joined(v, by_node.get(v.node)) for v in views)


def _joined(view: NodeView, more: NodeView | None) -> NodeView:
    """The look, with the logs and dumps a second pass read on a node where no job runs."""
    from dataclasses import replace

    if more is None:
        return view
    return replace(view, logs=view.logs + more.logs, fr=view.fr + more.fr)


def _with_problem(view: NodeView, problem: str) -> NodeView:
    from dataclasses import replace

    return replace(view, problem=problem)
