"""The report (session) JSON as pydantic models: its JSON Schema (`ddptui schema --report`)
and the check a saved session passes before `ddptui report` / `ddptui replay` use it.

Readers are lenient on purpose: every key beyond CONTRACT.md's core is optional, and
unknown keys are kept (a newer ddptui may add some)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

StatusName = Literal["pass", "warn", "fail", "skip", "error"]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class FindingModel(_Open):
    """One diagnosed fact: what is wrong, where, why, the fix, and the exact lines."""

    id: str
    severity: Literal["error", "warning", "info"]
    nodes: list[str] = Field(default_factory=list)
    summary: str = ""
    cause: str = ""
    fix: str = ""
    evidence: list[str] = Field(default_factory=list)
    rank: int | None = None
    where: str | None = None
    lines: list[str] = Field(default_factory=list)


class NodeResultModel(_Open):
    """One node's outcome for one step; `data` holds the facts the step gathered there."""

    status: StatusName
    summary: str = ""
    duration_s: float | None = None
    data: dict[str, Any] | None = None


class StepModel(_Open):
    """One checklist step: its status, each node's result, and its findings."""

    id: str
    title: str = ""
    status: StatusName
    duration_s: float = 0.0
    nodes: dict[str, NodeResultModel] = Field(default_factory=dict)
    findings: list[FindingModel] = Field(default_factory=list)
    data: dict[str, Any] | None = None


class NodeModel(_Open):
    """A node as configured: display name, SSH target and rank (list order)."""

    name: str
    host: str
    rank: int


class FirstFailureModel(_Open):
    """The earliest failing step in checklist order, and its most specific finding."""

    step: str
    nodes: list[str]
    finding: str | None
    summary: str
    fix: str
    rank: int | None = None
    where: str | None = None


class LogModel(_Open):
    """A node's log, bounded: the last lines, and excerpts around the lines findings quote."""

    lines_total: int = 0
    tail: list[str] = Field(default_factory=list)
    excerpts: list[dict[str, Any]] = Field(default_factory=list)


class MetricsModelDoc(_Open):
    """Live metrics of the session, downsampled, in the metrics probe's record format."""

    interval_s: float | None = None
    nodes: dict[str, dict[str, Any]] = Field(default_factory=dict)


class ReportModel(_Open):
    """A ddptui diagnosis report / saved session (CONTRACT.md + docs/report-format.md)."""

    ddptui_version: str
    config: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    nodes: list[NodeModel]
    steps: list[StepModel]
    first_failure: FirstFailureModel | None = None
    schema_version: int | None = None
    cluster: str | None = None
    verdict: str | None = None
    master: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    versions: dict[str, Any] | None = None
    tables: dict[str, Any] | None = None
    logs: dict[str, LogModel] | None = None
    metrics: MetricsModelDoc | None = None
    session: dict[str, Any] | None = None


def report_schema() -> dict[str, Any]:
    schema = ReportModel.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "ddptui report"
    return schema


class ReportError(Exception):
    """A saved session that cannot be used: what is wrong, and where."""


def load_report(path: str | Path) -> dict[str, Any]:
    """Read and check a saved session / JSON report; ReportError says what is wrong."""
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ReportError(f"{path}: is a directory, not a saved session") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportError(
            f"{path}:{exc.lineno}:{exc.colno}: not JSON ({exc.msg}); "
            "give a report written by `ddptui check --json` or an autosaved session"
        ) from None
    try:
        ReportModel.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors()[:8]:
            where = ".".join(str(x) for x in err["loc"]) or "(top level)"
            problems.append(f"{where}: {err['msg']}")
        raise ReportError(f"{path}: not a ddptui report: " + "; ".join(problems)) from None
    if not isinstance(data, dict):  # pragma: no cover - the model check above ensures it
        raise ReportError(f"{path}: not a ddptui report")
    return data
