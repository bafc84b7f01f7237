"""The report (session) JSON as pydantic models: its JSON Schema (`ddptui schema --report`)
and the check a saved session passes before `ddptui report` / `ddptui replay` use it.

Readers are lenient on purpose: every key beyond CONTRACT.md's core is optional, and
unknown keys are kept (a newer ddptui may add some)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.model import NodeResult, StepResult
from ddptui.report.first import FirstFailure

StatusName = Literal["pass", "warn", "fail", "skip", "error"]
# A number as measured: kept int or float as it came, so a report dumps byte for byte
# as it was built or saved (a float field would write a probe's 100 as 100.0).
Number = int | float


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

    def to_finding(self) -> Finding:
        return Finding.from_dict(self.model_dump())


class NodeResultModel(_Open):
    """One node's outcome for one step; `data` holds the facts the step gathered there."""

    status: StatusName
    summary: str = ""
    duration_s: Number | None = None
    data: dict[str, Any] | None = None

    def to_result(self) -> NodeResult:
        return NodeResult(self.status, self.summary, self.data or {}, self.duration_s or 0.0)


class StepModel(_Open):
    """One checklist step: its status, each node's result, and its findings."""

    id: str
    title: str = ""
    status: StatusName
    duration_s: Number = 0.0
    nodes: dict[str, NodeResultModel] = Field(default_factory=dict)
    findings: list[FindingModel] = Field(default_factory=list)
    data: dict[str, Any] | None = None

    def to_result(self) -> StepResult:
        """The immutable result a live run holds (replay and snapshot tests use it)."""
        return StepResult(
            self.id,
            self.title or self.id,
            self.status,
            self.duration_s,
            {name: n.to_result() for name, n in self.nodes.items()},
            tuple(f.to_finding() for f in self.findings),
            self.data or {},
        )


class NodeModel(_Open):
    """A node as configured: display name, SSH target and rank (list order)."""

    name: str
    host: str
    rank: int


class FirstFailureModel(_Open):
    """The earliest failing step in checklist order, and its most specific finding (with
    the global rank and the place in code when that finding names them)."""

    step: str
    nodes: list[str]
    finding: str | None
    summary: str
    fix: str
    rank: int | None = None
    where: str | None = None


class ExcerptModel(_Open):
    """Lines of a node's log around a line a finding cites; `marked` indexes the cited
    line(s) within `lines`, `ids` are the LogStore ids ("node#seq") of `lines`."""

    finding: str | None = None
    step: str | None = None
    first_line: int | None = None
    lines: list[str] = Field(default_factory=list)
    ids: list[str] = Field(default_factory=list)
    marked: list[int] = Field(default_factory=list)


class LogModel(_Open):
    """A node's log, bounded: the last lines, and excerpts around the lines findings quote."""

    lines_total: int = 0
    tail: list[str] = Field(default_factory=list)
    tail_first: int | None = None
    excerpts: list[ExcerptModel] = Field(default_factory=list)


class SkewRowModel(_Open):
    """One inventory fact across nodes; `odd` names the nodes that differ from the majority."""

    fact: str
    values: dict[str, Any] = Field(default_factory=dict)
    odd: list[str] = Field(default_factory=list)


class EnvDiffRowModel(_Open):
    """A launch variable that differs across nodes (null: unset there)."""

    name: str
    values: dict[str, Any] = Field(default_factory=dict)


class RankRowModel(_Open):
    """One rank's allreduce at the largest size (busbw null with one rank)."""

    rank: int | None = None
    node: str | None = None
    bytes: int | None = None
    time_us: Number | None = None
    busbw_gbps: Number | None = None
    algbw_gbps: Number | None = None
    link_gbps: Number | None = None
    straggler: bool = False
    slowest: bool = False


class SweepSizeModel(_Open):
    """One message size of the sweep, as nccl-tests reports it (the slowest rank)."""

    bytes: int
    time_us: Number | None = None
    algbw_gbps: Number | None = None
    busbw_gbps: Number | None = None


