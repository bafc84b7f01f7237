"""Rules over facts added in round logs11 (issue 15): readings that keep a failing log from
being called clean when no line of it is an error.  Core layer, stdlib only; the rules
file and the other predicates are factrules.py's."""

from __future__ import annotations

from ddptui.diagnosis.evidence import parse_evidence
from ddptui.diagnosis.factcontext import Context, Hit
from ddptui.diagnosis.factrules_logs25 import fact_words


def bench_repeated(rules: object, rule: object, ctx: Context) -> Hit | None:
    """nccl-tests printed its summary twice in one log with no header between: under MPI
    only rank 0 prints it, so each process ran a test of its own (a binary built without
    MPI=1 started by mpirun, or one launch per host), and nothing crossed the nodes.  What
    the lines cannot tell apart from two runs pasted without their headers: a warning."""
    if len(ctx.bench_repeated) < 2:
        return None
    first, second = ctx.bench_repeated[:2]
    head = parse_evidence(first)
    place = head.place
    said = (
        f"nccl-tests printed its summary more than once with no header between ({place} and "
        f"{parse_evidence(second).place}): each process ran a test of its own"
    )
    fill = {
        **fact_words("nccl-tests printed its summary once per process"),  # logs25
        "first_lines": (
            "none; nccl-tests printed its result once per process "
            f"({first!r}; {second!r}): under MPI only rank 0 prints it, so each process ran "
            "alone and nothing crossed the nodes (a binary built without MPI=1 started by "
            "mpirun: rebuild with `make clean && make MPI=1`), or two runs were pasted "
            "without their headers"
        ),
        "first": f"{place} ({head.text[:120]!r})",
    }
    return [], [first, second], said, fill
