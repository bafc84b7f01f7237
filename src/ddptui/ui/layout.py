"""The checklist matrix's geometry, in plain arithmetic: how wide the step, status and
node columns are and how many node columns fit. Shared by the app (ui/matrix.py) and
the plain first frame drawn before Textual loads (launch.py), so both draw the same
columns in the same places. No Textual here."""

from __future__ import annotations

from ddptui.stepmeta import ORDER

STEP_CHARS = max(len(s) for s in ORDER)  # "allreduce"
STATUS_CHARS = 12  # "✘ fail 28.1s"
MIN_CELL = 6  # characters: a glyph and a few letters
MAX_CELL = 40
LEFT_SHARE = 0.6  # of the screen's width: the checklist; the rest: live metrics


def node_room(width: int) -> int:
    """Characters the node columns share on a screen `width` wide."""
    left = int(width * LEFT_SHARE) - 2
    return left - (STEP_CHARS + 2) - STATUS_CHARS - 2


def cell_width(count: int, room: int) -> int | None:
    """Characters per node column when every one of `count` nodes gets its own; None
    when they do not fit (the passing rest then collapse into one column)."""
    per = room // max(1, count) - 2
    if per >= MIN_CELL or count <= 1:
        return max(MIN_CELL, min(MAX_CELL, per))
    return None


def columns_that_fit(room: int) -> int:
    """How many node columns fit beside the collapsed one, at MIN_CELL each."""
    return max(1, room // (MIN_CELL + 2) - 1)


def matrix_heads(nodes: list[str], width: int) -> list[tuple[str, int]]:
    """(label, characters) of the node columns before any result is in, on a screen
    `width` wide: every node, or those that fit and a "+N more" column."""
    room = node_room(width)
    per = cell_width(len(nodes), room)
    if per is not None:
        return [(n, per) for n in nodes]
    fit = columns_that_fit(room)
    more = f"+{len(nodes) - fit} more"
    return [(n, MIN_CELL) for n in nodes[:fit]] + [(more, max(MIN_CELL, len(more) + 2))]
