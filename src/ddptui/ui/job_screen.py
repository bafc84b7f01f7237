"""The job view: the user's own training job as `ddptui job` saw it. The verdict on top,
one row per rank (where it is, how busy, how long quiet), the stack groups with the odd
one marked, and the findings with their fix. Plain data in (the report document that
ddptui.job.report.build_job_report makes); `r` looks again when a re-look is given."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label, Static

from ddptui.glyphs import severity_glyph
from ddptui.report.export import Report, document_of

Relook = Callable[[], Awaitable[Report]]
STATE_STYLE = {
    "healthy": ("HEALTHY", "bold green"),
    "waiting": ("WAITING", "bold cyan"),
    "hung": ("HUNG", "bold red"),
    "crashed": ("CRASHED", "bold red"),
    "slow": ("SLOW", "bold yellow"),
    "stalled": ("NO PROGRESS", "bold yellow"),
    "ended": ("ENDED", "bold yellow"),
    "none": ("NO JOB FOUND", "bold red"),
    "ambiguous": ("AMBIGUOUS", "bold red"),
}
KEYS_HINT = "esc closes · r looks again · read-only: ddptui never stops or signals your job"
COLUMNS = ("rank", "node", "pid", "st", "cpu%", "rss", "quiet", "where")
SEVERITY_STYLE = {"error": "red", "warning": "yellow", "info": "dim"}


def _size(n: object) -> str:
    if not isinstance(n, int):
        return "n/a"
    value = float(n)
    for unit in ("B", "K", "M", "G"):
        if value < 1024:
            return f"{value:.0f}{unit}"
        value /= 1024
    return f"{value:.0f}T"


def rank_cells(row: dict[str, Any]) -> tuple[str, ...]:
    """One rank as table cells ("n/a" where a fact is missing)."""
    age = row.get("output_age_s")
    cpu = row.get("cpu_pct")
    return (
        str(row.get("rank") if row.get("rank") is not None else "?"),
        str(row.get("node") or "?"),
        str(row.get("pid") or "?"),
        str(row.get("state") or "?"),
        f"{cpu:.0f}" if isinstance(cpu, int | float) else "n/a",
        _size(row.get("rss_bytes")),
        f"{age:.0f}s" if isinstance(age, int | float) else "n/a",
        str(row.get("doing") or row.get("stack_error") or "n/a"),
    )


def verdict_text(report: dict[str, Any]) -> Text:
    job = report.get("job") or {}
    label, style = STATE_STYLE.get(
        str(job.get("state")), (str(job.get("state", "?")).upper(), "bold")
    )
    text = Text()
    text.append(f" {label} ", style=f"{style} reverse")
    headline = str(job.get("headline") or "")
    if headline.lower() != label.lower():  # not "NO JOB FOUND  no job found"
        text.append(f"  {headline}")
    return text


def findings_text(report: dict[str, Any]) -> Text:
    text = Text()
    steps = report.get("steps") or [{}]
    for f in steps[0].get("findings") or ():
        severity = str(f.get("severity"))
        glyph, style = severity_glyph(severity) or "?", SEVERITY_STYLE.get(severity, "bold")
        text.append(f"{glyph} ", style=style)
        text.append(f"{f.get('id')}", style="bold")
        text.append(f"  {f.get('summary')}\n")
        if f.get("severity") != "info":
            text.append(f"    why: {f.get('cause')}\n", style="dim")
            text.append(f"    fix: {f.get('fix')}\n", style="green")
    return text


def groups_text(report: dict[str, Any]) -> Text:
    """The stack groups, the odd one(s) marked: "▶ rank 1 (node1): is in `evaluate` …"."""
    job = report.get("job") or {}
    node_of = {r.get("rank"): r.get("node") for r in job.get("ranks") or ()}
    text = Text()
    for g in job.get("stack_groups") or ():
        ranks = list(g.get("ranks") or ())
        nodes = sorted({str(node_of.get(r)) for r in ranks if node_of.get(r)})
        where = f" ({', '.join(nodes)})" if 0 < len(nodes) <= 4 else ""
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
        style = "bold red" if g.get("odd") else ""
        text.append("▶ " if g.get("odd") else "  ", style=style)
        text.append(f"{who}{where}: ", style=style or "bold")
        text.append(f"{g.get('doing')}\n")
    return text


class JobScreen(ModalScreen[None]):
    """JobScreen(report, relook=None): `report` is build_job_report's document; `relook`,
    when given, is an async callable returning a fresh one (bound to `r`)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close"),
        Binding("j", "dismiss", "Close", show=False),
        Binding("q", "dismiss", "Close", show=False),
        Binding("r", "relook", "Look again"),
    ]
    DEFAULT_CSS = """
    JobScreen { align: center middle; }
    JobScreen > Vertical { width: 96%; height: 92%; border: thick $accent; background: $surface; }
    JobScreen #job-verdict { height: auto; width: 100%; padding: 0 1; }
    JobScreen DataTable { height: auto; max-height: 45%; }
    JobScreen #job-groups { height: auto; padding: 0 1; }
    JobScreen VerticalScroll { height: 1fr; padding: 0 1; }
    JobScreen #job-keys { height: 1; width: 100%; padding: 0 1; color: $text-muted; }
    """

    def __init__(self, report: Report, *, relook: Relook | None = None) -> None:
        super().__init__()
        self.report = document_of(report)
        self.relook = relook

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(verdict_text(self.report), id="job-verdict")
            table: DataTable[str] = DataTable(id="job-ranks", zebra_stripes=True, cursor_type="row")
            yield table
            yield Static(groups_text(self.report), id="job-groups")
            with VerticalScroll():
                yield Static(findings_text(self.report), id="job-findings")
            yield Label(KEYS_HINT, id="job-keys")

    def on_mount(self) -> None:
        self._fill()

    def _fill(self) -> None:
        table = self.query_one("#job-ranks", DataTable)
        table.clear(columns=True)
        table.add_columns(*COLUMNS)
        odd = {
            r
            for g in (self.report.get("job") or {}).get("stack_groups") or ()
            if g.get("odd")
            for r in g["ranks"]
        }
        ranks = (self.report.get("job") or {}).get("ranks") or ()
        table.display = bool(ranks)  # no job found: no empty table header
        for row in ranks:
            cells = rank_cells(row)
            style = "bold red" if row.get("rank") in odd else ""
            table.add_row(*(Text(c, style=style) for c in cells))
        self.query_one("#job-verdict", Label).update(verdict_text(self.report))
        self.query_one("#job-groups", Static).update(groups_text(self.report))
        self.query_one("#job-findings", Static).update(findings_text(self.report))

    def action_relook(self) -> None:
        if self.relook is None:
            self.notify("This view is a saved look; run `ddptui job` again for a fresh one.")
            return
        self.notify("Looking at the job again…")
        self._relook()

    @work(exclusive=True, group="job-relook", exit_on_error=False, description="ddptui job")
    async def _relook(self) -> None:
        assert self.relook is not None
        try:
            self.report = document_of(await self.relook())
        except Exception as exc:  # noqa: BLE001 - shown to the user, the screen stays
            self.notify(f"Could not look again: {exc}", severity="error")
            return
        self._fill()
