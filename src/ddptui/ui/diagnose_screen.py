"""The diagnosis of log files (`ddptui diagnose` in the TUI, key `d`): the first cause with
its fix, the evidence lines with file:line, the other findings, a timeline per rank.
Plain data in (the report document ddptui.logs.report.build_log_report makes); opened
without one, it asks for the paths first.  Enter in the path box diagnoses again."""

from __future__ import annotations

import glob
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from ddptui.glyphs import GLYPH, severity_glyph
from ddptui.report.export import Report, document_of
from ddptui.report.first import FirstFailure

SEVERITY_STYLE = {"error": "bold red", "warning": "bold yellow", "info": "dim"}
TIMELINE_EVENTS = 8


def _step(report: dict[str, Any]) -> dict[str, Any]:
    steps = [s for s in report.get("steps") or [] if isinstance(s, dict)]
    return next((s for s in steps if s.get("id") == "logs"), steps[0] if steps else {})


def diagnosis_text(report: Report) -> Text:
    """The report as the screen shows it."""
    report = document_of(report)
    step = _step(report)
    data = step.get("data") or {}
    findings = [f for f in step.get("findings") or [] if isinstance(f, dict)]
    out = Text()
    out.append(f"{data.get('lines', 0):,} lines from {len(report.get('nodes') or [])} input(s)\n", "dim")
    for problem in data.get("problems") or []:
        out.append(f"{GLYPH['fail']} {problem}\n", "red")
    first = FirstFailure.from_document(report)
    lead = next((f for f in findings if first and f.get("id") == first.finding), None)
    if lead is None:
        out.append(f"\n{GLYPH['pass']} Nothing wrong found", "bold green")
        out.append(": no line matches a known failure.\n")
    else:
        rank = f", rank {lead['rank']}" if lead.get("rank") is not None else ""
        out.append("\nFirst cause: ", "bold")
        out.append(f"{lead.get('id')}{rank}\n", "bold red")
        out.append(f"{lead.get('summary', '')}\n")
        if lead.get("where"):
            out.append("in code: ", "bold")
            out.append(f"{lead['where']}\n")
        out.append("cause: ", "bold")
        out.append(f"{lead.get('cause', '')}\n")
        out.append("fix:   ", "bold green")
        out.append(f"{lead.get('fix', '')}\n")
        out.append("evidence:\n", "bold")
        for ev in lead.get("evidence") or []:
            out.append(f"  {ev}\n", "yellow")
    others = [f for f in findings if f is not lead]
    if others:
        out.append("\nAlso in the logs\n", "bold underline")
        for f in others:
            severity = str(f.get("severity"))
            glyph, style = severity_glyph(severity) or "?", SEVERITY_STYLE.get(severity, "")
            out.append(f"{glyph} ", style)
            out.append(f"{f.get('id')}", "bold")
            out.append(f": {f.get('summary', '')}\n")
    timelines = [t for t in data.get("timelines") or [] if t.get("events")]
    if timelines:
        out.append("\nTimeline per rank (UTC)\n", "bold underline")
        for tl in timelines:
            out.append(f"{tl.get('key')}\n", "bold")
            events = tl.get("events") or []
            cut = max(0, len(events) - TIMELINE_EVENTS) + int(tl.get("dropped") or 0)
            if cut:
                out.append(f"  … {cut} earlier\n", "dim")
            for ev in events[-TIMELINE_EVENTS:]:
                severity = str(ev.get("severity"))
                glyph, style = severity_glyph(severity) or " ", SEVERITY_STYLE.get(severity, "")
                clock = str(ev.get("t") or "")[11:23] or "--:--:--.---"
                out.append(f"  {clock} ")
                out.append(f"{glyph} {ev.get('label')}", style)
                out.append(f"  ({ev.get('where')})\n", "dim")
    return out


def expand_specs(text: str) -> list[str]:
    """The path box's words: local globs expanded (a word matching nothing stays, so the
    diagnosis says it is missing); NODE:GLOB and "-" stay as typed."""
    out: list[str] = []
    for word in shlex.split(text):
        if ":" in word.split("/", 1)[0] or not glob.has_magic(word):
            out.append(word)
            continue
        # Absolute or relative globs alike (Path.glob wants a relative pattern).
        expanded = str(Path(word).expanduser())
        out += sorted(glob.glob(expanded)) or [word]  # noqa: PTH207
    return out


class DiagnoseScreen(ModalScreen[None]):
    """DiagnoseScreen(report=None, *, paths=(), config_path=None)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close"),
        Binding("q", "dismiss", "Close", show=False),
        Binding("d", "dismiss", "Close", show=False),
    ]
    DEFAULT_CSS = """
    DiagnoseScreen { align: center middle; }
    DiagnoseScreen > Vertical { width: 95%; height: 90%; border: thick $accent; background: $surface; }
    DiagnoseScreen #diag-title { text-style: bold; padding: 0 1; }
    DiagnoseScreen #diag-paths { margin: 0 1; }
    DiagnoseScreen VerticalScroll { height: 1fr; padding: 0 1; }
    """

    def __init__(
        self,
        report: Report | None = None,
        *,
        paths: Sequence[str] = (),
        config_path: str | None = None,
    ) -> None:
        super().__init__()
        self.report = document_of(report) if report is not None else None
        self.paths = list(paths)
        self.config_path = config_path

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Log diagnosis", id="diag-title")
            yield Input(
                " ".join(shlex.quote(p) for p in self.paths),
                placeholder="log files or globs"
                + (", NODE:GLOB on a node" if self.config_path else "")
                + " — enter diagnoses",
                id="diag-paths",
            )
            with VerticalScroll():
                yield Static(id="diag-body")

    def on_mount(self) -> None:
        if self.report is not None:
            self._show(self.report)
            self.query_one(VerticalScroll).focus()
        elif self.paths:
            self._diagnose(self.paths)
        else:
            self.query_one("#diag-body", Static).update(
                Text("Type the log files to read (globs work) and press enter.", "dim")
            )
            self.query_one(Input).focus()

    def _show(self, report: Report) -> None:
        self.report = document_of(report)
        self.query_one("#diag-body", Static).update(diagnosis_text(self.report))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        specs = expand_specs(event.value)
        if specs:
            self._diagnose(specs)

    def _diagnose(self, specs: list[str]) -> None:
        self.query_one("#diag-body", Static).update(Text(f"reading {len(specs)} input(s)…", "dim"))
        self._run(specs)

    @work(thread=True, exclusive=True, group="diagnose", exit_on_error=False)
    def _run(self, specs: list[str]) -> None:
        from ddptui.config import ConfigError
        from ddptui.logs.reader import InputError
        from ddptui.logs.session import SpecError, run_diagnosis

        try:
            _, report, _ = run_diagnosis(specs, config_path=self.config_path)
        except ConfigError as exc:
            message = "invalid config: " + "; ".join(exc.problems)
        except (SpecError, InputError) as exc:
            message = str(exc)
        except Exception as exc:  # noqa: BLE001 - shown, not raised: the TUI stays up
            message = f"internal error (a bug in ddptui): {type(exc).__name__}: {exc}"
        else:
            self.app.call_from_thread(self._show, report)
            return
        self.app.call_from_thread(
            self.query_one("#diag-body", Static).update, Text(f"{GLYPH['fail']} {message}", "red")
        )
