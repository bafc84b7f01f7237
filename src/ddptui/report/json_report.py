"""The report as a JSON-ready dict, per CONTRACT.md."""

from __future__ import annotations

from typing import Any

from ddptui import __version__
from ddptui.diagnosis.model import StepResult
from ddptui.stepmeta import ORDER


def first_failure(results: dict[str, StepResult]) -> dict[str, Any] | None:
    """The earliest step (checklist order) whose status is fail, and its most specific finding."""
    for step_id in ORDER:
        result = results.get(step_id)
        if result is None or result.status != "fail":
            continue
        primary = result.primary
        if primary is None:
            failed = [n for n, r in result.nodes.items() if r.status == "fail"]
            return {
                "step": step_id,
                "nodes": failed,
                "finding": None,
                "summary": f"{step_id} failed",
                "fix": "",
            }
        return {
            "step": step_id,
            "nodes": list(primary.nodes),
            "finding": primary.id,
            "summary": primary.summary,
            "fix": primary.fix,
        }
    return None


def build_report(session: Any) -> dict[str, Any]:
    results: dict[str, StepResult] = session.results
    return {
        "ddptui_version": __version__,
        "config": session.config_path,
        "cluster": session.config.name,
        "started_at": session.started_at,
        "finished_at": session.finished_at,
        "nodes": [{"name": t.name, "host": t.host, "rank": t.rank} for t in session.targets],
        "steps": [results[s].to_dict() for s in ORDER if s in results],
        "first_failure": first_failure(results),
        "verdict": verdict(results),
    }


def verdict(results: dict[str, StepResult]) -> str:
    statuses = {r.status for r in results.values()}
    if "fail" in statuses:
        return "fail"
    if "error" in statuses:
        return "error"
    if "warn" in statuses:
        return "warn"
    return "pass"
