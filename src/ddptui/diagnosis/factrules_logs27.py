"""Rules over a log's facts added in round logs27 (issue 15, blind batch S), read from the
printing programs' own lines (factrules.yaml hints).

ras_missing: NCCL's RAS client (`ncclras`, NCCL >= 2.24) prints, in its "Errors" section,
"Missing communicator data from N job process(es)" / "... from N rank(s)" with the
process ("Process P on node H managing GPU g") and the rank ("The missing rank: r") it
waited for: a process of the job stopped answering (dead, stopped, hung).  Only the Errors
section's words count: RAS's "MISMATCH" warning (ranks at different collective counts
while the job runs) is a healthy query-timing artefact and is not read here.  The same
fact the job view reads from a live RAS answer (job/ras.py), so the same id,
JOB-RAS-PROBLEM.

Core layer, stdlib only; the rules file and the other predicates are factrules.py's."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from ddptui.diagnosis.factcontext import Context, Hit

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules

_NODE: Final = re.compile(r"\bProcess (?P<pid>\d+) on node (?P<node>\S+) managing GPU (?P<gpu>\d+)")
_RANK: Final = re.compile(r"\bThe missing ranks?: (?P<ranks>[\d, -]+)")


def _text(line: str | None) -> str:
    if line is None:
        return ""
    return line.split(": ", 1)[1].strip() if ": " in line else line.strip()


def ras_missing(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """NCCL's RAS reports communicator data missing from a job process or rank."""
    first = ctx.hints.get("ras_missing")
    if first is None:
        return None
    who, rank = ctx.hints.get("ras_missing_who"), ctx.hints.get("ras_missing_rank")
    what = _text(first)
    ranks: list[int] = []
    if who is not None and (m := _NODE.search(who)):
        what += f": process {m['pid']} on {m['node']}, GPU {m['gpu']}"
    if rank is not None and (r := _RANK.search(rank)):
        ranks = [int(x) for x in re.findall(r"\d+", r["ranks"])][:8]
        what += f" (rank {', '.join(map(str, ranks))})"
    evidence = [line for line in (first, who, rank) if line is not None]
    said = f"NCCL RAS: {what}: that process stopped answering"
    return ranks, evidence, said, {"node": "the node it was queried on", "what": what}
