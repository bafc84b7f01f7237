"""What the fabric step's pair tests mean: slow nodes, slow links, pairs that hung, and
a fabric slower than its hardware. Pure core (no transport, no UI).

The reference is the median over nodes of each node's median pair: a slow node (or up
to half of the nodes) cannot drag it down, even at 3 nodes where 2 of the 3 pairs touch
the slow one, while a fabric that is slow everywhere shows as a low
reference against the hardware's figure.  A pair is slow below SLOW_FRACTION of the
reference (healthy pairs on a busy machine scatter by 3-5x; a degraded link is 10x or
more below its peers: 50 Mbit/s among 10 Gb/s is 100x); then
- a node with at least two partners, every pair slow or failed, whose partners are
  fast with someone else, is a slow node (its pairs are explained by it);
- a slow pair whose two ends are each fast with someone else is a slow link;
- a node whose every pair failed (timed out, broke) is a node that went away.
Each suspect is re-tested once (fabric_plan.confirm_round) and named only when the
re-test agrees.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

SLOW_FRACTION = 0.1  # a pair below a tenth of the reference is slow


@dataclass(frozen=True)
class Sample:
    """One pair test: a and b are node indexes; gbs is bytes/s/1e9 each way (the lower
    of the two ends' figures), None when the test failed."""

    round: int
    a: int
    b: int
    gbs: float | None
    status: str = "ok"  # ok | timeout | error | lost
    confirm: bool = False

    @property
    def pair(self) -> tuple[int, int]:
        return (self.a, self.b) if self.a < self.b else (self.b, self.a)


@dataclass
class Judgement:
    reference: float | None
    slow_pairs: set[tuple[int, int]] = field(default_factory=set)
    slow_nodes: list[int] = field(default_factory=list)
    slow_links: list[tuple[int, int]] = field(default_factory=list)
    gone_nodes: list[int] = field(default_factory=list)
    failed_pairs: list[tuple[int, int]] = field(default_factory=list)
    node_gbs: dict[int, float] = field(default_factory=dict)  # each node's median pair

    def fast_nodes(self, n: int) -> list[int]:
        bad = set(self.slow_nodes) | set(self.gone_nodes)
        for a, b in self.slow_links:
            bad.update((a, b))
        return [i for i in range(n) if i not in bad and i in self.node_gbs]


def reference(samples: Iterable[Sample]) -> float | None:
    """Median over nodes of each node's median pair figure."""
    per: dict[int, list[float]] = {}
    for s in samples:
        if s.gbs is not None:
            per.setdefault(s.a, []).append(s.gbs)
            per.setdefault(s.b, []).append(s.gbs)
    return statistics.median(statistics.median(v) for v in per.values()) if per else None


def _is_slow(s: Sample, ref: float | None) -> bool:
    return s.gbs is None or (ref is not None and s.gbs < SLOW_FRACTION * ref)


def judge(n: int, samples: Sequence[Sample], gone: Iterable[int] = ()) -> Judgement:
    """Slow nodes, slow links and gone nodes from the pair tests (the latest test of a
    pair counts). `gone`: nodes whose worker ended or stopped answering (the step saw
    it): their failed pairs are theirs, not their partners' or a link's."""
    latest: dict[tuple[int, int], Sample] = {}
    for s in samples:
        latest[s.pair] = s
    tests = list(latest.values())
    ref = reference(tests)
    out = Judgement(reference=ref)
    out.gone_nodes = sorted(set(gone))
    by_node: dict[int, list[Sample]] = {}
    for s in tests:
        by_node.setdefault(s.a, []).append(s)
        by_node.setdefault(s.b, []).append(s)
    for x, mine in by_node.items():
        figures = [s.gbs for s in mine if s.gbs is not None]
        if figures:
            out.node_gbs[x] = statistics.median(figures)
    out.slow_pairs = {s.pair for s in tests if _is_slow(s, ref)}
    out.failed_pairs = sorted(s.pair for s in tests if s.gbs is None)

    def fast_elsewhere(y: int, not_with: int) -> bool:
        return any(not _is_slow(s, ref) for s in by_node.get(y, []) if not_with not in (s.a, s.b))

    for x in range(n):
        if x in out.gone_nodes:
            continue
        mine = by_node.get(x, [])
        others = {s.b if s.a == x else s.a for s in mine}
        if len(others) < 2 or not all(_is_slow(s, ref) for s in mine):
            continue
        if not any(fast_elsewhere(y, x) for y in others):
            continue  # nobody around it is fast either: not this node's fault alone
        out.slow_nodes.append(x)
    out.gone_nodes = sorted(out.gone_nodes)
    blamed = set(out.slow_nodes) | set(out.gone_nodes)
    for pair in sorted(out.slow_pairs):
        a, b = pair
        if a in blamed or b in blamed:
            continue  # the node explains it
        if fast_elsewhere(a, b) and fast_elsewhere(b, a):
            out.slow_links.append(pair)
    return out


def confirmed(
    first: Judgement, retest: Sequence[Sample], ref: float | None
) -> tuple[list[int], list[tuple[int, int]], list[str]]:
    """The suspects of `first` that the re-test round agrees with, and a line for each
    one it cleared or could not re-test."""
    by_pair = {s.pair: s for s in retest}
    nodes: list[int] = []
    links: list[tuple[int, int]] = []
    notes: list[str] = []
    for x in first.slow_nodes:
        mine = [s for s in retest if x in (s.a, s.b)]
        if not mine:
            notes.append(f"node {x}: not re-tested (no free fast partner)")
        elif all(_is_slow(s, ref) for s in mine):
            nodes.append(x)
        else:
            notes.append(f"node {x}: fast on re-test")
    for pair in first.slow_links:
        s = by_pair.get(pair)
        if s is None:
            notes.append(f"pair {pair}: not re-tested")
        elif _is_slow(s, ref):
            links.append(pair)
        else:
            notes.append(f"pair {pair}: fast on re-test")
    return nodes, links, notes
