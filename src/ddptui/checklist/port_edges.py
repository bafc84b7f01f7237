"""Failed TCP edges of the `port` step turned into findings: a firewall DROP told apart
from neighbour (ARP) resolution, and which fix applies.  Pure (no transport)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.kb import kb_finding

# A neighbour entry in one of these states (after the probe let entries in flux settle)
# means ARP got no answer: never (INCOMPLETE, FAILED), not any more (PROBE: unicast
# re-verification unanswered), or the entry could not even be created ("none").  Any
# other state (REACHABLE, STALE, DELAY, PERMANENT) means the address resolved.
UNRESOLVED: Final = frozenset({"INCOMPLETE", "FAILED", "PROBE", "none"})
NEIGH_SPARE: Final = 16  # entries besides the peers: gateways, the login node, others
MAX_LISTED: Final = 6  # edges (or nodes) named in a summary
MAX_EVIDENCE: Final = 50  # edges quoted as evidence

MASTER_IDS: Final = {
    "timeout": "PORT-TIMEOUT",
    "refused": "PORT-MASTER-REFUSED",
    "noroute": "PORT-MASTER-NOROUTE",
}
PAIR_IDS: Final = {
    "timeout": "PORT-PAIR-TIMEOUT",
    "refused": "PORT-PAIR-REFUSED",
    "noroute": "PORT-PAIR-NOROUTE",
}
WORDS: Final = {
    "timeout": "timed out: filtered",
    "refused": "refused",
    "noroute": "no route to host",
}


def by_name(names: Iterable[str]) -> list[str]:
    """Node names sorted as people count: node5 before node40."""
    return sorted(
        set(names), key=lambda n: [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", n)]
    )


@dataclass(frozen=True)
class Edge:
    """One tested connection: src connected (or not) to dst's listener."""

    src: str
    dst: str
    rec: Mapping[str, Any]  # the probe's connect record

    @property
    def result(self) -> str:
        return str(self.rec.get("result"))

    @property
    def neigh(self) -> str | None:
        value = self.rec.get("neigh")
        return None if value is None else str(value)

    @property
    def unresolved(self) -> bool:
        """The peer's address never resolved: refused (a TCP answer) cannot be that."""
        return self.result != "refused" and self.neigh in UNRESOLVED

    def line(self) -> str:
        r = self.rec
        tries = " (tried twice)" if r.get("attempts") == 2 else ""
        neigh = f"; neighbour {r.get('neigh_addr')} {self.neigh}" if self.neigh else ""
        return (
            f"{self.src} -> {self.dst} ({r.get('addr')}:{r.get('port')}): "
            f"{r.get('error') or self.result}{tries}{neigh}"
        )


@dataclass(frozen=True)
class NeighFacts:
    """A node's neighbour-table facts from the probe's "neigh" record."""

    gc_thresh3: int | None = None
    table_fulls: int | None = None  # table-full events during the test (/proc/net/stat)
    overflows: int | None = None  # "neighbour table overflow" kernel messages then

    @classmethod
    def from_record(cls, rec: Mapping[str, Any] | None) -> NeighFacts:
        rec = rec or {}

        def num(key: str) -> int | None:
            v = rec.get(key)
            return v if isinstance(v, int) and not isinstance(v, bool) else None

        return cls(num("gc_thresh3"), num("table_fulls"), num("overflows"))

    def overflow_seen(self) -> str | None:
        """What showed the table overflowing, or None."""
        seen = []
        if self.table_fulls:
            seen.append(f"{self.table_fulls} table-full events in /proc/net/stat/arp_cache")
        if self.overflows:
            seen.append(f"{self.overflows} 'neighbour table overflow' kernel messages")
        return " and ".join(seen) or None

    def too_small(self, node_count: int) -> bool:
        return self.gc_thresh3 is not None and self.gc_thresh3 < node_count + NEIGH_SPARE


def suggested_thresholds(node_count: int) -> tuple[int, int, int]:
    """gc_thresh1/2/3 with room for a full mesh of node_count nodes (powers of two)."""
    t3 = 2048
    while t3 < 4 * (node_count + NEIGH_SPARE):
        t3 *= 2
    return t3 // 4, t3 // 2, t3


