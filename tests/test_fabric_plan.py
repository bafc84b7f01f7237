"""The fabric step's pair schedule (pure): every round a matching, no pair twice,
every pair at small scale, about log2(n) + 3 rounds up to 1024 nodes."""

from __future__ import annotations

import math

import pytest

from ddptui.checklist.fabric_plan import (
    ALL_PAIRS_MAX,
    confirm_round,
    partners,
    round_robin,
    schedule,
)


def _check_rounds(n: int, rounds: list[list[tuple[int, int]]]) -> set[tuple[int, int]]:
    seen: set[tuple[int, int]] = set()
    for pairs in rounds:
        ends = [x for p in pairs for x in p]
        assert len(ends) == len(set(ends)), f"n={n}: a node twice in one round"
        assert all(0 <= x < n for x in ends)
        for a, b in pairs:
            assert a < b
            assert (a, b) not in seen, f"n={n}: pair {(a, b)} tested twice"
            seen.add((a, b))
    return seen


@pytest.mark.parametrize("n", [2, 3, 4, 5, 7, 8, 16, ALL_PAIRS_MAX])
def test_small_clusters_test_every_pair_in_n_minus_1_rounds(n: int) -> None:
    rounds = schedule(n)
    assert _check_rounds(n, rounds) == {(a, b) for a in range(n) for b in range(a + 1, n)}
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)


@pytest.mark.parametrize("n", [ALL_PAIRS_MAX + 1, 33, 64, 100, 257, 512, 1000, 1024])
def test_large_clusters_need_about_log2_n_rounds(n: int) -> None:
    rounds = schedule(n, seed=7)
    _check_rounds(n, rounds)
    assert len(rounds) <= math.ceil(math.log2(n)) + 4, len(rounds)
    met = partners(rounds)
    assert len(met) == n
    # every node meets several different partners: a slow node is told from a slow link
    assert min(len(v) for v in met.values()) >= 5
    # nearly everyone works in every round (at most one node per round rests)
    assert all(len(pairs) >= n // 2 - 2 for pairs in rounds)


def test_1024_nodes_uses_ring_hypercube_and_random_rounds() -> None:
    rounds = schedule(1024, seed=1)
    assert len(rounds) == 13  # 2 ring + 9 hypercube + 2 random
    firsts = [set(r) for r in rounds]
    assert (0, 1) in firsts[0] and (1, 2) in firsts[1]  # ring neighbours, both parities
    assert (0, 512) in set().union(*firsts)  # across the bisection
    assert schedule(1024, seed=1) == rounds  # pure: same seed, same plan
    assert schedule(1024, seed=2) != rounds  # the random rounds change per run


def test_round_robin_odd() -> None:
    rounds = round_robin(5)
    assert len(rounds) == 5 and all(len(r) == 2 for r in rounds)


def test_confirm_round_retests_each_suspect_once_disjoint() -> None:
    met = partners(schedule(8))
    out = confirm_round(8, slow_nodes=[3], slow_links=[(1, 6)], fast=[0, 2, 4, 5, 7], met=met)
    ends = [x for p in out for x in p]
    assert len(ends) == len(set(ends))
    assert (1, 6) in out
    assert any(3 in p for p in out)
    # a suspect link whose end is taken by a suspect node waits (reported unconfirmed)
    out = confirm_round(8, slow_nodes=[3], slow_links=[(3, 6)], fast=[0], met=met)
    assert out == [(0, 3)]
