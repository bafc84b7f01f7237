"""A look at a job as the same report document as `check` (report/schema.py): one step
"job", `first_failure.step` = "job" with the finding's `rank` and `where`, plus a `job`
section (verdict, ranks table, stack groups) for the views. Pure core."""

from __future__ import annotations

import platform
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ddptui import __version__
from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.model import NodeResult, StepResult, node_status_from, step_status
from ddptui.job.joblogs import classify, rank_lines, root_causes
from ddptui.job.model import RankView
from ddptui.job.run import JobLook, JobOptions, look_at_job
from ddptui.job.stacks import describe_groups, rank_ranges
from ddptui.report.first import failure_of
from ddptui.report.json_report import SCHEMA_VERSION

if TYPE_CHECKING:
    from ddptui.report.schema import ReportModel

STEP_TITLE = "Your training job"
LOG_TAIL = 200
TIMELINE_LINES = 40


def rank_row(r: RankView) -> dict[str, Any]:
    good = r.good_stacks()
    place = good[-1].place if good else None
    return {
        "rank": r.rank,
        "local_rank": r.local_rank,
        "world_size": r.world_size,
        "node": r.node,
        "pid": r.pid,
        "state": r.state,
        "cpu_pct": r.cpu_pct,
        "rss_bytes": r.rss_bytes,
        "gpu": r.gpu,
        "output_age_s": r.output_age_s,
        "output_grew": r.output_grew,
        "output": r.stdout.path if r.stdout.kind == "file" else r.stdout.kind,
        "wchan": r.wchan,
        "where": place.where if place else None,
        "doing": place.describe(one=True) if place else None,
        "stack": [f"{f.func} ({f.file}:{f.line})" for f in good[-1].dump.main.python_frames]
        if good and good[-1].dump and good[-1].dump.main
        else [],
        "stack_error": r.stack_error,
        "env": r.env,
    }


def _node_results(look: JobLook, findings: tuple[Finding, ...]) -> dict[str, NodeResult]:
    out = {}
    for v in look.views:
        if v.problem:
            out[v.node] = NodeResult("fail", v.problem)
            continue
        if not v.found:
            read = [log.path for log in v.logs if log.lines]
            summary = "no process of the job" + (f"; read {', '.join(read)}" if read else "")
            status = node_status_from(findings, v.node)
            out[v.node] = NodeResult("skip" if status == "pass" else status, summary)
            continue
        ranks = [r.rank for r in v.ranks if r.rank is not None]
        summary = f"{len(v.ranks)} rank(s) {rank_ranges(ranks)}, torchrun pid {(v.agent or {}).get('pid')}"
        out[v.node] = NodeResult(
            node_status_from(findings, v.node),
            summary,
            {"ranks": [rank_row(r) for r in v.ranks], "agent_cmd": (v.agent or {}).get("cmd")},
        )
    return out


def first_failure(findings: Sequence[Finding]) -> dict[str, Any] | None:
    primary = next((f for f in findings if f.severity == "error"), None)
    return failure_of("job", primary).to_dict() if primary is not None else None


def build_job_report(
    look: JobLook, config_name: str | None, master: dict[str, Any]
) -> ReportModel:
    findings = look.findings
    nodes = _node_results(look, findings)
    status = step_status(nodes, findings)
    if look.state in ("hung", "crashed") and status != "fail":
        status = "fail"
    step = StepResult("job", STEP_TITLE, status, look.duration_s, nodes, findings, _job_data(look))
    verdict = {"fail": "fail", "error": "error", "warn": "warn"}.get(status, "pass")
    logs = {
        v.node: {
            "lines_total": sum(len(log.lines) for log in v.logs),
            "tail": [ln for log in v.logs for ln in log.lines][-LOG_TAIL:],
            "excerpts": [],
        }
        for v in look.views
        if v.logs
    }
    from ddptui.report.schema import report_model

    doc = {
        "schema_version": SCHEMA_VERSION,
        "ddptui_version": __version__,
        "command": "job",
        "config": look.config_path,
        "cluster": config_name,
        "started_at": look.started_at,
        "finished_at": look.finished_at,
        "nodes": [{"name": t.name, "host": t.host, "rank": t.rank} for t in look.targets],
        "master": master,
        "steps": [step.to_dict()],
        "first_failure": first_failure(findings),
        "verdict": verdict,
        "timings": {"total_s": look.duration_s, "steps": {"job": look.duration_s}},
        "versions": {"ddptui": __version__, "login_python": platform.python_version(), "nodes": {}},
        "logs": logs,
        "job": step.data,
    }
    return report_model(doc, "job report")  # the one report model, as check's


def timelines(look: JobLook) -> dict[str, dict[str, Any]]:
    """Per rank (by global rank): its last lines from the job's logs, and what the
    knowledge base reads in them (the same classification as `ddptui diagnose`)."""
    out: dict[str, dict[str, Any]] = {}
    for view in look.views:
        here = [r.rank for r in view.ranks if r.rank is not None]
        l2g = {
            r.local_rank: r.rank
            for r in view.ranks
            if r.local_rank is not None and r.rank is not None
        }
        if not here:  # no live process: the ranks torchrun's summary names
            here = [c.rank for log in view.logs for c in root_causes(log) if c.rank is not None]
        for rank in sorted(set(here)):
            lines = [ln for log in view.logs for ln in rank_lines(log, rank, here, l2g)]
            if not lines:
                continue
            first, _ = classify(lines, f"{view.node}:rank{rank}")
            out[str(rank)] = {
                "node": view.node,
                "lines": lines[-TIMELINE_LINES:],
                "finding": first.id if first else None,
                "summary": first.summary if first else None,
            }
    return out


def _job_data(look: JobLook) -> dict[str, Any]:
    v = look.verdict
    node_of = {r.rank: r.node for r in v.ranks if r.rank is not None}
    return {
        "state": v.state,
        "headline": v.headline,
        "world_size": v.world_size,
        "missing_ranks": list(v.missing),
        "progressing_ranks": list(v.progressing),
        "idle_ranks": list(v.stuck),
        "stack_groups": [
            {
                "ranks": list(g.ranks),
                "odd": g.odd,
                "kind": g.place.kind,
                "op": g.place.op,
                "where": g.place.where,
                "doing": g.place.describe(one=len(g.ranks) == 1),
            }
            for g in v.groups
        ],
        "stacks_summary": describe_groups(v.groups, node_of) if v.groups else None,
        "ranks": [rank_row(r) for r in v.ranks],
        "candidates": [
            {
                "node": c.node,
                "pid": c.pid,
                "cmd": c.cmd,
                "started": c.started,
                "ranks": list(c.ranks),
            }
            for view in look.views
            for c in view.candidates
        ],
        "timelines": timelines(look),
        "window_s": look.options.window_s,
        "notes": list(look.notes),
    }


async def look_report(
    config: Any,
    config_path: str,
    *,
    transports: dict[str, Any] | None = None,
    options: JobOptions | None = None,
) -> ReportModel:
    """One look at the job as the report document: what the TUI's job view shows. Pass
    the session's transports to reuse its connections (they are left open)."""
    look = await look_at_job(config, config_path, options or JobOptions(), transports=transports)
    master = {"addr": config.master.addr, "port": config.master.port}
    return build_job_report(look, config.name, master)
