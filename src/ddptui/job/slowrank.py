"""A rank that is slow rather than stuck: the job moves (its output grows), but in every
stack sample one rank is in its own code while the others wait in a collective for it.

A synchronous job (DDP, any collective per step) runs at the pace of its slowest rank,
so every rank prints at the same rate and the output alone cannot say who is slow; where
each rank spends its time can. A fast rank finishes its step and waits in the next
collective; the slow one is still computing (or sleeping, or reading data). Across the
look's samples (five over the window) that shows as a share of samples in a collective:
high for the fast ranks, (nearly) zero for the slow one. NVML utilisation, when present, is
quoted (a slow rank at 100% GPU while the others idle is a slower GPU; at 0%, the
time goes to the CPU side: data loading, Python). Pure core."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.kb import kb_finding
from ddptui.job.model import NodeView, RankView
from ddptui.job.stacks import rank_ranges, ranks_phrase

WAITING = ("collective", "sync")
WAIT_SHARE = 0.6  # a fast rank waits in a collective in at least this share of samples
BUSY_SHARE = 0.2  # the slow rank waits in at most this share (it reaches the collective late)
MIN_SAMPLES = 3


def _share(r: RankView) -> tuple[float, int]:
    good = r.good_stacks()
    if not good:
        return 0.0, 0
    return sum(1 for s in good if s.place.kind in WAITING) / len(good), len(good)


def inspector_busbw(views: Sequence[NodeView]) -> dict[int, tuple[float, int, str]]:
    """Per rank, from the NCCL Inspector plugin's output when the job writes it: the
    median busbw (GB/s) of its latest collectives, how many, and which collective."""
    out: dict[int, tuple[float, int, str]] = {}
    for v in views:
        for rec in v.inspector:
            rank, colls = rec.get("rank"), rec.get("colls") or []
            figures = [
                float(c["busbw_gbs"])
                for c in colls
                if isinstance(c, dict) and isinstance(c.get("busbw_gbs"), int | float)
            ]
            if isinstance(rank, int) and figures:
                names = sorted({str(c.get("coll")) for c in colls if isinstance(c, dict)})
                out[rank] = (statistics.median(figures), len(figures), "/".join(names))
    return out


def _gpu_text(r: RankView) -> str:
    return f"; GPU {r.gpu.get('sm_pct')}% SM" if r.gpu is not None else ""


def slow_rank(
    live: Sequence[RankView],
    moving: Sequence[int],
    window_s: float,
    inspector: Mapping[int, tuple[float, int, str]] | None = None,
) -> Finding | None:
    """The slow-rank finding, or None when the look does not show one. `inspector`:
    per-rank busbw from NCCL's Inspector plugin, quoted as evidence (in a synchronous
    collective the rank that arrives last waits least: its busbw reads highest)."""
    ranks = [r for r in live if r.rank is not None]
    if len(ranks) < 2 or not moving:
        return None
    shares = {r.rank: _share(r) for r in ranks if r.rank is not None}
    if any(n < MIN_SAMPLES for _, n in shares.values()):
        return None
    waiters = sorted(k for k, (f, _) in shares.items() if f >= WAIT_SHARE)
    busy = sorted(k for k, (f, _) in shares.items() if f <= BUSY_SHARE)
    if not waiters or not busy or len(busy) > len(waiters):
        return None
    by_rank: Mapping[int, RankView] = {r.rank: r for r in ranks if r.rank is not None}
    slow = by_rank[busy[0]]
    place = next(
        (s.place for s in reversed(slow.good_stacks()) if s.place.kind not in WAITING),
        slow.good_stacks()[-1].place,
    )
    frame = place.user or place.top
    node_of = {k: r.node for k, r in by_rank.items()}
    op = next(
        (s.place.op for k in waiters for s in by_rank[k].good_stacks() if s.place.kind in WAITING),
        None,
    )
    evidence = [
        f"rank {k} ({node_of[k]}): {shares[k][0]:.0%} of {shares[k][1]} samples waiting in a "
        f"collective; cpu {by_rank[k].cpu_pct}%; output "
        f"{'grew' if by_rank[k].output_grew else 'quiet'}"
        + _gpu_text(by_rank[k])
        for k in sorted(shares)
    ]
    evidence += [
        f"NCCL inspector, rank {k}: busbw {gbs:.2f} GB/s (median of {n} {coll})"
        for k, (gbs, n, coll) in sorted((inspector or {}).items())
    ][:16]
    return kb_finding(
        "JOB-SLOW-RANK",
        sorted({node_of[k] for k in busy}),
        f"slow: {ranks_phrase(busy, node_of)} computes in `{frame.func if frame else '?'}` "
        f"({place.where or '?'}) in every sample while {ranks_phrase(waiters, node_of)} "
        f"wait in `{op or 'a collective'}` for it; the job still moves",
        evidence,
        rank=busy[0],
        where=place.where,
        who=rank_ranges(busy),
        node=", ".join(sorted({node_of[k] for k in busy})),
        func=frame.func if frame else "?",
        at=place.where or "?",
        op=op or "a collective",
        waiters=rank_ranges(waiters),
        window=f"{window_s:.0f}",
    )
