"""Rules over a log's facts added in round gpu10 (real captures on one lent GPU,
tests/fixtures/gpu-h200/fail10/), read from torch's ProcessGroupNCCL's own lines.

sizes_differ: torch's watchdog states the work it timed out in, "WorkNCCL(SeqNum=3,
OpType=_ALLGATHER_BASE, NumelIn=257, NumelOut=514, Timeout(ms)=30000)" (WorkNCCL's
operator<<), and when it fails "failure detected by watchdog at work sequence id: 3 PG
status: last enqueued work: 4, last completed work: 2".  The collectives whose input has
the same number of elements on every rank (all_reduce, broadcast, reduce, all_gather,
reduce_scatter: not all_to_all, whose splits may differ, nor send/recv) waited in by two
ranks at the same sequence number, or where one rank had already completed the work the
other still waits in, with different NumelIn: the ranks called the same collective with
different sizes (FSDP's shards of models that differ across ranks, a last batch of another
shape).  NCCL checks no sizes across ranks: over NET/Socket the bytes of the smaller side
complete it on one rank and the other waits for the rest until the timeout.

kept_running: ProcessGroupNCCL's watchdog prints "Some NCCL operations have failed or
timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might
run on corrupted/incomplete data." for every failure, and only when its error handling tears
down (TORCH_NCCL_ASYNC_ERROR_HANDLING 1 or 3, the default) "To avoid data inconsistency, we
are taking the entire process down." (then "Process group watchdog thread terminated with
exception").  The first without the others, in a log whose launcher was then told to stop
(torchrun's "Received 15 death signal"), is a job that stayed hung after its timeout:
TORCH_NCCL_ASYNC_ERROR_HANDLING=0 (or 2, CleanUpOnly), so nothing took it down.
Core layer, stdlib only."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from ddptui.diagnosis.factcontext import Context, Hit

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules

_WORK: Final = re.compile(r"SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+), NumelIn=(?P<n>\d+)")
_DONE: Final = re.compile(r"last completed (?:NCCL )?work: (?P<done>-?\d+)")
# torch's OpType names (c10d/Types.hpp opTypeToString) whose input has one size on every rank
SAME_SIZE: Final = frozenset({
    "ALLREDUCE", "ALLREDUCE_COALESCED", "BROADCAST", "REDUCE", "ALLGATHER", "_ALLGATHER_BASE",
    "ALLGATHER_COALESCED", "REDUCE_SCATTER", "_REDUCE_SCATTER_BASE",
})
_RANK: Final = re.compile(r"\[Rank (?P<rank>\d+)\]")


def _work(ctx: Context) -> dict[int, tuple[int, str, int, int | None]]:
    """rank -> (SeqNum, OpType, NumelIn, last completed work or None) of its watchdog line."""
    out: dict[int, tuple[int, str, int, int | None]] = {}
    for r, line in ctx.watchdog_lines.items():
        m = _WORK.search(line)
        if m is None:
            continue
        done = _DONE.search(ctx.enqueued[r][1]) if r in ctx.enqueued else None
        out[r] = (int(m["seq"]), m["op"], int(m["n"]), int(done["done"]) if done else None)
    return out


def sizes_differ(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """Two ranks timed out in the same collective with different input sizes (see above)."""
    work = _work(ctx)
    ranks = sorted(work)
    for i, a in enumerate(ranks):
        for b in ranks[i + 1:]:
            (sa, op, na, da), (sb, opb, nb, db) = work[a], work[b]
            if op != opb or op not in SAME_SIZE or na == nb:
                continue
            same = sa == sb or (da is not None and da >= sb) or (db is not None and db >= sa)
            if not same:
                continue
            ahead = ""
            if sa != sb:
                first, later = (a, b) if sa > sb else (b, a)
                ahead = (
                    f"; rank {first} had completed #{min(sa, sb)}, which rank {later} still "
                    "waits in"
                )
            said = (
                f"ranks {a} and {b} timed out in {op} with different sizes: rank {a} "
                f"{na} elements (#{sa}), rank {b} {nb} (#{sb}){ahead}"
            )
            return [a, b], [ctx.watchdog_lines[a], ctx.watchdog_lines[b]], said, {"op": op}
    return None


def kept_running(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """A watchdog failure that took nothing down, then the launcher told to stop (above)."""
    failed = ctx.hints.get("ops_failed_alone")
    if failed is None or ctx.hints.get("teardown") or ctx.hints.get("watchdog_died"):
        return None
    stop = ctx.hints.get("agent_stopped")
    if stop is None:
        return None
    m = _RANK.search(failed)
    ranks = [int(m["rank"])] if m is not None else []
    who = f"rank {ranks[0]}'s" if ranks else "the"
    said = (
        f"{who} watchdog reported the failed collective but did not take the process down; "
        "the job stayed until its launcher was told to stop"
    )
    return ranks, [failed, stop], said, {}
