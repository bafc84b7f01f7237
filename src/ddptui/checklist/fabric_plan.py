"""Who tests whom in the `fabric` step, round by round. Pure.

Every round is a matching: each node is in at most one pair, and all pairs of a round
run at the same time, so a round costs one pair test whatever n is (O(rounds), not
O(pairs)).  The rounds follow the patterns real collectives use, each node meeting a
different partner every round:

- the ring neighbours (i, i+1), in two rounds (even i, then odd i): NCCL's rings;
- the hypercube partners i XOR 2^b for every bit b: recursive doubling and halving,
  which also covers n/2 (across the bisection) when n is a power of two;
- i + n/2 when it is not, and a few random matchings (seeded), for pairs no
  structure predicts (a bad cable between two far racks).

Up to ALL_PAIRS_MAX nodes the rounds are a round-robin tournament instead (the circle
method: n-1 rounds, every pair exactly once), so no slow link can hide; above it a slow
link is seen only when a round pairs its two ends (the random rounds change every run).
A pattern that proposes no new pair is skipped; nodes a pattern leaves idle (odd n, n not
a power of two) get a partner they have not met, so every round uses everyone.  At 1024
nodes: 2 ring + 9 hypercube (bit 0 is the even ring round) + 2 random = 13 rounds, about
log2(n) + 3, each node tested with 13 different partners.

A node whose every pair is slow is a slow node; a pair that is slow while both ends are
fast with others is a slow link (fabric_analysis.py).  `confirm_round` builds the extra
round that re-tests each suspect once before it is named.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Final

Pair = tuple[int, int]  # (a, b) with a < b
RANDOM_ROUNDS: Final = 2
ALL_PAIRS_MAX: Final = 24  # up to this many nodes every pair is tested (n-1 rounds)


def _pair(a: int, b: int) -> Pair:
    return (a, b) if a < b else (b, a)


def _ring(n: int, start: int) -> list[Pair]:
    return [_pair(i, (i + 1) % n) for i in range(start, n, 2) if (i + 1) % n != i]


def _xor(n: int, bit: int) -> list[Pair]:
    return [(i, i ^ bit) for i in range(n) if i < (i ^ bit) < n]


def _half(n: int) -> list[Pair]:
    h = n // 2
    return [(i, i + h) for i in range(h)] if h else []


def _random(n: int, rng: random.Random) -> list[Pair]:
    order = list(range(n))
    rng.shuffle(order)
    return [_pair(order[i], order[i + 1]) for i in range(0, n - 1, 2)]


def patterns(n: int, seed: int = 0, random_rounds: int = RANDOM_ROUNDS) -> list[list[Pair]]:
    """The proposed pairs of each pattern, in order (before dedup and fill)."""
    rng = random.Random(seed)  # noqa: S311 - a spread of pairs, not a secret
    out = [_ring(n, 0), _ring(n, 1)]
    bit = 2
    while bit < n:
        out.append(_xor(n, bit))
        bit *= 2
    if n & (n - 1):  # not a power of two: n/2 is not a hypercube partner
        out.append(_half(n))
    out += [_random(n, rng) for _ in range(random_rounds)]
    return out


def _fill(n: int, busy: set[int], used: set[Pair], rng: random.Random) -> list[Pair]:
    """Partners for the nodes a pattern left idle, among pairs not yet tested."""
    idle = [i for i in range(n) if i not in busy]
    rng.shuffle(idle)
    out: list[Pair] = []
    while len(idle) >= 2:
        a = idle.pop()
        b = next((x for x in idle if _pair(a, x) not in used), None)
        if b is None:
            continue
        idle.remove(b)
        out.append(_pair(a, b))
    return out


def round_robin(n: int) -> list[list[Pair]]:
    """Every pair exactly once in n-1 rounds (n rounds when n is odd: one node rests)."""
    m = n if n % 2 == 0 else n + 1  # odd n: a phantom node m-1 pairs with the one resting
    rounds: list[list[Pair]] = []
    for r in range(m - 1):
        pairs = [(r, m - 1)] + [((r + k) % (m - 1), (r - k) % (m - 1)) for k in range(1, m // 2)]
        rounds.append(sorted(_pair(a, b) for a, b in pairs if a < n and b < n))
    return rounds


def schedule(
    n: int, seed: int = 0, random_rounds: int = RANDOM_ROUNDS, all_pairs_max: int = ALL_PAIRS_MAX
) -> list[list[Pair]]:
    """The rounds for n nodes (node = its index in rank order): each a list of disjoint
    pairs, no pair twice across rounds."""
    if n < 2:
        return []
    if n <= all_pairs_max:
        return round_robin(n)
    rng = random.Random(seed ^ 0x5EED)  # noqa: S311 - filler choice, not a secret
    used: set[Pair] = set()
    rests = [0] * n
    rounds: list[list[Pair]] = []
    for proposed in patterns(n, seed, random_rounds):
        busy: set[int] = set()
        chosen: list[Pair] = []
        for a, b in proposed:
            if (a, b) in used or a in busy or b in busy:
                continue
            chosen.append((a, b))
            busy.update((a, b))
        if not chosen:
            continue
        chosen += _fill(n, busy, used | set(chosen), rng)
        _share_rest(n, chosen, used, rests)
        used.update(chosen)
        rounds.append(sorted(chosen))
    return rounds


def _share_rest(n: int, chosen: list[Pair], used: set[Pair], rests: list[int]) -> None:
    """A node a pattern never pairs (the odd one out of a hypercube) rests once, then
    takes the place of a node that has rested less: no node is tested far less."""
    busy = {x for p in chosen for x in p}
    for x in (i for i in range(n) if i not in busy):
        if rests[x] > 0:
            for j, (a, b) in enumerate(chosen):
                for keep, out in ((a, b), (b, a)):
                    if rests[out] < rests[x] and _pair(x, keep) not in used:
                        chosen[j] = _pair(x, keep)
                        busy = (busy - {out}) | {x}
                        break
                else:
                    continue
                break
    for i in range(n):
        if i not in busy:
            rests[i] += 1


def partners(rounds: Iterable[Sequence[Pair]]) -> dict[int, set[int]]:
    """Every node's partners over the rounds."""
    out: dict[int, set[int]] = {}
    for pairs in rounds:
        for a, b in pairs:
            out.setdefault(a, set()).add(b)
            out.setdefault(b, set()).add(a)
    return out


def confirm_round(
    n: int,
    slow_nodes: Sequence[int],
    slow_links: Sequence[Pair],
    fast: Sequence[int],
    met: dict[int, set[int]],
) -> list[Pair]:
    """One round that re-tests each suspect once: a suspect node with a fast node it has
    not met yet (else any fast node), a suspect link as the same pair again. Disjoint;
    a suspect that cannot be placed waits (it is reported unconfirmed)."""
    busy: set[int] = set()
    out: list[Pair] = []
    for x in slow_nodes:
        free = [f for f in fast if f not in busy and f != x]
        fresh = [f for f in free if f not in met.get(x, set())]
        pick = (fresh or free or [-1])[0]
        if x in busy or not 0 <= pick < n:
            continue
        out.append(_pair(x, pick))
        busy.update((x, pick))
    for a, b in slow_links:
        if a not in busy and b not in busy:
            out.append(_pair(a, b))
            busy.update((a, b))
    return sorted(out)
