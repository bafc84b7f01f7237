"""Slow node vs slow link vs noise, from pair figures shaped like the testbed's (gloo on a
busy 2-core machine: healthy pairs scatter 0.1-1.2 GB/s; 50 Mbit/s is 0.003 GB/s)."""

from __future__ import annotations

import random

from ddptui.checklist.fabric_analysis import Sample, confirmed, judge
from ddptui.checklist.fabric_plan import confirm_round, partners, schedule

SLOW = 0.003


def _measure(
    n: int,
    rounds: list[list[tuple[int, int]]],
    slow_node: int | None = None,
    slow_link: tuple[int, int] | None = None,
    seed: int = 0,
    first: int = 0,
    confirm: bool = False,
) -> list[Sample]:
    rng = random.Random(seed)  # noqa: S311 - test data, not a secret
    out = []
    for k, pairs in enumerate(rounds, start=first):
        for a, b in pairs:
            gbs = rng.uniform(0.1, 1.2)
            if slow_node in (a, b) or (a, b) == slow_link:
                gbs = SLOW * rng.uniform(0.9, 1.1)
            out.append(Sample(k, a, b, gbs, confirm=confirm))
    return out


def _run(n: int, **fault: object) -> tuple[list[int], list[tuple[int, int]], list[str]]:
    rounds = schedule(n, seed=3)
    samples = _measure(n, rounds, **fault)  # type: ignore[arg-type]
    first = judge(n, samples)
    retest = confirm_round(
        n, first.slow_nodes, first.slow_links, first.fast_nodes(n), partners(rounds)
    )
    again = _measure(n, [retest], first=len(rounds), confirm=True, seed=9, **fault)  # type: ignore[arg-type]
    return confirmed(first, again, first.reference)


def test_one_slow_node_is_named_alone() -> None:
    for n in (3, 8, 16, 64, 1024):
        nodes, links, _ = _run(n, slow_node=2)
        assert (nodes, links) == ([2], []), n


def test_one_slow_link_is_named_as_that_pair() -> None:
    for n in (4, 8, 16):
        nodes, links, _ = _run(n, slow_link=(1, 3))
        assert (nodes, links) == ([], [(1, 3)]), n


def test_healthy_fabric_names_nothing() -> None:
    for n in (2, 8, 64):
        nodes, links, notes = _run(n)
        assert (nodes, links, notes) == ([], [], []), n


def test_a_fluke_is_cleared_by_the_retest() -> None:
    rounds = schedule(8)
    samples = _measure(8, rounds, seed=1)
    a, b = rounds[2][0]
    samples = [Sample(s.round, s.a, s.b, 0.004) if (s.a, s.b) == (a, b) else s for s in samples]
    first = judge(8, samples)
    assert first.slow_links == [(a, b)]
    again = [Sample(99, a, b, 0.5, confirm=True)]
    assert confirmed(first, again, first.reference) == ([], [], [f"pair {(a, b)}: fast on re-test"])


def test_a_gone_node_explains_its_failed_pairs() -> None:
    rounds = schedule(8)
    samples = [
        Sample(s.round, s.a, s.b, None, "timeout") if 5 in (s.a, s.b) and s.round >= 3 else s
        for s in _measure(8, rounds)
    ]
    j = judge(8, samples, gone=[5])
    assert j.gone_nodes == [5] and j.slow_nodes == [] and j.slow_links == []
    # without knowing it went away, its failed pairs are not blamed on their partners
    j = judge(8, samples)
    assert all(5 in p for p in j.slow_pairs)
    assert all(5 in p for p in j.slow_links) or not j.slow_links


def test_everything_equally_slow_names_no_node() -> None:
    rounds = schedule(8)
    samples = [Sample(s.round, s.a, s.b, 0.003) for s in _measure(8, rounds)]
    j = judge(8, samples)
    assert j.slow_nodes == [] and j.slow_links == [] and j.reference == 0.003
