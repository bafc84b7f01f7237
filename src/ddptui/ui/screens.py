"""Modal screens: a node's log, and the export dialog."""

from __future__ import annotations

import re
from typing import ClassVar

from rich.highlighter import Highlighter
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Log, Select

from ddptui.report.json_report import quotes_line

LOG_MAX_LINES = 5000


class NcclHighlighter(Highlighter):
    """NCCL WARN lines and torch errors stand out; lines behind a finding are marked."""

    ERROR = re.compile(r"Error|ERROR|Traceback|\[E\d{4}|failed|timed out")

    def highlight(self, text: Text) -> None:
        plain = text.plain
        if plain.startswith("⟶ "):
            text.stylize("bold reverse red")
        elif plain.startswith("• "):
            text.stylize("bold")
        elif "NCCL WARN" in plain:
            text.stylize("bold yellow")
        elif self.ERROR.search(plain):
            text.stylize("red")
        elif "NCCL INFO" in plain:
            text.stylize("dim")


class LogScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close"),
        Binding("l", "dismiss", "Close"),
        Binding("q", "dismiss", "Close", show=False),
    ]
    DEFAULT_CSS = """
    LogScreen { align: center middle; }
    LogScreen > Vertical { width: 95%; height: 90%; border: thick $accent; background: $surface; }
    LogScreen Log { height: 1fr; }
    """

    def __init__(self, node: str, lines: list[str], findings: list[tuple[str, str]]) -> None:
        """findings: (finding id, evidence line) for the findings that name this node."""
        super().__init__()
        self.node = node
        self.lines = lines
        self.findings = findings

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(
                f" {self.node}: allreduce output ({len(self.lines)} lines) and the "
                "evidence behind its findings · esc closes"
            )
            yield Log(max_lines=LOG_MAX_LINES, highlight=True, id="log")

    def on_mount(self) -> None:
        log = self.query_one(Log)
        log.highlighter = NcclHighlighter()
        if self.findings:
            log.write_lines([f"• {fid}: {ev}" for fid, ev in self.findings])
            log.write_line("")
        log.write_lines(
            mark_lines(self.lines, self.findings, self.node)
            or ["(no allreduce output from this node yet)"]
        )


def mark_lines(lines: list[str], findings: list[tuple[str, str]], node: str) -> list[str]:
    """The log with the lines a finding quotes marked "⟶ ID │ line": the matched
    signature, where it happened in the stream."""
    prefix = f"{node}: "
    quotes = [(fid, ev.strip().removeprefix(prefix)) for fid, ev in findings]
    out = []
    for line in lines:
        hit = next((fid for fid, q in quotes if quotes_line(q, line)), None)
        out.append(f"⟶ {hit} │ {line}" if hit else line)
    return out


class ExportScreen(ModalScreen[tuple[str, str] | None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]
    DEFAULT_CSS = """
    ExportScreen { align: center middle; }
    ExportScreen > Vertical { width: 70; height: auto; border: thick $accent;
                              background: $surface; padding: 1 2; }
    ExportScreen Input, ExportScreen Select { margin-bottom: 1; }
    """
    EXT: ClassVar[dict[str, str]] = {"json": "json", "markdown": "md", "html": "html"}

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Export the diagnosis report")
            yield Select(
                [("JSON", "json"), ("Markdown", "markdown"), ("HTML", "html")],
                value="markdown",
                allow_blank=False,
                id="fmt",
            )
            yield Input(value="ddptui-report.md", id="path")
            yield Button("Export", variant="primary", id="go")

    def on_select_changed(self, event: Select.Changed) -> None:
        path = self.query_one("#path", Input)
        stem = path.value.rsplit(".", 1)[0] or "ddptui-report"
        path.value = f"{stem}.{self.EXT[str(event.value)]}"

    def _submit(self) -> None:
        fmt = str(self.query_one("#fmt", Select).value)
        path = self.query_one("#path", Input).value.strip()
        if not path:
            self.notify("Give a file path.", severity="warning")
            return
        self.dismiss((fmt, path))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self._submit()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._submit()

    def action_cancel(self) -> None:
        self.dismiss(None)
