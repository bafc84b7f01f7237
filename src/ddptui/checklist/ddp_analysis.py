"""What the ddp step's ranks reported, judged across ranks: parameters, gradients,
buffers, SyncBatchNorm, sampler shards (the projection is in ddp_projection.py).
Core layer: pure functions over plain data."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.kb import kb_finding
from ddptui.diagnosis.model import odd_nodes

# --------------------------------------------------------------------------- ranks


@dataclass
class RankReport:
    """One rank's ddp records (from a node: every field is checked before use)."""

    rank: int
    node: str
    model: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def text(self, rec: str, key: str) -> str | None:
        value = (self.model if rec == "model" else self.result).get(key)
        return value if isinstance(value, str) else None

    @property
    def hook(self) -> dict[str, Any]:
        hook = self.result.get("hook")
        return hook if isinstance(hook, dict) else {}

    def ints(self, key: str) -> list[int]:
        raw = self.hook.get(key)
        return [x for x in raw if isinstance(x, int)] if isinstance(raw, list) else []

    def timing(self, key: str) -> float | None:
        raw = self.result.get("timing")
        value = raw.get(key) if isinstance(raw, dict) else None
        return float(value) if isinstance(value, (int, float)) and value >= 0 else None

    def epochs(self) -> dict[str, list[int]]:
        raw = self.result.get("indices")
        if not isinstance(raw, dict):
            return {}
        return {
            str(e): [i for i in v if isinstance(i, int)]
            for e, v in raw.items()
            if isinstance(v, list)
        }


def short(sha: str | None) -> str:
    return (sha or "?")[:8]


def _who(reports: Mapping[int, RankReport], ranks: list[int]) -> str:
    names = [f"rank {r} ({reports[r].node})" for r in ranks]
    return " and ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else names[0]


def _apart(reports: Mapping[int, RankReport], odd: list[int], what: str) -> str:
    """Who differs: the odd ranks, or every rank when no majority agrees."""
    if len(odd) == len(reports):
        return f"{what} differ between {_who(reports, odd)} (no majority)"
    return f"{_who(reports, odd)}: {what} differ from the other ranks'"


def _diverged(reports: Mapping[int, RankReport], rec: str, key: str) -> list[int]:
    """Ranks whose checksum differs from the majority's (every rank on a tie): the one
    "odd node out" rule, applied to ranks."""
    return sorted(
        int(r) for r in odd_nodes({str(r): rep.text(rec, key) for r, rep in reports.items()})
    )


def _nodes(reports: Mapping[int, RankReport], ranks: list[int]) -> list[str]:
    return sorted({reports[r].node for r in ranks})


def _rank_of(odd: list[int]) -> int | None:
    return odd[0] if len(odd) == 1 else None


def cross_rank_findings(reports: Mapping[int, RankReport]) -> list[Finding]:
    """Parameters, gradients, buffers, SyncBatchNorm and shards compared across the ranks
    that finished (every report here has its result)."""
    out: list[Finding] = []
    grads_odd = _diverged(reports, "result", "grads_sha")
    params_odd = _diverged(reports, "result", "params_sha")
    if params_odd:
        wrapped_odd = _diverged(reports, "model", "wrapped_sha")
        if wrapped_odd:
            why = "they differed already when DDP wrapped the model: its initial broadcast did not run"
        elif grads_odd:
            why = "their gradients differed: the gradient allreduce did not make them equal"
        else:
            why = "their gradients were equal: the parameters changed outside DDP's allreduce"
        out.append(
            kb_finding(
                "DDP-PARAMS-DIVERGED",
                _nodes(reports, params_odd),
                _apart(reports, params_odd, "parameters")
                + f" after {reports[params_odd[0]].result.get('steps')} DDP steps",
                [
                    f"rank {r} on {rep.node}: params sha {short(rep.text('result', 'params_sha'))}"
                    f", at wrap {short(rep.text('model', 'wrapped_sha'))}"
                    f", before wrap {short(rep.text('model', 'init_sha'))}"
                    f", grads sha {short(rep.text('result', 'grads_sha'))}"
                    for r, rep in sorted(reports.items())
                ],
                rank=_rank_of(params_odd),
                why=why,
                ranks=_who(reports, params_odd),
            )
        )
    out += _gradient_findings(reports, grads_odd)
    out += _buffer_findings(reports)
    out += _sampler_findings(reports)
    return out


