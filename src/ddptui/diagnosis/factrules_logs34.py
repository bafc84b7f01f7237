"""Readings added in round logs34 (issue 15, blind batch Y: PyTorch's flight-recorder
tutorials, NVIDIA GPU Operator troubleshooting, published lab logs).

fr_not_joined: the flight recorder's analyzer (`torchfrtrace`, torch's
tools/flight_recorder fr_trace) reads every rank's trace and prints, for the collective
where the ranks part ways, "Not all ranks joining collective 5 at entry 4" (or "..., sequence
number: 4") followed by the group's "collective: nccl:all_reduce" and "missing ranks: {1}".
That is the analyzer's own verdict that the ranks it names never entered the collective the
others wait in (a rank asleep or busy elsewhere, or a rank-dependent extra collective on the
others): LOGS-NOT-IN-COLLECTIVE, with the ranks and the operation the analyzer names.  The
header without its "missing ranks" line (a paste cut short) is not read: it names no rank.

Core layer, stdlib only."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from ddptui.diagnosis.factcontext import Context, Hit, ranks_said

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules

_SEQ: Final = re.compile(r"Not all ranks joining collective(?:,? sequence number:)? (?P<seq>\d+)")
_MISSING: Final = re.compile(r"missing ranks: \{(?P<ranks>\d+(?:, \d+)*)\}")
_OP: Final = re.compile(r"collective: (?P<op>\w+:\w+)")
MAX_RANKS: Final = 4096


def fr_not_joined(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """The flight-recorder analyzer's verdict: ranks that never joined a collective."""
    head, missing = ctx.hints.get("fr_not_joined"), ctx.hints.get("fr_missing")
    s = _SEQ.search(head) if head is not None else None
    m = _MISSING.search(missing) if missing is not None else None
    if head is None or missing is None or s is None or m is None:
        return None
    absent = sorted({int(r) for r in m["ranks"].split(", ")})[:MAX_RANKS]
    said_op = ctx.hints.get("fr_collective")
    o = _OP.search(said_op) if said_op is not None else None
    op = f"{o['op'] if o is not None else 'a collective'} (sequence number {s['seq']})"
    said = f"the flight recorder's analysis: {ranks_said(absent)} never joined {op}"
    fill = {"op": op, "absent": ranks_said(absent), "waiting": "The other ranks"}
    return absent, [head, missing], said, fill
