"""Ranking that knows the topology: ranking.yaml's rules applied to a list of findings.

Two kinds of rule, both data: a topology rule changes the severity of some findings on
clusters where they are expected (loopback when every node is one host), and a
precedence rule lists a real cause before the consequences it explains (a duplicate GPU
before the loopback bootstrap and the peers' timeouts).  Core layer."""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ddptui.diagnosis.finding import Finding, Severity
from ddptui.diagnosis.signatures import fill

RANKING_FILE: Final = Path(__file__).with_name("ranking.yaml")
_SEVERITIES: Final = ("error", "warning", "info")


class RankingError(ValueError):
    """ranking.yaml is malformed; the message names the rule and the problem."""


@dataclass(frozen=True)
class Topology:
    """What ranking needs to know about the configured nodes: which are one host.

    `hosts` maps each node to the identity of its host and network stack, or None when
    unknown; two nodes with the same identity share a loopback interface."""

    hosts: Mapping[str, str | None]

    @classmethod
    def from_nodes(
        cls, nodes: Iterable[tuple[str, str, int | None, str | None, str | None]]
    ) -> Topology:
        """From (name, config host, port, boot id, network namespace) per node. The
        probe's boot id and namespace decide when every node has them; otherwise the
        config does: `host: local` is this host, and one host:port is one machine."""
        rows = list(nodes)
        if rows and all(boot and netns for _, _, _, boot, netns in rows):
            return cls({name: f"{boot}/{netns}" for name, _, _, boot, netns in rows})
        return cls(
            {
                name: "local" if host == "local" else f"{host}:{port or 22}"
                for name, host, port, _, _ in rows
            }
        )

    @property
    def one_host(self) -> bool:
        """Every configured node is the same host and network stack."""
        ids = list(self.hosts.values())
        return bool(ids) and None not in ids and len(set(ids)) == 1

    def same_host_groups(self) -> list[list[str]]:
        """Groups of two or more nodes that are one host, in config order."""
        groups: dict[str, list[str]] = {}
        for name, ident in self.hosts.items():
            if ident is not None:
                groups.setdefault(ident, []).append(name)
        return [g for g in groups.values() if len(g) > 1]


PREDICATES: Final[dict[str, Callable[[Topology], bool]]] = {"one_host": lambda t: t.one_host}


def _matcher(patterns: Sequence[str]) -> Callable[[str], bool]:
    return lambda fid: any(fnmatch.fnmatchcase(fid, p) for p in patterns)


@dataclass(frozen=True)
class TopologyRule:
    id: str
    when: str
    findings: tuple[str, ...]
    severity: Severity
    note: str

    def matches(self, fid: str) -> bool:
        return _matcher(self.findings)(fid)

    def holds(self, topology: Topology) -> bool:
        return PREDICATES[self.when](topology)

    def apply(self, f: Finding, topology: Topology) -> Finding:
        if f.severity == self.severity:
            return f
        note = fill(self.note, {"nodes": ", ".join(topology.hosts)})
        return dataclasses.replace(f, severity=self.severity, cause=f"{f.cause} {note}".strip())


@dataclass(frozen=True)
class PrecedenceRule:
    id: str
    why: str
    causes: tuple[str, ...]
    before: tuple[str, ...]
    lines: bool = False  # also among line signatures: the cause leads a log's diagnosis

    def is_cause(self, fid: str) -> bool:
        return _matcher(self.causes)(fid)

    def is_consequence(self, fid: str) -> bool:
        return _matcher(self.before)(fid) and not self.is_cause(fid)


@dataclass(frozen=True)
class Ranking:
    topology: tuple[TopologyRule, ...]
    precedence: tuple[PrecedenceRule, ...]