def _listed(edges: Sequence[Edge], port: bool = True) -> str:
    names = ", ".join(
        f"{e.src} -> {e.dst}" + (f":{e.rec.get('port')}" if port else "")
        for e in edges[:MAX_LISTED]
    )
    more = f" and {len(edges) - MAX_LISTED} more" if len(edges) > MAX_LISTED else ""
    return names + more


def _neigh_word(edges: Sequence[Edge]) -> str:
    states = sorted({e.neigh for e in edges if e.neigh})
    return "/".join(states) if states else "not readable"


def _evidence(edges: Sequence[Edge]) -> list[str]:
    lines = [e.line() for e in edges[:MAX_EVIDENCE]]
    if len(edges) > MAX_EVIDENCE:
        lines.append(f"... and {len(edges) - MAX_EVIDENCE} more (the step's data has all)")
    return lines


def _some(names: Sequence[str]) -> str:
    return ", ".join(names) if len(names) <= MAX_LISTED else f"{len(names)} nodes"


def _overflow_seen(facts: Mapping[str, NeighFacts], nodes: Sequence[str]) -> str:
    """What showed the overflow on these nodes, in one line."""
    fulls = {n: c for n in nodes if n in facts and (c := facts[n].table_fulls)}
    logged = {n: c for n in nodes if n in facts and (c := facts[n].overflows)}
    parts = []
    if fulls:
        parts.append(
            f"{sum(fulls.values())} table-full events counted by the kernel on "
            f"{_some(by_name(fulls))} during the test"
        )
    if logged:
        parts.append(
            f"'neighbour table overflow' in the kernel log of {_some(by_name(logged))} "
            f"during the test (up to {max(logged.values())} messages each)"
        )
    return "; ".join(parts)


def neighbour_findings(
    failed: Sequence[Edge], facts: Mapping[str, NeighFacts], node_count: int
) -> tuple[list[Finding], list[Edge]]:
    """Findings for edges lost to neighbour resolution: the source's entry for the peer
    never resolved, or either end's table overflowed during the test (a peer that cannot
    add an entry for the source cannot answer it).  Returns them and the other edges
    (resolved, or state unknown), which are the firewall's."""
    overflowed = {n for n, f in facts.items() if f.overflow_seen()}
    small = {n for n, f in facts.items() if f.too_small(node_count)}

    def neighbourly(e: Edge) -> bool:
        return e.unresolved or bool({e.src, e.dst} & overflowed)

    lost = [e for e in failed if neighbourly(e)]
    rest = [e for e in failed if not neighbourly(e)]
    if not lost:
        return [], rest
    ends = {e.src for e in lost} | {e.dst for e in lost}
    sources = by_name(e.src for e in lost)
    t1, t2, t3 = suggested_thresholds(node_count)
    if ends & (overflowed | small):
        nodes = by_name(ends & overflowed) or by_name(ends & small)
        seen = _overflow_seen(facts, nodes) or "; ".join(
            f"{n}: gc_thresh3 {facts[n].gc_thresh3}" for n in nodes
        )
        limits = sorted({t for f in facts.values() if (t := f.gc_thresh3) is not None})
        finding = kb_finding(
            "PORT-NEIGH-OVERFLOW",
            nodes,
            f"neighbour table overflow on {_some(nodes)}: {len(lost)} connection(s) failed "
            f"twice ({_listed(lost)})",
            _evidence(lost),
            seen=seen,
            gc_thresh3="/".join(map(str, limits)) or "not readable here",
            node_count=node_count,
            t1=t1,
            t2=t2,
            t3=t3,
        )
    else:
        targets = by_name(e.dst for e in lost)
        finding = kb_finding(
            "PORT-NEIGH-UNRESOLVED",
            targets,
            f"peer address not resolved (ARP unanswered, neighbour "
            f"{_neigh_word(lost)}): {_listed(lost)}",
            _evidence(lost),
            neigh=_neigh_word(lost),
            sources=", ".join(sources),
            targets=", ".join(targets),
        )
    return [finding], rest


