"""Rules over a log's facts added in round gpu11 (real captures on one lent GPU,
tests/fixtures/gpu-h200/fail11/), read from NCCL's own init lines.

comm_not_joined: NCCL (NCCL_DEBUG=INFO, 2.18+) prints "ncclCommInitRankConfig comm 0x..
rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 commId 0xe4199fdf77d97df1 - Init START" when a
process starts building a communicator, and "... - Init COMPLETE" when every member has
joined (init.cc).  A rank whose last communicator never completed, whose commId no other
rank ever mentions although the logs hold every rank of the world, while another rank
waits in a collective of its own (its watchdog timed out, or torch states work in flight):
the communicator was created on some ranks only.  dist.new_group (and a DeviceMesh, a
subgroup, a send/recv pair) builds its NCCL communicator on the group's first collective,
on each member; a member that never calls it leaves the others in ncclCommInitRank until
the timeout.  Core layer, stdlib only."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from ddptui.diagnosis.factcontext import Context, Hit, ranks_said
from ddptui.diagnosis.factrules_gpu9 import in_flight

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules

_WORK: Final = re.compile(r"SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)")


def _waiting(ctx: Context) -> dict[int, str]:
    """rank -> the line saying it waits in a collective: its watchdog's timeout (which
    names the collective) first, else torch's work in flight."""
    out = dict(ctx.watchdog_lines)
    for r, line in in_flight(ctx).items():
        out.setdefault(r, line)
    return out


def comm_not_joined(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """A communicator one rank started that the other ranks, alive and waiting, never
    started (see above)."""
    world = max((p.world_size for p in ctx.procs if p.world_size is not None), default=None)
    ranks = {p.rank for p in ctx.procs if p.rank is not None}
    if world is None or world < 2 or ranks != set(range(world)):
        return None  # only where the logs hold every rank of the world
    waiting = _waiting(ctx)
    for p in sorted((p for p in ctx.procs if p.rank is not None), key=lambda p: p.rank or 0):
        for comm, (n, said) in p.comm_pending.items():
            others = {q.rank for q in ctx.procs if q is not p and comm in q.comms}
            if len(others) + 1 >= n:
                continue  # the others started it too: not this rule's
            absent = sorted(r for r in ranks - others if r != p.rank)
            stuck = [r for r in absent if r in waiting and r not in ctx.raised]
            if not stuck or p.rank in waiting:
                continue
            m = _WORK.search(waiting[stuck[0]])
            where = f" in {m['op']} (SeqNum {m['seq']})" if m else " in a collective"
            creator = f"rank {p.rank}"
            summary = (
                f"{creator} was building an NCCL communicator (commId {comm}, {n} ranks) that "
                f"{ranks_said(absent)} never started; {ranks_said(stuck)} waited{where} meanwhile"
            )
            fill = {"creator": creator, "absent": ranks_said(absent), "comm": comm, "n": str(n)}
            return [p.rank or 0, *stuck], [said, waiting[stuck[0]]], summary, fill
    return None
