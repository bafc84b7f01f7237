"""A saved report back into immutable results (for replay and for snapshot tests)."""

from __future__ import annotations

from typing import Any

from ddptui.diagnosis.model import Finding, NodeResult, StepResult


def results_from_report(report: dict[str, Any]) -> dict[str, StepResult]:
    out: dict[str, StepResult] = {}
    for step in report.get("steps", []):
        nodes = {
            name: NodeResult(
                n["status"],
                n.get("summary", ""),
                n.get("data") or {},
                float(n.get("duration_s") or 0.0),
            )
            for name, n in step.get("nodes", {}).items()
        }
        findings = tuple(Finding.from_dict(f) for f in step.get("findings", []))
        out[step["id"]] = StepResult(
            step["id"],
            step.get("title", step["id"]),
            step["status"],
            float(step.get("duration_s") or 0.0),
            nodes,
            findings,
            step.get("data") or {},
        )
    return out