def _strings(rid: str, entry: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = entry.get(key)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise RankingError(f"{rid}: {key} must be a non-empty list of finding ids or patterns")
    return tuple(value)


def _text(rid: str, entry: Mapping[str, Any], key: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise RankingError(f"{rid}: {key} must be a non-empty string")
    return value


def _entry(
    entry: object, section: str, index: int, keys: set[str]
) -> tuple[str, Mapping[str, Any]]:
    if not isinstance(entry, dict):
        raise RankingError(f"{section} rule {index + 1}: expected a mapping")
    rid = f"{section} rule {entry.get('id', index + 1)}"
    missing, unknown = sorted(keys - set(entry)), sorted(set(entry) - keys)
    if missing or unknown:
        what = (
            f"missing keys {', '.join(missing)}"
            if missing
            else f"unknown keys {', '.join(unknown)}"
        )
        raise RankingError(f"{rid}: {what} (keys: {', '.join(sorted(keys))})")
    return rid, entry


def parse_ranking(text: str, known_ids: Iterable[str] | None = None) -> Ranking:
    """Rules from YAML text, validated; with known_ids, every id or pattern must name
    at least one of them (a typo would silently never apply)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        doc = YAML(typ="safe").load(text)
    except YAMLError as exc:
        raise RankingError(f"not valid YAML: {exc}") from exc
    if not isinstance(doc, dict) or set(doc) - {"topology", "precedence"}:
        raise RankingError("expected top-level 'topology:' and 'precedence:' lists only")
    topo, prec = [], []
    for i, e in enumerate(doc.get("topology") or []):
        rid, entry = _entry(e, "topology", i, {"id", "when", "findings", "severity", "note"})
        if entry["when"] not in PREDICATES:
            raise RankingError(f"{rid}: when {entry['when']!r} is not one of {sorted(PREDICATES)}")
        if entry["severity"] not in _SEVERITIES:
            raise RankingError(f"{rid}: severity {entry['severity']!r} is not one of {_SEVERITIES}")
        findings = _strings(rid, entry, "findings")
        topo.append(
            TopologyRule(
                str(entry["id"]),
                entry["when"],
                findings,
                entry["severity"],
                _text(rid, entry, "note"),
            )
        )
    for i, e in enumerate(doc.get("precedence") or []):
        optional = {"lines"} & set(e) if isinstance(e, dict) else set()
        rid, entry = _entry(e, "precedence", i, {"id", "why", "causes", "before", *optional})
        lines = entry.get("lines", False)
        if not isinstance(lines, bool):
            raise RankingError(f"{rid}: lines must be true or false")
        prec.append(
            PrecedenceRule(
                str(entry["id"]),
                _text(rid, entry, "why"),
                _strings(rid, entry, "causes"),
                _strings(rid, entry, "before"),
                lines,
            )
        )
    if known_ids is not None:
        known = list(known_ids)
        for rule in topo:
            _check_known(f"topology rule {rule.id}", rule.findings, known)
        for p in prec:
            _check_known(f"precedence rule {p.id}", p.causes + p.before, known)
    return Ranking(tuple(topo), tuple(prec))


def _check_known(rid: str, patterns: Iterable[str], known: list[str]) -> None:
    for p in patterns:
        if not fnmatch.filter(known, p):
            raise RankingError(f"{rid}: {p!r} names no finding in kb/*.yaml or signatures.yaml")


@functools.lru_cache(maxsize=1)
def load_ranking() -> Ranking:
    """The shipped rules, parsed and checked against the knowledge base once."""
    from ddptui.diagnosis.kb import load_kb

    try:
        text = RANKING_FILE.read_text(encoding="utf-8")
    except OSError as exc:
        raise RankingError(f"cannot read {RANKING_FILE.name}: {exc}") from exc
    try:
        return parse_ranking(text, load_kb())
    except RankingError as exc:
        raise RankingError(f"{RANKING_FILE.name}: {exc}") from None


def order_findings(findings: Sequence[Finding], ranking: Ranking | None = None) -> list[Finding]:
    """The findings with each present cause (not info) moved before the first finding
    it outranks; everything else keeps its order."""
    rules = (ranking or load_ranking()).precedence
    out = list(findings)
    for rule in rules:
        for cause in [f for f in out if rule.is_cause(f.id) and f.severity != "info"]:
            i = out.index(cause)
            j = next((k for k in range(i) if rule.is_consequence(out[k].id)), None)
            if j is not None:
                out.insert(j, out.pop(i))
    return out


def rank_findings(
    findings: Sequence[Finding], topology: Topology | None = None, ranking: Ranking | None = None
) -> list[Finding]:
    """Topology rules first (a severity that holds on this cluster), then precedence."""
    rules = ranking or load_ranking()
    out = list(findings)
    if topology is not None:
        for rule in rules.topology:
            if rule.holds(topology):
                out = [rule.apply(f, topology) if rule.matches(f.id) else f for f in out]
    return order_findings(out, rules)


def primary(findings: Sequence[Finding]) -> Finding | None:
    """The finding that leads: in ranked order the first error, else the first warning."""
    ranked = order_findings(findings)
    for sev in ("error", "warning"):
        for f in ranked:
            if f.severity == sev:
                return f
    return None
