"""The report as a JSON-ready dict: CONTRACT.md's core plus docs/report-format.md."""

from __future__ import annotations

import platform
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ddptui import __version__
from ddptui.diagnosis.logstore import LogStore
from ddptui.diagnosis.model import StepResult, bandwidth_outliers, odd_nodes
from ddptui.report.first import first_failure
from ddptui.stepmeta import ORDER

if TYPE_CHECKING:
    from ddptui.report.schema import ReportModel

SCHEMA_VERSION = 1
EXCERPT_CONTEXT = 5  # log lines kept before and after a line a finding quotes
EXCERPTS_PER_NODE = 12
TAIL_LINES = 300
METRICS_BUDGET = 6000  # samples per report, shared by the nodes (a 32-GPU-node sample ~2 KB)
VERSION_FACTS = ("python", "torch", "torch_cuda", "nccl", "driver", "kernel", "os")


def run_state(
    results: Mapping[str, StepResult], selected: Sequence[str], running: str | None = None
) -> tuple[str, str]:
    """(state, label) of a run for a header: never PASS while a selected step is
    pending. States: running, waiting, fail, error, warn, pass; the label counts the
    steps that ran ("RUNNING 2/6", "WAITING 1/6", "FAIL (3/6 run)", "PASS (1 skipped)")."""
    chosen = [s for s in selected if s in ORDER] or list(ORDER)
    ran = [s for s in chosen if s in results]
    count = f"{len(ran)}/{len(chosen)}"
    overall = verdict({s: results[s] for s in ran})
    skipped = sum(1 for s in ran if results[s].status == "skip")
    if running is not None:
        return "running", f"RUNNING {count}" + (" · FAIL so far" if overall == "fail" else "")
    if len(ran) < len(chosen):
        if overall in ("fail", "error"):
            return overall, f"{overall.upper()} ({count} run)"
        return "waiting", f"WAITING {count}"
    label = overall.upper()
    if skipped:
        label += f" ({skipped} skipped)"
    return overall, label


def verdict(results: Mapping[str, StepResult]) -> str:
    statuses = {r.status for r in results.values()}
    if "fail" in statuses:
        return "fail"
    if "error" in statuses:
        return "error"
    if "warn" in statuses:
        return "warn"
    return "pass"


def build_report(session: Any, *, metrics: Any = None) -> ReportModel:
    """Everything a session knows, as the report model (its document() is the JSON).
    `metrics` is a MetricsModel (the TUI's or check's live metrics)."""
    results: dict[str, StepResult] = session.results
    steps = [results[s].to_dict() for s in ORDER if s in results]
    names = [t.name for t in session.targets]
    store: LogStore = getattr(session, "logs", None) or LogStore()
    report: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "ddptui_version": __version__,
        "config": session.config_path,
        "cluster": session.config.name,
        "started_at": session.started_at,
        "finished_at": session.finished_at,
        "nodes": [{"name": t.name, "host": t.host, "rank": t.rank} for t in session.targets],
        "master": {"addr": session.config.master.addr, "port": session.config.master.port},
        "steps": steps,
        "first_failure": first.to_dict() if (first := first_failure(results)) else None,
        "verdict": verdict(results),
        "timings": {
            "total_s": round(float(getattr(session, "elapsed_s", 0.0)), 3),
            "steps": {s["id"]: s["duration_s"] for s in steps},
        },
        "versions": versions(steps, names),
        "tables": tables(steps, names),
        "logs": log_excerpts(steps, store),
        "metrics": (
            metrics.export(session.config.metrics_interval, metrics_per_node(len(names)))
            if metrics is not None
            else None
        ),
    }
    session_info = getattr(session, "info", None)
    if session_info:
        report["session"] = dict(session_info)
    from ddptui.diagnosis.exclude import exclude_expr

    report["exclude"] = exclude_expr(report)  # CONTRACT 2026-11-25: nodes to resubmit without
    # One model builds, checks and loads a report: what is written must load again.
    # About 10 ms on a 13 MB 32-node 8-GPU session (metrics samples stay untyped).
    # Imported here: pydantic stays off the TUI's first-frame path.
    from ddptui.report.schema import report_model

    return report_model(report, "the report ddptui built (a bug: please report it)")