def capacity_finding(facts: Mapping[str, NeighFacts], node_count: int) -> Finding | None:
    """A warning when gc_thresh3 (where readable) is below what a full mesh needs."""
    small = by_name(n for n, f in facts.items() if f.too_small(node_count))
    if not small:
        return None
    limits = sorted({t for n in small if (t := facts[n].gc_thresh3) is not None})
    t1, t2, t3 = suggested_thresholds(node_count)
    return kb_finding(
        "PORT-NEIGH-CAPACITY",
        small,
        f"gc_thresh3 {'/'.join(map(str, limits))} on {', '.join(small)} is below "
        f"{node_count} nodes + {NEIGH_SPARE}: a job's full mesh would overflow the "
        "neighbour table",
        [f"{n}: net.ipv4.neigh.default.gc_thresh3 = {facts[n].gc_thresh3}" for n in small],
        gc_thresh3="/".join(map(str, limits)),
        node_count=node_count,
        t1=t1,
        t2=t2,
        t3=t3,
    )


def retried_finding(edges: Sequence[Edge]) -> Finding | None:
    """Info: edges that failed once and passed on the retry (never blamed)."""
    if not edges:
        return None
    sources = by_name(e.src for e in edges)
    firsts = sorted({str(e.rec.get("first")) for e in edges})
    return kb_finding(
        "PORT-PAIR-RETRIED",
        sources,
        f"{len(edges)} connection(s) passed only when retried (first attempt: "
        f"{', '.join(WORDS.get(f, f) for f in firsts)}): {_listed(edges, port=False)}",
        [f"{e.src} -> {e.dst}: first {e.rec.get('first')}, then connected" for e in edges[:20]],
        sources=", ".join(sources),
    )


def pair_findings(failed: Sequence[Edge], matrix: Mapping[str, Mapping[str, str]]) -> list[Finding]:
    """Firewall findings for resolved edges that failed twice, one per result kind."""
    by_result: dict[str, list[Edge]] = {}
    for e in failed:
        by_result.setdefault(e.result, []).append(e)
    out = []
    for result, edges in by_result.items():
        culprits = culprit_nodes(edges, matrix)
        out.append(
            kb_finding(
                PAIR_IDS.get(result, "PORT-PAIR-ERROR"),
                culprits,
                f"node-to-node TCP fails ({WORDS.get(result, result)}): {_listed(edges)}",
                _evidence(edges),
                neigh=_neigh_word(edges),
                culprits=", ".join(culprits),
            )
        )
    return out


def master_findings(failed: Sequence[Edge], master: str, addr: str, port: int) -> list[Finding]:
    """Findings for nodes that could not reach MASTER_PORT (the resolved ones)."""
    by_result: dict[str, list[Edge]] = {}
    for e in failed:
        by_result.setdefault(e.result, []).append(e)
    out = []
    for result, edges in by_result.items():
        names = [e.src for e in edges]
        out.append(
            kb_finding(
                MASTER_IDS.get(result, "PORT-ERROR"),
                names,
                f"MASTER_PORT {port} on {addr} is not reachable from {', '.join(names)} "
                f"({WORDS.get(result, result)})",
                _evidence(edges),
                neigh=_neigh_word(edges),
                port=port,
                master=master,
            )
        )
    return out


def culprit_nodes(edges: Sequence[Edge], matrix: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Nodes to blame: those whose every inbound (or outbound) edge failed; else all ends."""
    failed = {(e.src, e.dst) for e in edges}
    nodes = by_name({e.src for e in edges} | {e.dst for e in edges})
    blamed = []
    for n in nodes:
        inbound = [(s, d) for s, row in matrix.items() for d in row if d == n]
        outbound = [(n, d) for d in matrix.get(n, {})]
        if (inbound and all(e in failed for e in inbound)) or (
            outbound and all(e in failed for e in outbound)
        ):
            blamed.append(n)
    return blamed or nodes
