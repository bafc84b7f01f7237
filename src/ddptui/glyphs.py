"""The one glyph table: how a status (pass, warn, fail, skip, error, and a step still
pending or running) and a finding's severity are drawn, in text (the TUI, `check`, `job`,
`diagnose`, HTML) and as Markdown's emoji. A severity is drawn as the status it makes:
error as fail, warning as warn. Ground floor: imports nothing."""

from __future__ import annotations

from typing import Final

# state: (text, emoji)
TABLE: Final[dict[str, tuple[str, str]]] = {
    "pass": ("✔", "✅"),
    "warn": ("!", "⚠️"),
    "fail": ("✘", "❌"),
    "skip": ("-", "\u2796"),
    "error": ("?", "❓"),
    "info": ("i", "\u2139\ufe0f"),
    "pending": ("·", "·"),
    "running": ("…", "…"),
}
STATUSES: Final = ("pass", "warn", "fail", "skip", "error")  # a step's or node's outcome
SEVERITY_STATE: Final[dict[str, str]] = {"error": "fail", "warning": "warn", "info": "info"}

GLYPH: Final[dict[str, str]] = {state: text for state, (text, _) in TABLE.items()}
EMOJI: Final[dict[str, str]] = {state: emoji for state, (_, emoji) in TABLE.items()}


def severity_glyph(severity: str, *, emoji: bool = False) -> str:
    """The glyph of a finding's severity ('' for an unknown one)."""
    state = SEVERITY_STATE.get(severity)
    if state is None:
        return ""
    return (EMOJI if emoji else GLYPH)[state]
