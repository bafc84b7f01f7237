"""Immutable results: per-node results and step results (with their findings). Core layer."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.ranking import primary

Status = Literal["pass", "warn", "fail", "skip", "error"]

STATUS_RANK: dict[str, int] = {"pass": 0, "skip": 1, "warn": 2, "error": 3, "fail": 4}
@dataclass(frozen=True)
class NodeResult:
    """One node's outcome for one step; `data` holds the facts the step gathered."""

    status: Status
    summary: str
    data: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0

    def __post_init__(self) -> None:
        # Milliseconds, as reports store it: a result shows the same live and replayed.
        object.__setattr__(self, "duration_s", round(self.duration_s, 3))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "summary": self.summary}
        if self.duration_s:
            out["duration_s"] = self.duration_s
        if self.data:
            out["data"] = self.data
        return out


@dataclass(frozen=True)
class StepResult:
    id: str
    title: str
    status: Status
    duration_s: float
    nodes: dict[str, NodeResult]
    findings: tuple[Finding, ...] = ()
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Milliseconds, as reports store it: a result shows the same live and replayed.
        object.__setattr__(self, "duration_s", round(self.duration_s, 3))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "title": self.title,
            "status": self.status,
            "duration_s": self.duration_s,
            "nodes": {name: r.to_dict() for name, r in self.nodes.items()},
            "findings": [f.to_dict() for f in self.findings],
        }
        if self.data:
            out["data"] = self.data
        return out

    @property
    def primary(self) -> Finding | None:
        """The most specific finding behind a failure: the first error, else the first
        warning, after a real cause is put before its consequences (ranking.yaml)."""
        return primary(self.findings)


def bandwidth_outliers(busbw: Sequence[float]) -> tuple[float, list[int], int]:
    """Of per-rank bus bandwidths (two or more): the median, the indices of the
    stragglers (below half the median) and of the slowest rank (the first on a tie)."""
    median = statistics.median(busbw)
    slowest = min(range(len(busbw)), key=busbw.__getitem__)
    return median, [i for i, v in enumerate(busbw) if v < median / 2], slowest


def odd_nodes(values: Mapping[str, Any]) -> list[str]:
    """The one "odd node out" rule: the nodes whose value differs from the majority's;
    every node when no value has a strict majority over the next (a tie), none when all
    agree. Values compare by repr, so 12.4 and "12.4" differ."""
    keyed = {n: repr(v) for n, v in values.items()}
    top = Counter(keyed.values()).most_common()
    if len(top) < 2:
        return []
    if top[0][1] == top[1][1]:
        return list(values)
    return [n for n, k in keyed.items() if k != top[0][0]]


def majority_value(values: Mapping[str, Any]) -> Any:
    """The value the nodes outside odd_nodes() share (None on a tie)."""
    odd = set(odd_nodes(values))
    if len(odd) == len(values):
        return None
    return next((v for n, v in values.items() if n not in odd), None)


def worst(statuses: Sequence[Status]) -> Status:
    return max(statuses, key=lambda s: STATUS_RANK[s]) if statuses else "pass"


def node_status_from(findings: list[Finding] | tuple[Finding, ...], node: str) -> Status:
    """pass / warn / fail for one node from the findings that name it."""
    sev = {f.severity for f in findings if node in f.nodes}
    if "error" in sev:
        return "fail"
    if "warning" in sev:
        return "warn"
    return "pass"


def step_status(nodes: dict[str, NodeResult], findings: tuple[Finding, ...]) -> Status:
    statuses: list[Status] = [r.status for r in nodes.values()]
    if any(f.severity == "error" for f in findings):
        statuses.append("fail")
    elif any(f.severity == "warning" for f in findings):
        statuses.append("warn")
    ran = [s for s in statuses if s != "skip"]
    if not ran:
        return "skip"
    return worst(ran)
