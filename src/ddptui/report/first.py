"""The first failure of a run: the earliest failing step (checklist order) and its most
specific finding. Computed once (first_failure, failure_of) and read by every view: the
TUI's banner and detail pane, `check`'s summary, the Markdown and HTML reports, and the
report JSON's `first_failure` (CONTRACT.md: step, nodes, finding, summary, fix, and rank
and where when the finding names them). Core layer: no pydantic."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.model import StepResult
from ddptui.stepmeta import ORDER


@dataclass(frozen=True)
class FirstFailure:
    step: str
    nodes: tuple[str, ...]
    finding: str | None  # the finding's id; None: the step failed and no finding says why
    summary: str
    fix: str
    rank: int | None = None  # the global rank, when the finding names one
    where: str | None = None  # the place in code, when known
    cause: str = ""  # the finding's cause (not in the JSON's first_failure: in its step)
    evidence: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The report JSON's `first_failure` (CONTRACT.md), key order included."""
        out: dict[str, Any] = {
            "step": self.step,
            "nodes": list(self.nodes),
            "finding": self.finding,
            "summary": self.summary,
            "fix": self.fix,
        }
        if self.rank is not None:  # CONTRACT.md 2026-11-23: the rank and place, when known
            out["rank"] = self.rank
        if self.where:
            out["where"] = self.where
        return out

    @classmethod
    def from_document(cls, report: Mapping[str, Any]) -> FirstFailure | None:
        """The first failure a report document records (a saved one included), with its
        finding's cause and evidence from the step that holds it."""
        first = report.get("first_failure")
        if not isinstance(first, Mapping):
            return None
        step_id = str(first.get("step"))
        steps = report.get("steps") or ()
        step: Mapping[str, Any] = next((s for s in steps if s.get("id") == step_id), {})
        found: Mapping[str, Any] = next(
            (f for f in step.get("findings") or () if f.get("id") == first.get("finding")), {}
        )
        rank = first.get("rank")
        return cls(
            step_id,
            tuple(str(n) for n in first.get("nodes") or ()),
            first.get("finding") or None,
            str(first.get("summary") or ""),
            str(first.get("fix") or ""),
            rank if isinstance(rank, int) else None,
            first.get("where") or None,
            str(found.get("cause") or ""),
            tuple(str(e) for e in found.get("evidence") or ()),
        )


def failure_of(step_id: str, primary: Finding) -> FirstFailure:
    """The first failure for a step and the finding that leads it (check, job, diagnose)."""
    return FirstFailure(
        step_id,
        primary.nodes,
        primary.id,
        primary.summary,
        primary.fix,
        primary.rank,
        primary.where,
        primary.cause,
        primary.evidence,
    )


def first_failure(results: Mapping[str, StepResult]) -> FirstFailure | None:
    """The earliest step (checklist order) whose status is fail, and its most specific
    finding (ranking.yaml puts a real cause before its consequences)."""
    for step_id in ORDER:
        result = results.get(step_id)
        if result is None or result.status != "fail":
            continue
        primary = result.primary
        if primary is None:
            failed = tuple(n for n, r in result.nodes.items() if r.status == "fail")
            return FirstFailure(step_id, failed, None, f"{step_id} failed", "")
        return failure_of(step_id, primary)
    return None