def _gradient_findings(reports: Mapping[int, RankReport], grads_odd: list[int]) -> list[Finding]:
    out: list[Finding] = []
    silent = [r for r, rep in reports.items() if not any(rep.ints("buckets_per_step"))]
    if silent:
        out.append(
            kb_finding(
                "DDP-GRADS-NOT-REDUCED",
                _nodes(reports, silent),
                f"{_who(reports, silent)}: DDP's communication hook never ran (no bucket "
                "all-reduced)",
                rank=_rank_of(silent),
            )
        )
    if grads_odd:
        out.append(
            kb_finding(
                "DDP-GRADS-NOT-REDUCED",
                _nodes(reports, grads_odd),
                _apart(reports, grads_odd, "gradients after backward"),
                [
                    f"rank {r} on {rep.node}: grads sha {short(rep.text('result', 'grads_sha'))}"
                    for r, rep in sorted(reports.items())
                ],
                rank=_rank_of(grads_odd),
            )
        )
    # The reduced bucket must be the mean of the ranks' local buckets.
    sums = {r: rep.hook.get("sums") for r, rep in reports.items()}
    if all(isinstance(s, list) and s for s in sums.values()) and len(sums) > 1:
        wrong = []
        for i in range(min(len(s) for s in sums.values() if isinstance(s, list))):
            rows = [s[i] for s in sums.values() if isinstance(s, list)]
            if not all(isinstance(x, list) and len(x) >= 2 for x in rows):
                continue
            local = [float(x[0]) for x in rows if isinstance(x[0], (int, float))]
            reduced = {float(x[1]) for x in rows if isinstance(x[1], (int, float))}
            mean = sum(local) / len(local) if local else math.nan
            scale = max(1.0, sum(abs(v) for v in local) / max(1, len(local)))
            if len(reduced) != 1 or abs(next(iter(reduced)) - mean) > 1e-3 * scale:
                wrong.append(
                    f"bucket {i}: mean of local sums {mean:.6g}, reduced {sorted(reduced)}"
                )
        if wrong:
            out.append(
                kb_finding(
                    "DDP-GRADS-NOT-REDUCED",
                    sorted({rep.node for rep in reports.values()}),
                    "the all-reduced gradient buckets are not the average of the ranks' gradients",
                    wrong[:6],
                )
            )
    return out


def _buffer_findings(reports: Mapping[int, RankReport]) -> list[Finding]:
    out: list[Finding] = []
    unbroadcast = [
        r
        for r, rep in reports.items()
        if r != 0 and any(v != 0 for v in rep.result.get("stamps_seen") or [0])
    ]
    odd = _diverged(reports, "result", "buffers_sha")
    if unbroadcast or odd:
        named = sorted(set(unbroadcast) | set(odd))
        out.append(
            kb_finding(
                "DDP-BUFFERS-DIFFER",
                _nodes(reports, named),
                _apart(reports, named, "module buffers") + " (DDP syncs them from rank 0)",
                [
                    f"rank {r} on {rep.node}: buffers sha {short(rep.text('result', 'buffers_sha'))}"
                    f", stamp seen in forward {rep.result.get('stamps_seen')}"
                    for r, rep in sorted(reports.items())
                ],
                rank=_rank_of(named),
            )
        )
    bn_odd = _diverged(reports, "result", "post_forward_buffers_sha")
    if bn_odd and not odd:
        out.append(
            kb_finding(
                "DDP-SYNCBN-NOT-SYNCED",
                _nodes(reports, bn_odd),
                _apart(reports, bn_odd, "BatchNorm statistics after the forward"),
                rank=_rank_of(bn_odd),
            )
        )
    return out


def shard_problems(
    per_rank: Mapping[int, list[int]], total: int
) -> tuple[list[tuple[int, int, int]], list[int]]:
    """(overlaps as (rank a, rank b, shared count), missing indices) of one epoch."""
    overlaps = []
    ranks = sorted(per_rank)
    sets = {r: set(per_rank[r]) for r in ranks}
    for i, a in enumerate(ranks):
        dup = len(per_rank[a]) - len(sets[a])
        if dup:
            overlaps.append((a, a, dup))
        for b in ranks[i + 1 :]:
            shared = len(sets[a] & sets[b])
            if shared:
                overlaps.append((a, b, shared))
    seen = set().union(*sets.values()) if sets else set()
    return overlaps, sorted(set(range(total)) - seen)


def _sampler_findings(reports: Mapping[int, RankReport]) -> list[Finding]:
    out: list[Finding] = []
    totals = {rep.result.get("samples_total") for rep in reports.values()}
    total = next(iter(totals)) if len(totals) == 1 else None
    if not isinstance(total, int):
        return out
    epochs = sorted({e for rep in reports.values() for e in rep.epochs()})
    for epoch in epochs:
        per_rank = {r: rep.epochs().get(epoch, []) for r, rep in reports.items()}
        overlaps, missing = shard_problems(per_rank, total)
        if overlaps:
            ranks = sorted({r for a, b, _ in overlaps for r in (a, b)})
            out.append(
                kb_finding(
                    "DDP-SAMPLER-OVERLAP",
                    _nodes(reports, ranks),
                    f"epoch {epoch}: ranks saw the same samples: "
                    + "; ".join(
                        f"rank {a} and {b}: {n} shared" if a != b else f"rank {a}: {n} twice"
                        for a, b, n in overlaps[:6]
                    ),
                )
            )
        if missing:
            out.append(
                kb_finding(
                    "DDP-SAMPLER-INCOMPLETE",
                    sorted({rep.node for rep in reports.values()}),
                    f"epoch {epoch}: {len(missing)} of {total} samples reached no rank",
                    [f"never seen: {missing[:20]}"],
                )
            )
    return out
