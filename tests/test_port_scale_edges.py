"""Failed port-step edges: neighbour (ARP) trouble told apart from a firewall, and the
fix each gets (pure: records shaped as the port probe writes them)."""

from __future__ import annotations

from typing import Any

from ddptui.checklist.port_edges import (
    Edge,
    NeighFacts,
    capacity_finding,
    neighbour_findings,
    pair_findings,
    retried_finding,
    suggested_thresholds,
)


def edge(
    src: str, dst: str, result: str = "timeout", neigh: str | None = "REACHABLE", first: str = ""
) -> Edge:
    rec: dict[str, Any] = {
        "id": dst,
        "addr": f"10.0.0.{dst[-1]}",
        "port": 40000,
        "result": result,
        "error": "timed out after 3s",
        "attempts": 2,
        "first": first or result,
        "neigh": neigh,
        "neigh_addr": f"10.0.0.{dst[-1]}",
        "what": "pair",
    }
    return Edge(src, dst, rec)


FULL = {f"node{i}": {f"node{j}": "connected" for j in range(4) if j != i} for i in range(4)}


def test_resolved_peer_that_times_out_is_a_firewall_drop() -> None:
    failed = [edge("node1", "node2", neigh="STALE")]
    lost, rest = neighbour_findings(failed, {"node1": NeighFacts(1024, 0, 0)}, 4)
    assert lost == [] and rest == failed
    matrix = {**FULL, "node1": {**FULL["node1"], "node2": "timeout"}}
    (f,) = pair_findings(rest, matrix)
    assert f.id == "PORT-PAIR-TIMEOUT"
    assert f.nodes == ("node1", "node2")  # one edge: both ends, nobody else
    assert "node1 -> node2:40000" in f.summary and "STALE" in f.cause
    assert "neighbour 10.0.0.2 STALE" in f.evidence[0]


def test_unresolved_peer_is_arp_not_firewall() -> None:
    failed = [edge("node1", "node2", neigh="FAILED"), edge("node3", "node2", neigh="INCOMPLETE")]
    (f,), rest = neighbour_findings(failed, {}, 4)
    assert rest == []
    assert f.id == "PORT-NEIGH-UNRESOLVED" and f.severity == "error"
    assert f.nodes == ("node2",)
    assert "FAILED/INCOMPLETE" in f.summary
    assert "arping" in f.fix and "node1, node3" in f.fix


def test_overflow_seen_on_the_source_names_the_gc_thresh_fix() -> None:
    failed = [edge("node1", f"node{d}", neigh="none") for d in (0, 2, 3)]
    facts = {"node1": NeighFacts(gc_thresh3=None, table_fulls=None, overflows=12)}
    (f,), rest = neighbour_findings(failed, facts, 64)
    assert rest == []
    assert f.id == "PORT-NEIGH-OVERFLOW" and f.nodes == ("node1",)
    assert "'neighbour table overflow' in the kernel log of node1" in f.cause
    assert "net.ipv4.neigh.default.gc_thresh3=2048" in f.fix
    assert "64 nodes" in f.cause


def test_overflow_on_the_peer_explains_a_resolved_edge_too() -> None:
    """The SYN reached the peer, which could not add an entry to answer: the source saw
    a REACHABLE peer, yet it is the peer's table, not a firewall."""
    failed = [edge("node1", "node2", neigh="REACHABLE")]
    facts = {"node1": NeighFacts(), "node2": NeighFacts(table_fulls=40)}
    (f,), rest = neighbour_findings(failed, facts, 4)
    assert rest == [] and f.id == "PORT-NEIGH-OVERFLOW" and f.nodes == ("node2",)
    assert "40 table-full events" in f.cause


def test_small_gc_thresh3_without_failures_is_a_warning() -> None:
    facts = {"a": NeighFacts(gc_thresh3=1024), "b": NeighFacts(gc_thresh3=16384)}
    f = capacity_finding(facts, 2000)
    assert f is not None and f.severity == "warning" and f.nodes == ("a",)
    assert "gc_thresh3=8192" in f.fix
    assert capacity_finding(facts, 64) is None
    assert capacity_finding({"a": NeighFacts()}, 5000) is None  # unreadable: no claim


def test_unresolved_with_small_table_is_overflow() -> None:
    failed = [edge("a", "node2", neigh="none")]
    (f,), _ = neighbour_findings(failed, {"a": NeighFacts(gc_thresh3=1024)}, 2000)
    assert f.id == "PORT-NEIGH-OVERFLOW" and "gc_thresh3 1024" in f.cause


def test_refused_is_never_neighbour_trouble() -> None:
    lost, rest = neighbour_findings([edge("node1", "node2", "refused", neigh="none")], {}, 4)
    assert lost == [] and len(rest) == 1


def test_retried_edges_are_info_only() -> None:
    e = edge("node1", "node2", result="connected", first="timeout")
    f = retried_finding([e])
    assert f is not None and f.severity == "info" and f.id == "PORT-PAIR-RETRIED"
    assert "timed out: filtered" in f.summary and "node1 -> node2" in f.summary
    assert retried_finding([]) is None


def test_thresholds_grow_with_the_cluster() -> None:
    assert suggested_thresholds(64) == (512, 1024, 2048)
    assert suggested_thresholds(2000) == (2048, 4096, 8192)


def test_evidence_is_bounded() -> None:
    failed = [edge(f"n{i}", f"m{j}", neigh="none") for i in range(60) for j in range(60)]
    (f,), _ = neighbour_findings(failed, {}, 120)
    assert len(f.evidence) == 51 and "3550 more" in f.evidence[-1]
