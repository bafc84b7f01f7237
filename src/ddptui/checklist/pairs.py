"""Who tests whom, and when: the paced all-pairs schedule of the `port` step. Pure.

Node i tests node (i + k) mod n for each offset k.  A round holds `width` offsets, so
in a round every node starts at most `width` connections and receives at most `width`:
no node resolves all its peers at once (an all-to-all burst is what overflows neighbour
tables and ARP queues on large clusters).  When n * width would exceed the total bound,
the sources of an offset group are split into `waves`, each its own round.

Offsets come in pairs k, n - k: the reverse direction of a pair runs in the next round,
while both neighbour entries are still fresh.  Above FULL_MESH_MAX nodes a sample of
offsets is tested (see sample_offsets and the README's design note for 1024 nodes).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

PER_NODE: Final = 4  # connections a node starts (and receives) per round
TOTAL: Final = 1024  # connections the whole cluster starts per round
FULL_MESH_MAX: Final = 256  # above this many nodes, offsets are sampled
SAMPLE_RANDOM: Final = 32  # random offsets in a sample, besides the structured ones


def offset_order(n: int) -> list[int]:
    """1, n-1, 2, n-2, ...: every offset 1..n-1 once, each followed by its reverse."""
    out: list[int] = []
    for k in range(1, n // 2 + 1):
        out.append(k)
        if n - k != k:
            out.append(n - k)
    return out


def sample_offsets(n: int, seed: int, extra: int = SAMPLE_RANDOM) -> list[int]:
    """Offsets for a cluster too large for the full mesh, in offset_order's pairing.

    Structured: the ring neighbours 1..8 (nodes usually sit in rank order, so these are
    the same switch: NCCL's rings use them), powers of two (recursive doubling and
    NCCL's trees), n/2 (the farthest hop, across the bisection).  Plus `extra` random
    offsets, drawn anew per run (seed), so repeated runs cover more pairs.  Every node
    tests and is tested through every sampled offset, so a node-wide fault (its firewall,
    its link, its ARP) shows on all of its edges.
    """
    if n <= 1:
        return []
    base = set(range(1, min(8, n - 1) + 1))
    power = 1
    while power < n:
        base.add(power)
        power *= 2
    base.add(n // 2)
    rng = random.Random(seed)  # noqa: S311 - a spread of pairs, not a secret
    pool = [k for k in range(1, n // 2 + 1) if k not in base]
    base.update(rng.sample(pool, min(extra, len(pool))))
    chosen = {k for k in base if 0 < k < n} | {n - k for k in base if 0 < k < n}
    return [k for k in offset_order(n) if k in chosen]


@dataclass(frozen=True)
class Plan:
    """A paced schedule over n nodes; rounds are computed, never stored (n=1024: 1M pairs)."""

    n: int
    offsets: tuple[int, ...]
    width: int  # offsets per round: what one node starts, and receives, per round
    waves: int  # source groups per offset group (1 unless n * width > total)

    @property
    def groups(self) -> int:
        return -(-len(self.offsets) // self.width)

    @property
    def rounds(self) -> int:
        return self.groups * self.waves

    @property
    def wave_size(self) -> int:
        return -(-self.n // self.waves)

    @property
    def pairs(self) -> int:
        return self.n * len(self.offsets)

    def round_of(self, src: int, offset_index: int) -> int:
        return (offset_index // self.width) * self.waves + src // self.wave_size

    def node_targets(self, src: int) -> list[tuple[int, int]]:
        """(round, destination) for every test node `src` makes, in round order."""
        return [(self.round_of(src, j), (src + k) % self.n) for j, k in enumerate(self.offsets)]

    def iter_rounds(self) -> Iterator[list[tuple[int, int]]]:
        """Each round's (source, destination) pairs, round 0 first."""
        for g in range(self.groups):
            ks = self.offsets[g * self.width : (g + 1) * self.width]
            for wave in range(self.waves):
                sources = range(wave * self.wave_size, min(self.n, (wave + 1) * self.wave_size))
                yield [(i, (i + k) % self.n) for i in sources for k in ks]


def plan(
    n: int,
    *,
    per_node: int = PER_NODE,
    total: int = TOTAL,
    offsets: Sequence[int] | None = None,
    seed: int = 0,
) -> Plan:
    """The schedule for n nodes: at most `per_node` connections started and received per
    node per round, at most `total` per round.  Offsets default to the full mesh up to
    FULL_MESH_MAX nodes and to sample_offsets(n, seed) above."""
    if n < 1 or per_node < 1 or total < 1:
        raise ValueError("plan() needs n, per_node and total >= 1")
    if offsets is None:
        offsets = offset_order(n) if n <= FULL_MESH_MAX else sample_offsets(n, seed)
    if any(not 0 < k < n for k in offsets) or len(set(offsets)) != len(offsets):
        raise ValueError(f"offsets must be distinct and in 1..{n - 1}")
    width = max(1, min(per_node, total // n, len(offsets) or 1))
    waves = 1 if n * width <= total else -(-n // total)
    return Plan(n=n, offsets=tuple(offsets), width=width, waves=waves)
