"""Rules over a log's facts added in round gpu9 (real captures on one lent GPU,
tests/fixtures/gpu-h200/fail9/), read from the printing programs' own lines
(factrules.yaml hints).

left_early: a rank that finished its loop while another still waited in a collective.
NCCL's init.cc prints "comm %p rank %d nranks %d cudaDev %d busId %lx - Destroy COMPLETE"
(NCCL_DEBUG=INFO) when a process destroys its communicator the normal way
(destroy_process_group; an abort says "Abort COMPLETE"), and torch elastic's agent logs
"Error waiting on exit barrier" once ITS workers all exited 0 and the other agents never
reached the barrier (torch/distributed/elastic/agent/server/api.py, _exit_barrier).  When
such a rank is done while torch's ProcessGroupNCCL states of another rank that it had
enqueued more work than it completed ("last enqueued work: 6, last completed work: 5",
or a watchdog timeout), the ranks ran different numbers of collectives: uneven data per
rank (or a rank-dependent loop), the done rank's closed sockets or the watchdog being
what the waiting rank reports.  Core layer, stdlib only."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from ddptui.diagnosis.factcontext import Context, Hit

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules

_DESTROYED: Final = re.compile(
    r"\bcomm 0x[0-9a-f]+ rank (?P<rank>\d+) nranks (?P<n>\d+)\b.*- Destroy COMPLETE"
)
_WHERE: Final = re.compile(r"^(?P<src>.*?):\d+: ")
_RANK_PREFIX: Final = re.compile(r"\[rank(?P<rank>\d+)\]:")
# torch's ProcessGroupNCCL: "last enqueued work: 6, last completed work: 5" (or "Last
# enqueued NCCL work: 16, last completed NCCL work: 16": an idle rank, nothing in flight)
_WORK: Final = re.compile(
    r"[Ll]ast enqueued (?:NCCL )?work: (?P<enq>\d+), last completed (?:NCCL )?work: (?P<done>-?\d+)"
)


def _source(line: str | None) -> str | None:
    """The source of a "source:line: text" evidence line."""
    w = _WHERE.match(line) if line is not None else None
    return w["src"] if w is not None else None


def _done(ctx: Context) -> tuple[dict[int, str], tuple[str, str] | None]:
    """rank -> the line saying it finished normally (its communicator destroyed, or its
    agent at the exit barrier after its workers exited 0), and (source, line) of an exit
    barrier whose source states no rank (no NCCL_DEBUG, no "[rankN]:" prefix)."""
    done: dict[int, str] = {}
    line = ctx.hints.get("comm_destroyed")
    world = max((p.world_size for p in ctx.procs if p.world_size is not None), default=None)
    m = _DESTROYED.search(line) if line is not None else None
    if line is not None and m is not None and int(m["n"]) == (world or int(m["n"])):
        done[int(m["rank"])] = line  # the world's communicator, not a subgroup's
    exited = ctx.hints.get("exit_no_destroy")  # gpu11: a normal exit without destroy
    who = _RANK_PREFIX.search(exited) if exited is not None else None
    if exited is not None and who is not None:
        done.setdefault(int(who["rank"]), exited)  # (left_early drops it if that rank raised)
    barrier = ctx.hints.get("exit_barrier_error")
    src = _source(barrier)
    if barrier is None or src is None:
        return done, None
    ranks = [p.rank for p in ctx.procs if p.source == src and p.rank is not None]
    for r in ranks:
        done.setdefault(r, barrier)
    return done, None if ranks else (src, barrier)


def in_flight(ctx: Context) -> dict[int, str]:
    """rank -> torch's line stating it enqueued more work than it completed (or that states
    no counts): a rank waiting in a collective."""
    out: dict[int, str] = {}
    for r, (_, line) in ctx.enqueued.items():
        w = _WORK.search(line)
        if w is None or int(w["enq"]) > int(w["done"]):
            out[r] = line
    return out


def left_early(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """Some ranks finished normally while another waited in a collective (see above)."""
    done, node = _done(ctx)
    waiting = in_flight(ctx)
    for r, line in ctx.watchdog_lines.items():
        waiting.setdefault(r, line)
    for r in list(done):
        if r in waiting or r in ctx.raised:  # a rank that waited itself, or raised its own
            del done[r]  # exception (gpu11: a collective after destroy_process_group), did
            # not leave early the normal way
    if node is not None and any(_source(line) in (node[0], None) for line in waiting.values()):
        node = None  # a waiting rank of that node's own file (or of no file): not proven
    if not waiting or not (done or node):
        return None
    left, stuck = sorted(done), sorted(waiting)
    who = (
        f"rank{'s' if len(left) > 1 else ''} {', '.join(map(str, left))} finished "
        "(communicator destroyed, exit barrier reached, or the process exited)"
        if left
        else f"the ranks of {node[0] if node else '?'} finished (their agent waited at the exit barrier)"
    )
    said = (
        f"{who} while rank{'s' if len(stuck) > 1 else ''} {', '.join(map(str, stuck))} still "
        "waited in a collective: the ranks ran different numbers of collectives (uneven "
        "batches per rank)"
    )
    evidence = [done[r] for r in left[:2]] + ([node[1]] if node and not left else [])
    evidence += [waiting[r] for r in stuck[:2]]
    return left, evidence, said, {"dataset": "dataset"}


# torch elastic's agent's own lines (its logger names its module, its traceback its
# classes): about the agent, not a worker
_AGENT: Final = re.compile(r"\btorch[./]distributed[./]elastic[./]")


def sole_worker(local_global: dict[tuple[str, int], int], source: str, text: str) -> int | None:
    """The global rank of the one worker torch elastic's failure summary names in a
    source ("rank      : 1 (local_rank: 0)"), where it names exactly one: a line of that
    source no prefix or pid ties to a rank (a worker's traceback printed before
    init_process_group, with no "[rankN]:" yet) is that failed worker's, since its agent
    reports one failure only.  None for the agent's own lines, and where the summary names
    none, several, or one local rank as two global ranks (several agents in one file)."""
    if _AGENT.search(text):
        return None
    said = [g for (src, _), g in local_global.items() if src == source]
    return said[0] if len(said) == 1 and said[0] >= 0 else None
