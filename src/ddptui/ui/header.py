"""The header: cluster, node count, elapsed time, and the run's honest state."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ddptui.glyphs import GLYPH
from ddptui.ui.render import STYLE


class HeaderBar(Static):
    DEFAULT_CSS = """
    HeaderBar { height: 1; background: $primary-background; color: $text; padding: 0 1; }
    """

    def update_state(
        self, name: str, nodes: int, elapsed: float, state: str, label: str,
        replay: str | None = None,
    ) -> None:
        """state: pass | warn | fail | error | running | waiting | connecting | ready;
        label: what to say ("RUNNING 2/7", "WAITING 1/7", "PASS (1 skipped)")."""
        style = state if state in GLYPH else ("running" if state in ("running", "connecting") else "pending")
        text = Text.assemble(
            ("ddptui ", "bold"),
            (f"{name}", "bold"),
            f" · {nodes} node(s) · ",
            f"{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d} · ",
            # "·" (pending) after the " · " separator would read "· · WAITING": no glyph.
            (f"{GLYPH[style]} {label}" if style != "pending" else label, STYLE[style]),
        )
        if replay is not None:
            text.append(f" · REPLAY of {replay or 'a saved session'} (read-only)", "bold reverse")
        self.update(text)
