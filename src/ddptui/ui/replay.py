"""A saved session (report JSON) as the TUI shows it: its config, results, logs and
metrics timeline. No Textual here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddptui.config import ClusterConfig
from ddptui.diagnosis.logstore import line_id
from ddptui.diagnosis.model import StepResult
from ddptui.metrics import MetricsModel
from ddptui.report.load import results_from_report


@dataclass(frozen=True)
class NodeLog:
    """A node's log as saved: lines, their ids where known, and marked lines."""

    lines: tuple[str, ...] = ()
    ids: tuple[str, ...] = ()
    marks: dict[int, str] = field(default_factory=dict)  # index -> finding id


@dataclass(frozen=True)
class Replay:
    config: ClusterConfig
    results: dict[str, StepResult]
    logs: dict[str, NodeLog]
    metrics: MetricsModel | None
    elapsed_s: float
    started_at: str


def replay_config(report: dict[str, Any]) -> ClusterConfig:
    """A config with the saved session's nodes, master and metrics interval."""
    nodes = [{"host": n["host"], "name": n["name"]} for n in report["nodes"]]
    master = report.get("master") or {}
    interval = (report.get("metrics") or {}).get("interval_s") or 1.0
    return ClusterConfig.model_validate(
        {
            "name": report.get("cluster") or None,
            "master": {
                "addr": master.get("addr") or (nodes[0]["host"] if nodes else "localhost"),
                "port": master.get("port") or 29500,
            },
            "nodes": nodes,
            "metrics_interval": interval,
        }
    )


def node_log(log: dict[str, Any], node: str = "") -> NodeLog:
    """The excerpts (with their marked lines) under a heading each, then the tail. The
    tail's lines get back their ids (`node#seq`, counting from `tail_first`), so a finding
    that cites a line marks it in the tail as the live log view did."""
    lines: list[str] = []
    ids: list[str] = []
    marks: dict[int, str] = {}
    for ex in log.get("excerpts") or ():
        lines.append(f"── excerpt at line {ex.get('first_line')} ({ex.get('finding')}) ──")
        ids.append("")
        base = len(lines)
        body = [str(x) for x in ex.get("lines") or ()]
        lines += body
        ex_ids = [str(x) for x in ex.get("ids") or ()]
        ids += ex_ids if len(ex_ids) == len(body) else [""] * len(body)
        for i in ex.get("marked") or ():
            if isinstance(i, int) and 0 <= i < len(body):
                marks[base + i] = str(ex.get("finding"))
    total, tail = log.get("lines_total") or 0, [str(x) for x in log.get("tail") or ()]
    if lines:
        lines.append(f"── last {len(tail)} of {total} lines ──")
        ids.append("")
    lines += tail
    first = log.get("tail_first")
    if node and isinstance(first, int) and not isinstance(first, bool):
        ids += [line_id(node, first + i) for i in range(len(tail))]
    else:
        ids += [""] * len(tail)
    return NodeLog(tuple(lines), tuple(ids), marks)


def load_replay(report: dict[str, Any]) -> Replay:
    config = replay_config(report)
    names = [n.display for n in config.nodes]
    metrics = (
        MetricsModel.from_export(report["metrics"], names) if report.get("metrics") else None
    )
    return Replay(
        config=config,
        results=results_from_report(report),
        logs={str(k): node_log(v, str(k)) for k, v in (report.get("logs") or {}).items()},
        metrics=metrics,
        elapsed_s=float((report.get("timings") or {}).get("total_s") or 0.0),
        started_at=str(report.get("started_at") or ""),
    )
