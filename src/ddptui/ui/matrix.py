"""Which node columns the checklist shows, and what a collapsed column says. No Textual
here: the rules are testable on their own.

With a few nodes every node has its column. With many (64-1000), the columns that
fit go to the nodes that need a look: failing nodes first, then warnings, each in
config order; the passing rest collapse into one "+N" column that counts statuses per
step. A filter (substring of the node name) narrows the nodes shown.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ddptui.diagnosis.model import STATUS_RANK, StepResult
from ddptui.glyphs import GLYPH
from ddptui.stepmeta import ORDER
from ddptui.ui.layout import MIN_CELL, cell_width, columns_that_fit

GROUP = "+rest"  # the key of the collapsed column
EXCLUDED_MARK = "⊘"  # a node's column head when it belongs out of the next job


def excluded(results: Mapping[str, StepResult]) -> frozenset[str]:
    """Nodes that findings marked `exclude: true` in the knowledge base name (a slow node,
    the two ends of a slow link or of a hung pair): they belong in the report's `exclude`
    list whatever else the run found."""
    from ddptui.diagnosis.kb import KbError, kb_entry

    out: set[str] = set()
    for result in results.values():
        for f in result.findings:
            try:
                if kb_entry(f.id).exclude:
                    out.update(f.nodes)
            except KbError:
                continue
    return frozenset(out)


def head(name: str, marked: frozenset[str]) -> str:
    """A node column's label: its name, marked when it belongs out of the next job."""
    return f"{EXCLUDED_MARK} {name}" if name in marked else name


@dataclass(frozen=True)
class Columns:
    """The node columns to draw: `nodes` one each, then `rest` collapsed (maybe none)."""

    nodes: tuple[str, ...]
    rest: tuple[str, ...]
    width: int  # characters per node column
    filtered_out: int = 0

    @property
    def keys(self) -> tuple[str, ...]:
        return (*self.nodes, GROUP) if self.rest else self.nodes


def badness(name: str, results: Mapping[str, StepResult]) -> tuple[int, int]:
    """(-worst status, first step where it happened): lower sorts first."""
    worst, where = 0, len(ORDER)
    for i, step in enumerate(ORDER):
        r = results.get(step)
        nr = r.nodes.get(name) if r is not None else None
        if nr is None:
            continue
        rank = STATUS_RANK.get(nr.status, 0)
        if rank > worst:
            worst, where = rank, i
    return -worst, where


def node_columns(
    names: Sequence[str],
    results: Mapping[str, StepResult],
    room: int,
    node_filter: str = "",
) -> Columns:
    """The columns for `room` characters of node cells (borders included)."""
    wanted = [n for n in names if node_filter.lower() in n.lower()] if node_filter else list(names)
    hidden = len(names) - len(wanted)
    width = cell_width(len(wanted), room)
    if width is not None:
        return Columns(tuple(wanted), (), width, hidden)
    fit = columns_that_fit(room)  # one column is kept for the rest
    position = {n: i for i, n in enumerate(names)}
    ordered = sorted(wanted, key=lambda n: (*badness(n, results), position[n]))
    shown = ordered[:fit]
    rest = [n for n in wanted if n not in set(shown)]
    shown.sort(key=lambda n: (*badness(n, results), position[n]))
    return Columns(tuple(shown), tuple(rest), MIN_CELL, hidden)


def group_cell(result: StepResult | None, rest: Sequence[str]) -> tuple[str, str]:
    """(status for the style, text) of the collapsed column for one step: counts."""
    if result is None:
        return "pending", f"{len(rest)} more"
    counts = Counter(
        result.nodes[n].status if n in result.nodes else "pending" for n in rest
    )
    worst = max(counts, key=lambda s: STATUS_RANK.get(s, -1))
    order = ("fail", "error", "warn", "pass", "skip", "pending")
    text = " ".join(f"{GLYPH[s]}{counts[s]}" for s in order if counts.get(s))
    return worst, text
