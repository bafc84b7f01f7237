"""A node's log: the evidence behind its findings first, then the stream, with each
line a finding cites marked in place ("⟶ ID │ line")."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

from rich.highlighter import Highlighter
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, Log

from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.logstore import LINES_PER_NODE
from ddptui.report.json_report import quotes_line


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


def marked_lines(
    node: str,
    lines: Sequence[str],
    ids: Sequence[str],
    findings: Sequence[Finding],
    marks: dict[int, str] | None = None,
) -> list[str]:
    """The log with the lines a finding cites marked "⟶ ID │ line": by line id where
    the finding cites ids (the exact line), else by the text its evidence quotes.
    `marks` adds known marks (index -> finding id), e.g. a replayed excerpt's."""
    marks = dict(marks or {})
    position = {lid: i for i, lid in enumerate(ids)}
    by_text: list[tuple[str, str]] = []
    for f in findings:
        cited = [position[lid] for lid in f.lines if lid in position]
        for i in cited:
            marks.setdefault(i, f.id)
        if not cited and not f.lines:
            prefix = f"{node}: "
            by_text += [(f.id, ev.strip().removeprefix(prefix)) for ev in f.evidence]
    out = []
    for i, line in enumerate(lines):
        hit = marks.get(i) or next((fid for fid, q in by_text if quotes_line(q, line)), None)
        out.append(f"⟶ {hit} │ {line}" if hit else line)
    return out


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
        """lines: the log, already marked (marked_lines); findings: (finding id,
        evidence line) for the findings that name this node, listed first."""
        super().__init__()
        self.node = node
        self.lines = lines
        self.findings = findings

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(
                f" {self.node}: streamed output ({len(self.lines)} lines) and the "
                "evidence behind its findings · esc closes"
            )
            # With findings, open at the top where their evidence is listed (the stream's
            # end is often a launcher's traceback); without, at the latest lines.
            yield Log(
                max_lines=LINES_PER_NODE + 200,
                highlight=True,
                auto_scroll=not self.findings,
                id="log",
            )

    def on_mount(self) -> None:
        log = self.query_one(Log)
        log.highlighter = NcclHighlighter()
        if self.findings:
            log.write_lines([f"• {fid}: {ev}" for fid, ev in self.findings])
            log.write_line("")
        log.write_lines(self.lines or ["(no streamed output from this node yet)"])
