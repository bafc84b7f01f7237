"""A LogDiagnosis as the report document `check` writes (CONTRACT.md): one step, id
"logs", whose nodes are the inputs; `first_failure.step` is "logs".  Core layer."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Final

from ddptui import __version__
from ddptui.diagnosis.evidence import parse_evidence
from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.kb import kb_finding
from ddptui.diagnosis.model import NodeResult, StepResult, node_status_from, step_status
from ddptui.logs.diagnose import LogDiagnosis, RankTimeline

if TYPE_CHECKING:
    from ddptui.report.schema import ReportModel

STEP_ID: Final = "logs"
STEP_TITLE: Final = "Log diagnosis"
SCHEMA_VERSION: Final = 1


@dataclass(frozen=True)
class InputInfo:
    """One input as the report lists it: its label, where it was read, its size."""

    label: str
    host: str = "local"  # "local", or the configured node it was read on
    bytes: int = 0
    lines: int = 0
    seen_on: tuple[str, ...] = ()  # the nodes that see this file (a shared filesystem)
    fs: str = ""  # its filesystem type and source, as the node that read it saw them


def iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z"
    )


def timeline_doc(tl: RankTimeline) -> dict[str, Any]:
    return {
        "key": tl.key,
        "dropped": tl.dropped,
        "events": [
            {
                "t": iso(e.t),
                "where": f"{e.source}:{e.lineno}",
                "severity": e.severity,
                "label": e.label,
                "id": e.id,
            }
            for e in tl.events
        ],
    }


def step_result(
    diag: LogDiagnosis,
    inputs: Sequence[InputInfo],
    seconds: float,
    extra: dict[str, Any] | None = None,
) -> StepResult:
    """The diagnosis as a checklist-shaped step result."""
    nodes: dict[str, NodeResult] = {}
    placed = [_placed(f, inputs, f is diag.first) for f in diag.findings]
    for info in inputs:
        mine = [f for f in placed if info.label in f.nodes]
        status = node_status_from(placed, info.label)
        worst = next((f for f in mine if f.severity == status_severity(status)), None)
        summary = f"{info.lines} lines"
        if worst is not None:
            summary += f"; {worst.summary}"
        elif not mine:
            summary += "; nothing known found"
        nodes[info.label] = NodeResult(status, summary, {"bytes": info.bytes, "lines": info.lines})
    findings = tuple(placed) + _input_findings(diag, inputs)
    status = step_status(nodes, findings) if nodes else ("fail" if diag.failed else "pass")
    if status == "fail" and not diag.failed:
        status = "warn"  # a finding named an input but none is the cause: not a failure
    data = {
        "lines": diag.lines_read,
        "bytes": diag.bytes_read,
        "inputs": [{**vars(i), "seen_on": list(i.seen_on)} for i in inputs],
        "timelines": [timeline_doc(tl) for tl in diag.timelines],
        "problems": list(diag.problems),
        **(extra or {}),
    }
    return StepResult(STEP_ID, STEP_TITLE, status, seconds, nodes, findings, data)


def _placed(f: Finding, inputs: Sequence[InputInfo], lead: bool = False) -> Finding:
    """A finding that names no node (a rule over facts with no host stated) belongs to the
    inputs its evidence quotes ("file:line: text"), so that input is not reported as clean.
    So does the first cause where it names only hosts the log states, none of them an input
    (round 18's gpu12 captures: the files' rows showed a warning under a first failure that
    named `gpu02`)."""
    labels = {i.label for i in inputs}
    if f.nodes and (not lead or set(f.nodes) & labels):
        return f
    said = {q.source for q in map(parse_evidence, f.evidence) if q.placed}
    quoted = tuple(i.label for i in inputs if i.label in said)
    return dataclasses.replace(f, nodes=(*f.nodes, *quoted)) if quoted else f


def _input_findings(diag: LogDiagnosis, inputs: Sequence[InputInfo]) -> tuple[Finding, ...]:
    """What the report says about the inputs themselves (ids in kb/logs.yaml)."""
    out = []
    if diag.problems:
        out.append(
            kb_finding(
                "LOGS-UNREADABLE",
                [],
                f"{len(diag.problems)} input(s) not read in full",
                diag.problems[:20],
                count=len(diag.problems),
                problems="; ".join(diag.problems[:5]),
            )
        )
    if not diag.findings and diag.lines_read:
        out.append(
            kb_finding(
                "LOGS-NOTHING-KNOWN",
                [i.label for i in inputs],
                f"no known failure in {diag.lines_read:,} lines",
                line_count=f"{diag.lines_read:,}",
            )
        )
    return tuple(out)


def status_severity(status: str) -> str:
    return {"fail": "error", "warn": "warning"}.get(status, "info")


def first_failure(first: Finding | None) -> dict[str, Any] | None:
    from ddptui.report.first import failure_of

    if first is None or first.severity != "error":
        return None
    return failure_of(STEP_ID, first).to_dict()


def build_log_report(
    diag: LogDiagnosis,
    inputs: Sequence[InputInfo],
    *,
    config: str | None,
    started_at: str,
    finished_at: str,
    seconds: float,
    extra: dict[str, Any] | None = None,
) -> ReportModel:
    from ddptui.report.schema import report_model

    step = step_result(diag, inputs, seconds, extra)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "ddptui_version": __version__,
        "command": "diagnose",
        "config": config,
        "cluster": "log diagnosis",
        "started_at": started_at,
        "finished_at": finished_at,
        "nodes": [
            {"name": i.label, "host": i.host, "rank": n} for n, i in enumerate(inputs)
        ],
        "steps": [step.to_dict()],
        "first_failure": first_failure(diag.first),
        "verdict": step.status,
        "timings": {"total_s": round(seconds, 3), "steps": {STEP_ID: step.duration_s}},
        "logs": {},
        "metrics": None,
    }
    return report_model(doc, "diagnose report")  # the one report model, as check's
