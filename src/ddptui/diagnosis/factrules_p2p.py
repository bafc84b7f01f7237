"""A rule over a log's facts: the first collective of a process group never completed
(P2P-HANG).  Core layer, stdlib only; the rules file and the other predicates are
factrules.py's.

torch numbers the collectives of a process group from 1 (ProcessGroupNCCL's SeqNum), and
the first one is also where NCCL connects the ranks' transports (P2P/IPC, SHM, NET).  A
watchdog timeout at SeqNum 1 means no data ever moved.  The public threads that establish
a cause for one (NVIDIA driver 545 misreporting P2P, PCIe ACS routing P2P through the
IOMMU, a P2P path that hangs until NCCL_P2P_DISABLE=1) name the GPU-to-GPU path, not a
rank late to its first collective: a late rank shows itself (a progress bar as long as the
timeout, ranks that enqueued less, a rank that never reports, a specific error), and
lone_waiter (factrules_logs7.py) already leaves SeqNum 1 alone for that reason.  Read only
where the log shows one host (several hosts: the network path, other rules) and a
timeout long enough for real work.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from ddptui.diagnosis.factcontext import Context, Hit, busy_bar, ranks_said
from ddptui.diagnosis.factrules_logs7 import specific_failure

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules

# torch's default is 10 or 30 minutes; below 5 the short timeout is the finding
# (LOGS-TIMEOUT-SHORT), not the transport
MIN_TIMEOUT_MS: Final = 300_000
# "WorkNCCL(SeqNum=1, OpType=ALLGATHER, ..." in a watchdog line no rank is read from
_RAW_FIRST: Final = re.compile(r"\bSeqNum=1\b(?:, OpType=(?P<op>\w+))?")
_RAN: Final = re.compile(r"\bran for (?P<ms>\d+) milliseconds\b")


def first_collective_hang(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """Every watchdog timeout in the log is at SeqNum 1, on one host, with nothing that
    shows a rank elsewhere."""
    short = ctx.timeout_ms is not None and ctx.timeout_ms < MIN_TIMEOUT_MS
    elsewhere = ctx.ended is not None or ctx.enqueued or busy_bar(ctx) is not None
    if len(ctx.hosts) >= 2 or short or elsewhere or specific_failure(ctx):
        return None
    if ctx.collective:
        if any(not said.endswith(" (SeqNum 1)") for said in ctx.collective.values()):
            return None
        stated = {p.rank for p in ctx.procs if p.rank is not None} | set(ctx.named_ranks)
        if stated - set(ctx.collective):  # a rank the log knows never reports it
            return None
        ranks = sorted(ctx.collective)
        op = ctx.collective[ranks[0]]
        lines = [ctx.watchdog_lines[r] for r in ranks[:3] if r in ctx.watchdog_lines]
        who = ranks_said(ranks)
    else:
        line = ctx.watchdog_unranked
        m = _RAW_FIRST.search(line or "")
        if line is None or m is None:
            return None
        ranks, lines, who = [], [line], "a rank"
        op = f"{m.group('op') or 'a collective'} (SeqNum 1)"
    ran = next((m for m in map(_RAN.search, lines) if m), None)
    took = f" after {int(ran.group('ms')) / 60000:.0f} min" if ran else ""
    said = (
        f"{who} timed out in the process group's first collective, {op}{took}: no data "
        "ever moved between the GPUs, and no line shows a rank busy elsewhere"
    )
    return ranks, lines, said, {"op": op, "ran": took.removeprefix(" after ") or "its timeout"}
