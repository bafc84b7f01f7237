"""Cross-rank rules over a log's facts about collectives (moved out of factrules.py, whose
table names them): which ranks never reached the collective the others wait in
(watchdog timeouts grouped by sequence number, torch's PG status lines, DETAIL's
fingerprints) and ranks that called different collectives at one sequence number.
Core layer, stdlib only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ddptui.diagnosis.evidence import parse_evidence
from ddptui.diagnosis.factcontext import Context, Hit, busy_bar, ranks_said, span
from ddptui.diagnosis.factrules_logs7 import lone_gloo_or_unranked, lone_waiter, specific_failure

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules


def fingerprints(ctx: Context) -> Hit | None:
    """TORCH_DISTRIBUTED_DEBUG=DETAIL: the ranks that entered the last collective any rank
    entered, and the known ranks that never did."""
    entered = {p.rank: p for p in ctx.procs if p.rank is not None and p.collective is not None}
    if not entered:
        return None
    last = max(p.collective for p in entered.values() if p.collective is not None)
    waiting = sorted(r for r, p in entered.items() if p.collective == last)
    known = {p.rank for p in ctx.procs if p.rank is not None}
    worlds = {p.world_size for p in ctx.procs if p.world_size}
    if len(worlds) == 1:  # the launcher or NCCL stated the world: every rank of it
        known |= set(range(min(worlds.pop(), 4096)))
    absent = sorted(known - set(waiting))
    if not absent:
        return None
    op = f"{last[1]} (SequenceNumber {last[0]})"
    ev = [entered[r].evidence.get("collective", "") for r in waiting[:3]]
    said = f"ranks {span(waiting)} entered {op}; ranks {span(absent)} never did"
    return absent, ev, said, {"op": op, "absent": span(absent), "waiting": span(waiting)}


def not_in_collective(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """Ranks whose watchdogs time out in one collective, and the ranks that never report
    it: ranks the log knows otherwise, ranks below the highest waiting one when several
    wait (ranks count from 0: "ranks 1, 2 time out" leaves rank 0 elsewhere), or, after
    a line saying the run ended, the ranks that had finished."""
    if not ctx.collective:
        return fingerprints(ctx) or lone_gloo_or_unranked(ctx)
    known = {p.rank for p in ctx.procs if p.rank is not None} | set(ctx.collective)
    known |= ctx.named_ranks
    # one group per sequence number (a line without the operation joins the one naming
    # it at that number), else per operation
    groups: dict[str, list[int]] = {}
    names: dict[str, str] = {}
    for r, said in ctx.collective.items():
        name, _, seq = said.partition(" (SeqNum ")
        key = seq or said
        groups.setdefault(key, []).append(r)
        if name != UNNAMED_OP or key not in names:
            names[key] = said
    key, waiting = max(groups.items(), key=lambda kv: (len(kv[1]), names[kv[0]] != UNNAMED_OP))
    op, waiting = names[key], sorted(waiting)
    # (logs32: not at the process group's first collective, which also connects NCCL's
    # communicator: a rank below them stuck connecting looks the same, as lone_waiter says)
    if len(waiting) >= 2 and not specific_failure(ctx) and not op.endswith("(SeqNum 1)"):
        known |= set(range(min(max(waiting), 4096)))
    # logs14: ranks that state (torch's PG status) they never enqueued that work, or did
    seq = key.rstrip(")")
    behind = {r for r, (n, _) in ctx.enqueued.items() if seq.isdigit() and n < int(seq)}
    reached = {r for r, (n, _) in ctx.enqueued.items() if seq.isdigit() and n >= int(seq)}
    absent = sorted((known | behind) - set(waiting) - reached)
    ev = [ctx.watchdog_lines[r] for r in waiting[:3]] + [ctx.enqueued[r][1] for r in sorted(behind)[:2]]
    fill = {"op": op, "waiting": ranks_said(waiting)}
    if absent:
        said = (
            f"{ranks_said(waiting)} {'waits' if len(waiting) == 1 else 'wait'} in {op}; "
            f"{ranks_said(absent)} never {'reports' if len(absent) == 1 else 'report'} it"
        )
        if behind:
            last = min(ctx.enqueued[r][0] for r in behind)
            said += f" ({ranks_said(sorted(behind))} enqueued work up to #{last} only)"
        return absent, ev, said, {**fill, "absent": ranks_said(absent)}
    busy = None if specific_failure(ctx) else busy_bar(ctx)
    if busy is not None:
        who, ran, line = busy
        verb = "waits" if len(waiting) == 1 else "wait"
        said = f"{ranks_said(waiting)} {verb} in {op}; meanwhile {ran}"
        return [], [line, *ev], said, {**fill, "absent": who}
    if ctx.ended is None:
        return None if specific_failure(ctx) else lone_waiter(ctx, waiting, op, ev)
    ended = parse_evidence(ctx.ended)
    where, text = ended.place, ended.text
    others = f"the other ranks, which had left the loop (the log says {text[:120]!r}, {where})"
    verb = "waits" if len(waiting) == 1 else "wait"
    said = f"{ranks_said(waiting)} {verb} in {op} after the run ended ({text[:80]!r})"
    return [], [ctx.ended, *ev], said, {**fill, "absent": others}


UNNAMED_OP: Final = "a collective"  # logs/diagnose.py's word for a watchdog line without OpType


def op_mismatch(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """Watchdogs of different ranks timed out in one sequence number of different
    operations: the ranks called different collectives at the same step."""
    by_seq: dict[str, dict[str, list[int]]] = {}
    for r, said in ctx.collective.items():
        op, _, seq = said.partition(" (SeqNum ")
        if seq and op != UNNAMED_OP:  # "Timeout at NCCL work: N" names no operation
            by_seq.setdefault(seq.rstrip(")"), {}).setdefault(op, []).append(r)
    for seq, ops in sorted(by_seq.items()):
        if len(ops) > 1:
            firsts = sorted(min(rs) for rs in ops.values())
            said = f"at SeqNum {seq}: " + "; ".join(
                f"ranks {span(sorted(rs))} in {op}" for op, rs in sorted(ops.items())
            )
            ev = [ctx.watchdog_lines[r] for r in firsts[:3] if r in ctx.watchdog_lines]
            return firsts, ev, said, {"seq": seq}
    return None
