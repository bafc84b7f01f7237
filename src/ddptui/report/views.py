"""What the Markdown and HTML reports share: the node list, the derived tables with their
fallbacks for older reports, the allreduce and one-rank views, fix commands, GPU facts,
metric series per node, cited log lines, versions and timings. Plain text out; each
renderer escapes for its format."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ddptui.diagnosis.model import STATUS_RANK, majority_value, odd_nodes
from ddptui.metrics import human_bytes
from ddptui.report.svg import finite, gpu_peaks
from ddptui.stepmeta import ORDER, TITLES

# Escapes, not literals: ruff (RUF001) flags look-alike characters such as the en dash.
NONE = "\u2013"  # an en dash: a value that is unknown or null


COMPACT_NODES = 8  # wider clusters get glyph-only cells and compact skew/env tables


LOG_LINE_CHARS = 400


def node_names(report: Mapping[str, Any]) -> list[str]:
    """The configured nodes in rank order, then any node only a step mentions."""
    names = [str(n.get("name")) for n in report.get("nodes") or [] if isinstance(n, Mapping)]
    for step in steps_of(report):
        names += [str(n) for n in step.get("nodes") or {} if str(n) not in names]
    return names


def steps_of(report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [s for s in report.get("steps") or [] if isinstance(s, Mapping)]


def step_title(step: Mapping[str, Any]) -> str:
    return str(step.get("title") or TITLES.get(str(step.get("id")), step.get("id")))


def node_result(step: Mapping[str, Any], node: str) -> Mapping[str, Any] | None:
    result = (step.get("nodes") or {}).get(node)
    return result if isinstance(result, Mapping) else None


def failing_first(report: Mapping[str, Any], names: list[str]) -> list[str]:
    """Node columns for a wide cluster: the nodes with the worst status first, the
    earliest step first among equals (as the TUI orders them), then config order, so a
    failing node is never off to the right of 60 green columns."""
    worst = {n: (0, 0) for n in names}  # (-worst status, first step it happened at)
    for i, step in enumerate(steps_of(report)):
        for n in names:
            r = node_result(step, n)
            rank = STATUS_RANK.get(str(r.get("status")), 0) if r is not None else 0
            if -rank < worst[n][0]:
                worst[n] = (-rank, i)
    position = {n: i for i, n in enumerate(names)}
    return sorted(names, key=lambda n: (*worst[n], position[n]))


def report_tables(report: Mapping[str, Any]) -> dict[str, Any]:
    """`tables` as written, each missing key derived from the steps (older reports)."""
    given = report.get("tables")
    given = given if isinstance(given, Mapping) else {}
    out = dict(given)
    if not {"skew", "env_diff", "allreduce"} <= set(out):
        from ddptui.report.json_report import tables

        for key, value in tables(steps_of(report), node_names(report)).items():
            out.setdefault(key, value)
    return out


def session_id(report: Mapping[str, Any]) -> str | None:
    session = report.get("session")
    return str(session["id"]) if isinstance(session, Mapping) and session.get("id") else None


def has_step(report: Mapping[str, Any], step_id: str) -> bool:
    return any(s.get("id") == step_id for s in steps_of(report))


Item = tuple[Any, Mapping[str, Any], list[str]]  # (label, {node: value}, odd nodes)


def usual_value(values: Mapping[str, Any], odd: Sequence[str]) -> Any:
    """The value the nodes outside `odd` share."""
    return majority_value(values) if len(odd) < len(values) else None


def env_items(rows: Sequence[Any], names: list[str]) -> list[Item]:
    """tables.env_diff as matrix rows: every node's value (None: unset) and the odd ones."""
    items: list[Item] = []
    for r in rows:
        if isinstance(r, Mapping) and isinstance(r.get("values"), Mapping):
            values = {n: r["values"].get(n) for n in names}
            items.append((r.get("name"), values, odd_nodes(values)))
    return items


