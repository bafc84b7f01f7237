"""Report headers and wide clusters. Wide: the failing nodes' columns come first, as the
TUI does: in a 64-column matrix a node that failed at `port` must not sit off to the
right of 40 green columns; among nodes that all failed a later step, the one that failed
first leads. Header: a report without a config does not say "config ?"."""

from __future__ import annotations

import re
from typing import Any

from ddptui.report.html import render_html
from ddptui.report.markdown import render_markdown
from ddptui.report.views import failing_first

N = 64


def wide_report() -> dict[str, Any]:
    names = [f"node{i}" for i in range(N)]

    def step(sid: str, failing: set[str]) -> dict[str, Any]:
        nodes = {
            n: {"status": "fail" if n in failing else "pass", "summary": f"{sid} on {n}"}
            for n in names
        }
        status = "fail" if failing else "pass"
        return {"id": sid, "title": sid, "status": status, "duration_s": 1.0, "nodes": nodes,
                "findings": [], "data": {}}

    return {
        "ddptui_version": "0.1.0",
        "cluster": "wide",
        "started_at": "2026-11-23T09:00:00Z",
        "finished_at": "2026-11-23T09:01:00Z",
        "nodes": [{"name": n, "host": f"10.0.0.{i + 1}", "rank": i} for i, n in enumerate(names)],
        "steps": [
            step("ssh", set()),
            step("port", {"node40", "node17"}),
            step("allreduce", set(names)),
        ],
        "first_failure": None,
        "verdict": "fail",
    }


def test_failing_first_orders_by_worst_status_then_earliest_step() -> None:
    report = wide_report()
    names = [n["name"] for n in report["nodes"]]
    order = failing_first(report, names)
    assert order[:3] == ["node17", "node40", "node0"]
    assert sorted(order) == sorted(names)
    report["steps"] = report["steps"][:2]  # without the step every node failed
    assert failing_first(report, names)[:3] == ["node17", "node40", "node0"]


def test_wide_html_and_markdown_matrices_lead_with_the_failing_nodes() -> None:
    report = wide_report()
    html = render_html(report)
    columns = re.findall(r'<th class="node">([^<]*)</th>', html)
    assert columns[:3] == ["node17", "node40", "node0"]
    head = next(line for line in render_markdown(report).splitlines() if line.startswith("| step"))
    assert head.split(" | ")[3:6] == ["node17", "node40", "node0"]


def test_a_report_without_a_config_does_not_say_config_question_mark() -> None:
    """`ddptui diagnose` on local files has no config: the header leaves it out."""
    report = wide_report()
    report.pop("config", None)
    assert "config" not in render_markdown(report).splitlines()[2]
    assert "config <code>?" not in render_html(report)
    report["config"] = "cluster.yaml"
    assert "config `cluster.yaml`" in render_markdown(report).splitlines()[2]
