"""The port step's paced all-pairs schedule, without a testbed (pure function)."""

from __future__ import annotations

import time

import pytest

from ddptui.checklist.pairs import FULL_MESH_MAX, Plan, offset_order, plan, sample_offsets


def check_rounds(p: Plan, per_node: int, total: int) -> bytearray:
    """Walk every round, assert its bounds, return how often each ordered pair ran."""
    n = p.n
    seen = bytearray(n * n)
    rounds = 0
    for pairs in p.iter_rounds():
        rounds += 1
        out, inn = bytearray(n), bytearray(n)
        assert len(pairs) <= total
        for src, dst in pairs:
            assert src != dst
            seen[src * n + dst] += 1
            out[src] += 1
            inn[dst] += 1
        assert max(out) <= per_node and max(inn) <= per_node
    assert rounds == p.rounds
    return seen


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 64, 65, 200])
def test_full_mesh_covers_every_ordered_pair_once(n: int) -> None:
    p = plan(n, per_node=4, total=512)
    seen = check_rounds(p, 4, 512)
    for src in range(n):
        for dst in range(n):
            assert seen[src * n + dst] == (0 if src == dst else 1), (src, dst)


def test_64_nodes_four_offsets_a_round() -> None:
    p = plan(64)  # the defaults the port step uses
    assert (p.width, p.waves, p.rounds, p.pairs) == (4, 1, 16, 64 * 63)


def test_total_bound_splits_sources_into_waves() -> None:
    """1024 nodes with at most 300 connections cluster-wide per round: one offset per
    round, sources in 4 waves of 256."""
    p = plan(1024, per_node=8, total=300, offsets=[1, 1023, 2])
    assert (p.width, p.waves, p.wave_size, p.rounds) == (1, 4, 256, 12)
    seen = check_rounds(p, 1, 300)
    assert sum(seen) == 1024 * 3


def test_full_mesh_of_1024_nodes() -> None:
    """The full mesh at 1024 nodes: every one of the 1,047,552 ordered pairs exactly once,
    never more than per_node started or received by a node in a round."""
    n = 1024
    t0 = time.monotonic()
    p = plan(n, per_node=4, total=4096, offsets=offset_order(n))
    assert (p.width, p.waves, p.rounds) == (4, 1, 256)
    seen = check_rounds(p, 4, 4096)
    assert sum(seen) == n * (n - 1)
    assert all(seen[i * n + i] == 0 for i in range(n))
    assert max(seen) == 1
    assert time.monotonic() - t0 < 30


def test_1024_nodes_default_is_a_sample() -> None:
    n = 1024
    assert n > FULL_MESH_MAX
    p = plan(n, seed=7)
    ks = set(p.offsets)
    assert {1, 2, 8, 16, 512, 1023, 1016} <= ks  # ring, powers of two, bisection, reverses
    assert all(n - k in ks for k in ks)  # both directions of every sampled pair
    assert 40 <= len(ks) <= 110
    assert p.width == 1 and p.waves == 1 and p.rounds == len(ks)  # ~5 s at 50 ms a round
    check_rounds(p, 1, 1024)
    assert set(plan(n, seed=8).offsets) != ks  # another run samples other pairs


def test_node_targets_agree_with_rounds() -> None:
    p = plan(10, per_node=3, total=20)
    by_round: dict[int, set[tuple[int, int]]] = {}
    for src in range(10):
        for r, dst in p.node_targets(src):
            by_round.setdefault(r, set()).add((src, dst))
    assert [by_round[r] for r in range(p.rounds)] == [set(x) for x in p.iter_rounds()]


def test_reverse_direction_follows() -> None:
    assert offset_order(6) == [1, 5, 2, 4, 3]
    assert offset_order(2) == [1]
    assert offset_order(1) == []
    assert sample_offsets(1, 0) == []


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="offsets"):
        plan(4, offsets=[0])
    with pytest.raises(ValueError, match="offsets"):
        plan(4, offsets=[1, 1])
    with pytest.raises(ValueError, match=">= 1"):
        plan(0)
