"""The node filter: a substring of node names; only matching nodes get columns."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label


class FilterScreen(ModalScreen[str | None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]
    DEFAULT_CSS = """
    FilterScreen { align: center middle; }
    FilterScreen > Vertical { width: 60; height: auto; border: thick $accent;
                              background: $surface; padding: 1 2; }
    """

    def __init__(self, current: str = "") -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Show nodes whose name contains (empty: all nodes)")
            yield Input(value=self.current, placeholder="e.g. rack3 or node1", id="filter")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