def busbw_line(rows: Sequence[Mapping[str, Any]]) -> str:
    algbw = [v for v in (finite(r.get("algbw_gbps")) for r in rows) if v is not None]
    if any(r.get("one_rank") for r in rows):
        size = finite(rows[0].get("bytes"))
        at = f" at {size_text(int(size))}" if size else ""
        alg = f"; algbw {min(algbw):.3f} GB/s{at}" if algbw else ""
        return f"busbw {BUSBW_NA}: no data cross a bus (nccl-tests prints 0){alg}."
    busbw = sorted(v for v in (finite(r.get("busbw_gbps")) for r in rows) if v is not None)
    if not busbw:
        return ""
    median = busbw[len(busbw) // 2]
    ranks = f"{len(busbw)} rank{'s' if len(busbw) != 1 else ''}"
    return f"busbw over {ranks}: min {busbw[0]:.3f}, median {median:.3f}, max {busbw[-1]:.3f} GB/s."


def one_rank(table: Mapping[str, Any]) -> bool:
    """busbw is undefined with one rank: the table says so (busbw_note), or its world
    size is 1 (reports written before busbw_note recorded busbw = algbw there)."""
    return bool(table.get("busbw_note")) or table.get("world_size") == 1


BUSBW_NA = "n/a (one rank)"


def size_text(nbytes: int) -> str:
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):g} {unit}"
    return f"{nbytes} B"


def sweep_rows(table: Mapping[str, Any]) -> list[list[str]]:
    """tables.allreduce.sizes as cells: size, time, algbw, busbw (n/a with one rank)."""
    out = []
    single = one_rank(table)
    for p in table.get("sizes") or []:
        if not isinstance(p, Mapping) or finite(p.get("bytes")) is None:
            continue
        took, alg, bus = (finite(p.get(k)) for k in ("time_us", "algbw_gbps", "busbw_gbps"))
        out.append(
            [
                size_text(int(p["bytes"])),
                NONE if took is None else f"{took:.1f}",
                NONE if alg is None else f"{alg:.3f}",
                BUSBW_NA if single else NONE if bus is None else f"{bus:.3f}",
            ]
        )
    return out


SWEEP_HEAD = ("size", "time µs", "algbw GB/s", "busbw GB/s")


