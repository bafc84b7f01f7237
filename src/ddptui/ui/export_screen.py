"""The export dialog: a format and a path."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select


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
        # A typed extension says what the user wants: report.html is HTML whatever
        # the format picker still shows (JSON in a .html file helps nobody).
        by_ext = {ext: name for name, ext in self.EXT.items()}
        fmt = by_ext.get(path.rsplit(".", 1)[-1].lower(), fmt) if "." in path else fmt
        self.dismiss((fmt, path))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self._submit()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._submit()

    def action_cancel(self) -> None:
        self.dismiss(None)
