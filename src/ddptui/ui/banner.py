"""The banner: the first failure, its cause in one line, and the fix."""

from __future__ import annotations

from textual.widgets import Static


class Banner(Static):
    """The first failure, its cause in one line, and the fix: where the eye lands."""

    DEFAULT_CSS = """
    Banner { height: auto; min-height: 2; padding: 0 1; border: tall $panel; }
    Banner.fail { border: tall $error; color: $text; background: $error 20%; text-style: bold; }
    Banner.pass { border: tall $success; background: $success 15%; }
    Banner.running { border: tall $accent; }
    Banner.warn { border: tall $warning; background: $warning 15%; }
    Banner.error { border: tall $error; background: $error 10%; }
    """

    def show(self, text: str, kind: str) -> None:
        self.set_classes(kind)
        self.update(text)