class AllreduceTableModel(_Open):
    """The allreduce step's bandwidth table; `busbw_note` says why busbw is n/a."""

    backend: str | None = None
    world_size: int | None = None
    seconds: Number | None = None
    timed_out: bool | None = None
    ranks: list[RankRowModel] = Field(default_factory=list)
    sizes: list[SweepSizeModel] = Field(default_factory=list)
    busbw_note: str | None = None


class TablesModel(_Open):
    """Tables derived from the steps for the reports (older reports may lack any)."""

    skew: list[SkewRowModel] = Field(default_factory=list)
    env_diff: list[EnvDiffRowModel] = Field(default_factory=list)
    allreduce: AllreduceTableModel | None = None


class TimingsModel(_Open):
    total_s: Number | None = None
    steps: dict[str, Number | None] = Field(default_factory=dict)


class VersionsModel(_Open):
    ddptui: str | None = None
    login_python: str | None = None
    nodes: dict[str, dict[str, Any]] = Field(default_factory=dict)


class MasterModel(_Open):
    addr: str | None = None
    port: int | None = None


class MetricsModelDoc(_Open):
    """Live metrics of the session, downsampled, in the metrics probe's record format.
    The samples stay untyped on purpose: typing them made checking a 13 MB 32-node
    8-GPU session take 4-6 s instead of milliseconds."""

    interval_s: Number | None = None
    nodes: dict[str, dict[str, Any]] = Field(default_factory=dict)


class ReportModel(_Open):
    """A ddptui diagnosis report / saved session (CONTRACT.md + docs/report-format.md):
    what build_report, the job report and the logs report return, and what load_report
    checks a saved one against. Fields in the order the JSON writes them; a new
    top-level key is one line here (and where a builder fills it)."""

    schema_version: int | None = None
    ddptui_version: str
    command: str | None = None  # "job" / "diagnose"; absent for the checklist
    config: str | None = None
    cluster: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    nodes: list[NodeModel]
    master: MasterModel | None = None
    steps: list[StepModel]
    first_failure: FirstFailureModel | None = None
    verdict: str | None = None
    timings: TimingsModel | None = None
    versions: VersionsModel | None = None
    tables: TablesModel | None = None
    logs: dict[str, LogModel] | None = None
    metrics: MetricsModelDoc | None = None
    session: dict[str, Any] | None = None
    exclude: str | None = None
    """A Slurm hostlist of the nodes failing findings name ("" when none): `sbatch --exclude=`."""
    lint: dict[str, Any] | None = None  # the audit of the config's `script:`
    job: dict[str, Any] | None = None  # `ddptui job`: verdict, ranks, stack groups

    def document(self) -> dict[str, Any]:
        """The JSON document: the keys given, in this order, values as given."""
        return self.model_dump(mode="json", exclude_unset=True)

    def first(self) -> FirstFailure | None:
        """The first failure the report records, with its finding's cause and evidence."""
        ff = self.first_failure
        if ff is None:
            return None
        step = next((s for s in self.steps if s.id == ff.step), None)
        found = next((f for f in step.findings if f.id == ff.finding), None) if step else None
        return FirstFailure(
            ff.step,
            tuple(ff.nodes),
            ff.finding,
            ff.summary,
            ff.fix,
            ff.rank,
            ff.where,
            found.cause if found else "",
            tuple(found.evidence) if found else (),
        )


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
    return validate_report(data, str(path))


def report_model(data: Any, source: str = "report") -> ReportModel:
    """`data` as the report model; ReportError names each problem's place."""
    try:
        return ReportModel.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors()[:8]:
            where = ".".join(str(x) for x in err["loc"]) or "(top level)"
            problems.append(f"{where}: {err['msg']}")
        raise ReportError(f"{source}: not a ddptui report: " + "; ".join(problems)) from None


def validate_report(data: Any, source: str = "report") -> dict[str, Any]:
    """`data` checked against ReportModel and returned unchanged (a saved document is
    written again byte for byte); ReportError names each problem's place."""
    report_model(data, source)
    if not isinstance(data, dict):  # pragma: no cover - the model check above ensures it
        raise ReportError(f"{source}: not a ddptui report")
    return data
