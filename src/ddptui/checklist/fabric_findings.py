"""From the fabric step's judgement to findings (one node or one pair each) and the
step's `data` (CONTRACT: pairs, nodes, expected_gbs). Core layer."""

from __future__ import annotations

import statistics
from typing import Any

from ddptui.checklist import fabric_expect
from ddptui.checklist.fabric_analysis import Judgement, Sample
from ddptui.checklist.fabric_run import FabricRun
from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.kb import kb_finding

CLOCK_SKEW_S = 5.0  # wall clocks further apart than this (plus ssh latency) are a finding


def _g(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _expected(run: FabricRun, backend: str) -> tuple[dict[int, fabric_expect.Expect], str | None]:
    out: dict[int, fabric_expect.Expect] = {}
    nets = [r.get("net") for r in run.results.values() if r.get("net")]
    net = str(nets[0]) if nets else None
    for i, hw in run.hw.items():
        e = fabric_expect.network(hw, backend, net)
        if e is not None:
            out[i] = e
    return out, net


def findings_and_data(
    run: FabricRun,
    backend: str,
    final: Judgement,
    slow_nodes: list[int],
    slow_links: list[tuple[int, int]],
    notes: list[str],
    *,
    done: int,
    planned: int,
    budget: float,
) -> tuple[list[Finding], dict[str, Any]]:
    names = run.names
    ref = final.reference
    expect, net = _expected(run, backend)
    expected = statistics.median(e.gbs for e in expect.values()) if expect else None
    exp_text = "n/a"
    if expected is not None:
        first = next(iter(expect.values()))
        exp_text = f"{expected:.3f} GB/s ({first.link})"
    out: list[Finding] = []
    by_node: dict[int, list[Sample]] = {}
    for s in run.samples:
        by_node.setdefault(s.a, []).append(s)
        by_node.setdefault(s.b, []).append(s)

    for x in sorted(run.gone):
        out.append(
            kb_finding(
                "FABRIC-NODE-GONE",
                [names[x]],
                f"{names[x]}: {run.gone[x]}",
                [f"{names[x]}: {run.errors[x]}"] if x in run.errors else [],
                node=names[x],
                why=run.gone[x],
            )
        )
    for x in slow_nodes:
        mine = by_node.get(x, [])
        others = sorted({names[s.b if s.a == x else s.a] for s in mine})
        retests = [names[s.b if s.a == x else s.a] for s in mine if s.confirm]
        measured = (
            statistics.median(s.gbs for s in mine if s.gbs is not None)
            if any(s.gbs is not None for s in mine)
            else None
        )
        hw = run.hw.get(x, {})
        out.append(
            kb_finding(
                "FABRIC-SLOW-NODE",
                [names[x]],
                f"{names[x]} is slow with every partner: {_g(measured)} GB/s vs peers "
                f"{_g(ref)} GB/s (expected {exp_text})",
                [
                    f"round {s.round}{' (re-test)' if s.confirm else ''}: {names[s.a]} <-> "
                    f"{names[s.b]}: {_g(s.gbs)} GB/s {s.status if s.status != 'ok' else ''}".rstrip()
                    for s in mine
                ],
                node=names[x],
                partners=", ".join(others),
                confirmed_with=", ".join(retests) or "another node",
                measured=_g(measured),
                peers=_g(ref),
                expected=exp_text,
                iface=hw.get("iface") or "<its NIC>",
            )
        )
    # A "slow" link whose every test failed is a pair that hangs (FABRIC-PAIR-HUNG below).
    hung = [p for p in slow_links if all(s.gbs is None for s in run.samples if s.pair == p)]
    slow_links = [p for p in slow_links if p not in hung]
    for a, b in slow_links:
        pair = [s for s in run.samples if s.pair == (a, b)]
        figures = [s.gbs for s in pair if s.gbs is not None]
        out.append(
            kb_finding(
                "FABRIC-SLOW-LINK",
                [names[a], names[b]],
                f"the link {names[a]} <-> {names[b]} is slow: {_g(min(figures) if figures else None)}"
                f" GB/s while both are fast with others ({names[a]} "
                f"{_g(final.node_gbs.get(a))}, {names[b]} {_g(final.node_gbs.get(b))} GB/s; "
                f"expected {exp_text})",
                [
                    f"round {s.round}{' (re-test)' if s.confirm else ''}: {_g(s.gbs)} GB/s"
                    for s in pair
                ],
                a=names[a],
                b=names[b],
                measured=_g(min(figures) if figures else None),
                a_gbs=_g(final.node_gbs.get(a)),
                b_gbs=_g(final.node_gbs.get(b)),
                peers=_g(ref),
                expected=exp_text,
            )
        )
    blamed = set(slow_nodes) | set(run.gone)
    for a, b in final.failed_pairs:
        if a in blamed or b in blamed or (a, b) in slow_links:
            continue
        out.append(
            kb_finding(
                "FABRIC-PAIR-HUNG",
                [names[a], names[b]],
                f"the pair test {names[a]} <-> {names[b]} did not finish",
                [run.pair_message(a, b)],
                a=names[a],
                b=names[b],
                timeout=f"{run.op_timeout_s:.0f}",
                message=run.pair_message(a, b),
            )
        )
    out += _hardware(run, backend, ref, expect, net, names, blamed)
    out += _clock(run, names)
    if done < planned:
        out.append(
            kb_finding(
                "FABRIC-CUT",
                names,
                f"{done} of {planned} rounds ran before the deadline",
                done=done,
                planned=planned,
                timeout=f"{budget:.0f}",
            )
        )
    data: dict[str, Any] = {
        "pairs": [
            {
                "a": names[s.a],
                "b": names[s.b],
                "busbw_gbs": s.gbs,
                "round": s.round,
                "status": s.status,
                "confirm": s.confirm,
            }
            for s in run.samples
        ],
        "nodes": {names[i]: round(v, 6) for i, v in sorted(final.node_gbs.items())},
        "expected_gbs": None if expected is None else round(expected, 6),
        "reference_gbs": None if ref is None else round(ref, 6),
        "backend": backend,
        "transport": net or ("socket" if backend == "gloo" else None),
        "rounds": done,
        "rounds_planned": planned,
        "unconfirmed": notes,
        # worker start to group joined (torch import + rendezvous), slowest node; rounds
        "startup_s": max((float(r.get("seconds") or 0) for r in run.ready.values()), default=None),
        "round_s": run.round_s,
        "intra": {names[i]: v for i, v in run.intra.items()},
        "hardware": {
            names[i]: {k: v for k, v in hw.items() if k in ("iface", "speed_mbps", "ib", "gpus")}
            for i, hw in run.hw.items()
        },
    }
    return out, data


def _hardware(
    run: FabricRun,
    backend: str,
    ref: float | None,
    expect: dict[int, fabric_expect.Expect],
    net: str | None,
    names: list[str],
    blamed: set[int],
) -> list[Finding]:
    out: list[Finding] = []
    figures = sorted(s.gbs for s in run.samples if s.gbs is not None)
    # "Everything is slow" only when even the faster pairs are: the 90th percentile, so a
    # busy moment (CPU contention shared by every pair) does not read as slow hardware.
    top = figures[int(0.9 * (len(figures) - 1))] if figures else None
    if ref is not None and top is not None and expect:
        floor = statistics.median(e.floor_gbs for e in expect.values())
        if top < floor:
            e = next(iter(expect.values()))
            want = statistics.median(x.gbs for x in expect.values())
            out.append(
                kb_finding(
                    "FABRIC-BELOW-HARDWARE",
                    [n for i, n in enumerate(names) if i not in blamed],
                    f"every pair is slow: {ref:.3f} GB/s median ({top:.3f} at the 90th "
                    f"percentile), {want:.3f} GB/s expected from {e.link}",
                    measured=f"{ref:.3f}",
                    expected=f"{want:.3f}",
                    link=e.link,
                    source=e.source,
                )
            )
    for i, hw in sorted(run.hw.items()):
        if fabric_expect.tcp_where_ib(hw, backend, net):
            ports = ", ".join(
                f"{p.get('device')}:{p.get('port')} {p.get('rate_text')}"
                for p in hw.get("ib") or ()
            )
            out.append(
                kb_finding(
                    "FABRIC-TCP-NOT-IB",
                    [names[i]],
                    f"{names[i]}: NCCL used TCP sockets; IB ports are active",
                    node=names[i],
                    ports=ports,
                )
            )
    for i, rec in sorted(run.intra.items()):
        gbs = rec.get("busbw_gbs")
        count = rec.get("gpus") if isinstance(rec.get("gpus"), int) else None
        sku = fabric_expect.intra((run.hw.get(i, {}).get("gpus") or [])[:count])
        if isinstance(gbs, int | float) and sku is not None and gbs < sku.floor_gbs:
            out.append(
                kb_finding(
                    "FABRIC-INTRA-SLOW",
                    [names[i]],
                    f"{names[i]}: intra-node allreduce {gbs:.1f} GB/s busbw, "
                    f"{sku.gbs:.0f} expected",
                    node=names[i],
                    measured=f"{gbs:.1f}",
                    expected=f"{sku.gbs:.0f}",
                    link=sku.link,
                    source=sku.source,
                )
            )
    return out


def _clock(run: FabricRun, names: list[str]) -> list[Finding]:
    if len(run.clock) < 3:
        return []
    med = statistics.median(run.clock.values())
    worst = max(run.clock, key=lambda i: abs(run.clock[i] - med))
    skew = run.clock[worst] - med
    if abs(skew) < CLOCK_SKEW_S:
        return []
    return [
        kb_finding(
            "FABRIC-CLOCK-SKEW",
            [names[worst]],
            f"{names[worst]}'s clock is {skew:+.1f} s off the others",
            node=names[worst],
            skew=f"{skew:+.1f}",
            clock=f"{names[worst]}'s wall clock is {skew:+.1f} s off the median of the nodes",
        )
    ]