def rank_rows(table: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Allreduce ranks with the share of the link's speed filled in where it is known."""
    rows = []
    single = one_rank(table)
    for raw in table.get("ranks") or []:
        if not isinstance(raw, Mapping):
            continue
        row = dict(raw)
        row["one_rank"] = single
        if single:
            row["busbw_gbps"] = None
        busbw, link = finite(row.get("busbw_gbps")), finite(row.get("link_gbps"))
        if row.get("link_fraction") is None and busbw is not None and link:
            row["link_fraction"] = busbw * 8 / link
        rows.append(row)
    return rows


IDLE_REASONS = frozenset({"GpuIdle", "None"})  # NVML's "nothing to do": not a limit


def gpu_facts(node_series: Mapping[str, Any]) -> list[str]:
    """What a node's GPUs peaked at beside utilisation (from series()), as plain phrases:
    memory (the fullest GPU), temperature, power, and why clocks were held back."""
    peaks = gpu_peaks(node_series.get("gpu_records") or {})
    if not peaks:
        return []
    facts = []
    with_mem = [(k, p) for k, p in peaks.items() if p["mem_used"] is not None]
    if with_mem:
        k, p = max(with_mem, key=lambda kp: kp[1]["mem_used"] / (kp[1]["mem_total"] or 1.0))
        total = f" of {human_bytes(p['mem_total'])}" if p["mem_total"] else ""
        which = f" (GPU{k})" if len(peaks) > 1 else ""
        facts.append(f"memory max {human_bytes(p['mem_used'])}{total}{which}")
    for field, unit in (("temp_c", "°C"), ("power_w", "W")):
        values = [p[field] for p in peaks.values() if p[field] is not None]
        if values:
            facts.append(f"max {max(values):.0f} {unit}")
    reasons: dict[str, list[str]] = {}
    for k, p in peaks.items():
        for reason in p["throttle"]:
            if reason not in IDLE_REASONS:
                reasons.setdefault(reason, []).append(f"GPU{k}")
    if reasons:
        held = ", ".join(
            r if len(peaks) == 1 else f"{r} ({', '.join(gs)})" for r, gs in reasons.items()
        )
        facts.append(f"clocks held back by {held}")
    return facts


CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


COMMAND_HEAD = re.compile(r"[a-z][\w.+-]*")


LONE_COMMANDS = frozenset({"nvidia-smi", "ibstat", "ibv_devinfo", "show_gids", "ibdev2netdev"})


def fix_commands(fix: str) -> list[str]:
    """The shell commands a fix quotes in backticks (not config keys or sysctl names)."""
    out: list[str] = []
    for span in CODE_SPAN.findall(fix or ""):
        cmd = span.strip()
        head = cmd.split(" ", 1)[0]
        command = (" " in cmd and COMMAND_HEAD.fullmatch(head) and not head.endswith(":")) or (
            cmd in LONE_COMMANDS
        )
        if command and cmd not in out:
            out.append(cmd)
    return out


def fmt_value(value: Any) -> str:
    if value is None:
        return NONE
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def shorten(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|[\x00-\x08\x0b-\x1f\x7f]")


def clean_line(line: Any, limit: int = LOG_LINE_CHARS) -> str:
    """A log line without terminal colour codes or control characters, cut at `limit`."""
    text = CONTROL.sub("", str(line))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def marks(excerpt: Mapping[str, Any]) -> set[int]:
    """Indices of the lines in an excerpt that its finding cites (`marked`)."""
    raw = excerpt.get("marked")
    return {i for i in raw if isinstance(i, int)} if isinstance(raw, list) else set()


def place(item: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """A finding's (or first failure's) global rank and place in code, when known."""
    rank, where = item.get("rank"), item.get("where")
    rank_text = str(rank) if isinstance(rank, int) and not isinstance(rank, bool) else None
    return rank_text, (str(where) if where else None)


def differ(row: Mapping[str, Any], text: Any, mono: Any) -> str:
    """'node2 differs on `torch`' (text and mono escape for the target format)."""
    odd = list(row.get("odd") or [])
    return f"{text(', '.join(odd))} differ{'s' if len(odd) == 1 else ''} on {mono(row.get('fact'))}"


def rank_note(row: Mapping[str, Any]) -> str:
    return "straggler" if row.get("straggler") else "slowest" if row.get("slowest") else ""


def metric_nodes(report: Mapping[str, Any], names: list[str]) -> list[tuple[str, list[Any]]]:
    """(node, samples) for every node the session's metrics cover, in node order."""
    metrics = report.get("metrics")
    per_node = metrics.get("nodes") if isinstance(metrics, Mapping) else None
    if not isinstance(per_node, Mapping):
        return []
    order = [*names, *(str(k) for k in per_node if str(k) not in names)]
    return [
        (n, [x for x in per_node[n].get("samples") or [] if isinstance(x, dict)])
        for n in order
        if isinstance(per_node.get(n), Mapping)
    ]


def step_durations(report: Mapping[str, Any]) -> list[tuple[str, float]]:
    """(step, seconds) in checklist order: `timings.steps`, else each step's duration_s."""
    durations = {str(s.get("id")): finite(s.get("duration_s")) for s in steps_of(report)}
    timings = report.get("timings")
    if isinstance(timings, Mapping) and isinstance(timings.get("steps"), Mapping):
        durations.update({str(k): finite(v) for k, v in timings["steps"].items()})
    known = [(k, v) for k, v in durations.items() if v is not None]
    return sorted(known, key=lambda kv: ORDER.index(kv[0]) if kv[0] in ORDER else len(ORDER))


def version_line(nodes: Mapping[str, Any], names: list[str], text: Any, mono: Any) -> str:
    """'python 3.11.7 · torch 2.13.0 (node0, node1) / 2.12.0 (node2) · …': each fact once
    when every node agrees, grouped by value when they do not; all-null facts left out.
    `text` and `mono` escape plain text and values for the target format."""
    facts: list[str] = []
    for fact in ("python", "torch", "torch_cuda", "cuda", "nccl", "driver", "kernel", "os"):
        values = {n: nodes[n].get(fact) for n in names if isinstance(nodes.get(n), Mapping)}
        if all(v is None for v in values.values()):
            continue
        groups: dict[str, list[str]] = {}
        for n, v in values.items():
            groups.setdefault(fmt_value(v), []).append(n)
        if len(groups) == 1:
            facts.append(f"{text(fact)} {mono(next(iter(groups)))}")
        else:
            shown = " / ".join(f"{mono(v)} ({text(', '.join(ns))})" for v, ns in groups.items())
            facts.append(f"{text(fact)} {shown}")
    return " · ".join(facts) or NONE