def metrics_per_node(nodes: int) -> int:
    """Samples kept per node: 600 for a few nodes, fewer on big clusters (the report
    stays a few MB), never under 60."""
    return max(60, min(600, METRICS_BUDGET // max(1, nodes)))


# --------------------------------------------------------------------------- derived tables


def _step(steps: Iterable[Mapping[str, Any]], step_id: str) -> Mapping[str, Any] | None:
    return next((s for s in steps if s.get("id") == step_id), None)


def versions(steps: Sequence[Mapping[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    inv = _step(steps, "inventory")
    per_node: dict[str, dict[str, Any]] = {}
    if inv is not None:
        for name in names:
            data = (inv.get("nodes", {}).get(name) or {}).get("data") or {}
            if data:
                per_node[name] = {k: data.get(k) for k in VERSION_FACTS}
    return {
        "ddptui": __version__,
        "login_python": platform.python_version(),
        "nodes": per_node,
    }


def tables(steps: Sequence[Mapping[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    inv = _step(steps, "inventory")
    skew_src = ((inv or {}).get("data") or {}).get("skew") or {}
    skew = []
    for fact, raw in skew_src.items():
        if isinstance(raw, Mapping):
            values = {n: raw.get(n) for n in names if n in raw}
            skew.append({"fact": fact, "values": values, "odd": odd_nodes(values)})
    env = _step(steps, "env")
    diff = ((env or {}).get("data") or {}).get("diff") or {}
    env_diff = [
        {"name": var, "values": {n: dict(values).get(n) for n in names}}
        for var, values in diff.items()
        if isinstance(values, Mapping)
    ]
    return {"skew": skew, "env_diff": env_diff, "allreduce": _allreduce_table(steps)}


def _allreduce_table(steps: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    ar = _step(steps, "allreduce")
    data = (ar or {}).get("data") or {}
    if not data:
        return None
    rows = [r for r in data.get("bandwidth") or [] if isinstance(r, Mapping)]
    busbw = [float(r.get("busbw_gbps") or 0.0) for r in rows]
    # The allreduce step's own rule (AR-STRAGGLER), applied to the saved table.
    _, straggling, slowest = bandwidth_outliers(busbw) if len(rows) > 1 else (0.0, [], -1)
    ranks = []
    for i, r in enumerate(rows):
        row = {
            k: r.get(k)
            for k in ("rank", "node", "bytes", "time_us", "busbw_gbps", "algbw_gbps", "link_gbps")
            if k in r
        }
        row["straggler"] = i in straggling
        row["slowest"] = i == slowest
        ranks.append(row)
    world = data.get("world_size")
    one_rank = world == 1 or (bool(rows) and all(r.get("busbw_gbps") is None for r in rows))
    return {
        "backend": data.get("backend"),
        "world_size": world,
        "seconds": data.get("seconds"),
        "timed_out": data.get("timed_out"),
        "ranks": ranks,
        "sizes": sweep_sizes(rows, data.get("world_size")),
        "busbw_note": BUSBW_ONE_RANK if one_rank else None,
    }


BUSBW_ONE_RANK = "busbw n/a (one rank): no data cross a bus; nccl-tests prints 0"


def sweep_sizes(rows: Sequence[Mapping[str, Any]], world_size: Any = None) -> list[dict[str, Any]]:
    """Per message size, the sweep as nccl-tests reports it: the slowest rank's time and
    the bandwidths it gives (busbw null with one rank)."""
    times: dict[int, float] = {}
    world = world_size if isinstance(world_size, int) and world_size > 0 else len(rows)
    for r in rows:
        for point in r.get("sweep") or []:
            if not isinstance(point, Mapping):
                continue
            size, took = point.get("bytes"), point.get("time_us")
            if isinstance(size, int) and isinstance(took, (int, float)) and took > 0:
                times[size] = max(times.get(size, 0.0), float(took))
    out = []
    for size, took in sorted(times.items()):
        algbw = size / took / 1e3
        busbw = algbw * 2 * (world - 1) / world if world > 1 else None
        out.append(
            {
                "bytes": size,
                "time_us": round(took, 1),
                "algbw_gbps": round(algbw, 4),
                "busbw_gbps": None if busbw is None else round(busbw, 4),
            }
        )
    return out


def log_excerpts(steps: Sequence[Mapping[str, Any]], store: LogStore) -> dict[str, Any]:
    """Per node: the last lines, and the lines around each line a finding cites. A
    finding cites lines by id (LogStore "node#seq"): the excerpt is taken around that
    exact line and marks it; older findings without ids are found by their quoted text."""
    out: dict[str, Any] = {}
    for node in store.nodes():
        kept = store.lines(node)
        if not kept:
            continue
        index = {ln.id: i for i, ln in enumerate(kept)}
        texts = [ln.tagged() for ln in kept]
        excerpts: list[dict[str, Any]] = []
        for step in steps:
            for f in step.get("findings", []):
                if node not in f.get("nodes", []) or len(excerpts) >= EXCERPTS_PER_NODE:
                    continue
                cited = [index[i] for i in f.get("lines") or () if i in index]
                hit = cited[0] if cited else None
                if hit is None:
                    quoted = [
                        *f.get("evidence", []),
                        (step.get("data") or {}).get("root_line") or "",
                    ]
                    hit = _find_quoted(texts, quoted)
                if hit is None and step.get("id") == "allreduce":
                    hit = _problem_line(texts)
                if hit is None:
                    continue
                lo, hi = max(0, hit - EXCERPT_CONTEXT), min(len(kept), hit + EXCERPT_CONTEXT + 1)
                excerpts.append(
                    {
                        "finding": f.get("id"),
                        "step": step.get("id"),
                        "first_line": kept[lo].seq,
                        "lines": texts[lo:hi],
                        "ids": [ln.id for ln in kept[lo:hi]],
                        "marked": sorted({i - lo for i in (cited or [hit]) if lo <= i < hi}),
                    }
                )
        out[node] = {
            "lines_total": store.total(node),
            "tail": texts[-TAIL_LINES:],
            "tail_first": kept[max(0, len(kept) - TAIL_LINES)].seq,
            "excerpts": excerpts,
        }
    return out


PROBLEM = re.compile(r"NCCL WARN|^\[E\d{4}|\] \[E\d{4}|Traceback|[Ee]rror|timed out|refused")


def _problem_line(lines: Sequence[str]) -> int | None:
    """The first line that looks like trouble (a finding that quotes no log line)."""
    return next((i for i, line in enumerate(lines) if PROBLEM.search(line)), None)


QUOTE_MIN = 12  # shorter lines or quotes match too much to mark anything


def quotes_line(quote: str, line: str) -> bool:
    """Whether an evidence line quotes this log line, either way round (evidence may
    carry a "node: " prefix, a log line a "[rN] " tag)."""
    body = line.split("] ", 1)[1] if line.startswith("[r") and "] " in line else line
    body, quote = body.strip(), quote.strip()
    return len(body) >= QUOTE_MIN and len(quote) >= QUOTE_MIN and (body in quote or quote in body)


def _find_quoted(lines: Sequence[str], evidence: Iterable[Any]) -> int | None:
    """The index of the log line the most important evidence line quotes. Evidence comes
    most telling first (the cause, then its consequences): the first evidence line that
    quotes any log line wins, not the earliest log line some consequence quotes."""
    for quote in (str(e) for e in evidence):
        hit = next((i for i, line in enumerate(lines) if quotes_line(quote, line)), None)
        if hit is not None:
            return hit
    return None
