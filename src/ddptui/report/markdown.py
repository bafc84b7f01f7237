"""The report as Markdown that renders well when pasted into a GitHub issue.

It also holds the views both renderers share (html.py imports them): the node list, the
derived tables with their fallbacks for older reports, fix commands, metric series.
Every value in a report may come from a node, so everything is escaped: text with
backslashes, code with long enough backtick runs, HTML inside <details> with entities."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ddptui.diagnosis.model import majority_value, odd_nodes
from ddptui.metrics import human_bytes
from ddptui.report.svg import finite, gpu_peaks, human_rate, peak, series, text_sparkline
from ddptui.stepmeta import ORDER, TITLES

# Escapes, not literals: ruff (RUF001) flags look-alike characters such as the en dash.
NONE = "\u2013"  # an en dash: a value that is unknown or null
GLYPH = {"pass": "✅", "warn": "⚠️", "fail": "❌", "skip": "\u2796", "error": "❓"}
SEVERITY_GLYPH = {"error": "❌", "warning": "⚠️", "info": "\u2139\ufe0f"}
COMPACT_NODES = 8  # wider clusters get glyph-only cells and compact skew/env tables
CELL_CHARS = 48
LOG_LINE_CHARS = 400
MD_TAIL_LINES = 30
MD_RANK_ROWS = 16
MD_LOG_NODES = 8  # nodes whose log excerpts and tail the Markdown carries

# --------------------------------------------------------------------------- shared views


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


# --------------------------------------------------------------------------- escaping

MD_SPECIAL = re.compile(r"[\\`*\[\]<|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|&(?=#?\w+;)")


def esc(text: Any) -> str:
    """Plain text that Markdown (and a GitHub table cell) shows literally, on one line.
    Underscores inside words and a lone `>` or `&` cannot start markup, so they stay."""
    return MD_SPECIAL.sub(lambda m: "\\" + m.group(0), re.sub(r"\s+", " ", str(text)))


def code(text: Any) -> str:
    """An inline code span no backtick inside can close; safe in a table cell too."""
    body = " ".join(str(text).split()).replace("|", "\\|")
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    tick = "`" * (longest + 1)
    pad = " " if body.startswith("`") or body.endswith("`") or not body.strip() else ""
    return f"{tick}{pad}{body}{pad}{tick}"


def prose(text: Any) -> str:
    """Text whose single-backtick spans are code (as findings write commands)."""
    text = " ".join(str(text or "").split())
    out, last = [], 0
    for m in CODE_SPAN.finditer(text):
        out += [esc(text[last : m.start()]), code(m.group(1))]
        last = m.end()
    return "".join([*out, esc(text[last:])])


CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|[\x00-\x08\x0b-\x1f\x7f]")


def clean_line(line: Any, limit: int = LOG_LINE_CHARS) -> str:
    """A log line without terminal colour codes or control characters, cut at `limit`."""
    text = CONTROL.sub("", str(line))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def marks(excerpt: Mapping[str, Any]) -> set[int]:
    """Indices of the lines in an excerpt that its finding cites (`marked`)."""
    raw = excerpt.get("marked")
    return {i for i in raw if isinstance(i, int)} if isinstance(raw, list) else set()


def marked_lines(excerpt: Mapping[str, Any]) -> list[str]:
    """An excerpt's lines for a code block, the cited ones led by ▶ (the others by two
    spaces, so the text lines up); unmarked excerpts (older reports) stay as they are."""
    lines = [str(x) for x in excerpt.get("lines") or []]
    hit = marks(excerpt)
    if not hit:
        return lines
    return [("▶ " if i in hit else "  ") + line for i, line in enumerate(lines)]


def fence(lines: Iterable[Any], info: str = "text") -> list[str]:
    """A fenced block longer than any backtick run inside, so no line can close it."""
    body = [clean_line(line) for line in lines]
    longest = max((len(m) for line in body for m in re.findall(r"`+", line)), default=0)
    tick = "`" * max(3, longest + 1)
    return [tick + info, *body, tick]


def details(summary: str, body: list[str], *, open_: bool = False) -> list[str]:
    """A <details> block; `summary` is plain text (escaped as HTML here)."""
    tag = "<details open>" if open_ else "<details>"
    while body and not body[-1]:
        body = body[:-1]
    return [f"{tag}<summary>{html.escape(summary)}</summary>", "", *body, "", "</details>", ""]


def table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return [*out, ""]


# --------------------------------------------------------------------------- sections


def render_markdown(report: dict[str, Any]) -> str:
    names = node_names(report)
    tables = report_tables(report)
    out = [*_header(report, names), *_first_failure(report), *_steps(report, names)]
    out += _skew(tables.get("skew") or [], names)
    if has_step(report, "env") or "env_diff" in (report.get("tables") or {}):
        out += _env(tables.get("env_diff") or [], names)
    if isinstance(tables.get("allreduce"), Mapping):
        out += _allreduce(tables["allreduce"])
    out += [*_findings(report), *_metrics(report, names), *_logs(report, names)]
    out += _versions(report, names)
    sid = session_id(report)
    tail = f" · session {code(sid)}" if sid else ""
    out.append(f"<sub>Generated by ddptui {esc(report.get('ddptui_version', '?'))}{tail}</sub>")
    return "\n".join(out).rstrip("\n") + "\n"


def _header(report: Mapping[str, Any], names: list[str]) -> list[str]:
    verdict = str(report.get("verdict") or "?")
    name = report.get("cluster") or report.get("config") or "cluster"
    meta = [f"{len(names)} node{'s' if len(names) != 1 else ''}"]
    master = report.get("master")
    if isinstance(master, Mapping) and master.get("addr"):
        where = f"{master.get('addr')}:{master.get('port')}"
        meta.append(f"master {code(where)}")
    when = f"{esc(report.get('started_at') or '?')} → {esc(report.get('finished_at') or '?')}"
    total = finite((report.get("timings") or {}).get("total_s"))
    meta.append(when + (f" ({total:.1f} s)" if total is not None else ""))
    meta.append(f"config {code(report.get('config') or '?')}")
    return [
        f"# ddptui {esc(report.get('command') or 'check')}: {esc(name)} — "
        f"{GLYPH.get(verdict, '')} {esc(verdict.upper())}",
        "",
        " · ".join(meta),
        "",
    ]


def _fix_block(fix: str) -> list[str]:
    out = [f"**Fix:** {prose(fix)}" if fix else "**Fix:** none recorded; see the step below.", ""]
    commands = fix_commands(fix)
    if commands:
        out += [*fence(commands, "sh"), ""]
    return out


def _first_failure(report: Mapping[str, Any]) -> list[str]:
    first = report.get("first_failure")
    steps = {str(s.get("id")): s for s in steps_of(report)}
    if isinstance(first, Mapping):
        step = steps.get(str(first.get("step")), {"id": first.get("step")})
        nodes = ", ".join(esc(n) for n in first.get("nodes") or []) or NONE
        finding = f"{code(first['finding'])} " if first.get("finding") else ""
        return [
            f"## ❌ First failure: {code(first.get('step'))} — {esc(step_title(step))}",
            "",
            f"{finding}on **{nodes}**{_place(first)}: {prose(first.get('summary', ''))}",
            "",
            *_fix_block(str(first.get("fix") or "")),
        ]
    bad = [s for s in steps.values() if s.get("status") not in ("pass", "skip")]
    if not bad:
        return ["**✅ Every step passed.**", ""]
    items = [f"- {_status(s)}: {code(s.get('id'))} {esc(step_title(s))}" for s in bad]
    return ["**No step failed**, but:", "", *items, ""]


def place(item: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """A finding's (or first failure's) global rank and place in code, when known."""
    rank, where = item.get("rank"), item.get("where")
    rank_text = str(rank) if isinstance(rank, int) and not isinstance(rank, bool) else None
    return rank_text, (str(where) if where else None)


def _place(item: Mapping[str, Any]) -> str:
    rank, where = place(item)
    parts = ([f"rank {esc(rank)}"] if rank else []) + ([f"at {code(where)}"] if where else [])
    return f" ({', '.join(parts)})" if parts else ""


def _status(result: Mapping[str, Any]) -> str:
    status = str(result.get("status"))
    return f"{GLYPH.get(status, '')} {esc(status)}"


def _steps(report: Mapping[str, Any], names: list[str]) -> list[str]:
    compact = len(names) > COMPACT_NODES
    prefix = name_prefix(names) if compact else ""
    head = ["step", "status", "time", *(esc(n[len(prefix) :]) for n in names)]
    rows, more = [], []
    for step in steps_of(report):
        duration = finite(step.get("duration_s"))
        time = f"{duration:.1f} s" if duration is not None else NONE
        cells = [code(step.get("id")), _status(step), time]
        for n in names:
            r = node_result(step, n)
            if r is None:
                cells.append(NONE)
                continue
            glyph = GLYPH.get(str(r.get("status")), esc(r.get("status")))
            summary = "" if compact else esc(shorten(str(r.get("summary") or ""), CELL_CHARS))
            cells.append(f"{glyph} {summary}".strip())
        rows.append(cells)
        if compact:
            more += _step_details(step, names)
    legend = " · ".join(f"{g} {s}" for s, g in GLYPH.items())
    if prefix:
        legend += f" · columns are node names without {code(prefix)}"
    return ["## Steps", "", *table(head, rows), legend, "", *more]


def name_prefix(names: Sequence[str]) -> str:
    """The prefix every node name shares, up to its last separator ("gpu-node-")."""
    if len(names) < 2:
        return ""
    first, last = min(names), max(names)
    size = next(
        (i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b), len(first)
    )
    cut = max(first.rfind(sep, 0, size) for sep in "-_.") + 1
    return first[:cut] if all(len(n) > cut for n in names) else ""


def _step_details(step: Mapping[str, Any], names: list[str]) -> list[str]:
    """A wide cluster's per-node summaries for one step: the nodes not passing in full,
    the passing ones by name (an issue body holds at most 65536 characters)."""
    known = [(n, r) for n in names if (r := node_result(step, n)) is not None]
    bad = [(n, r) for n, r in known if r.get("status") not in ("pass", "skip")]
    rows = [[esc(n), _status(r), esc(r.get("summary") or "")] for n, r in bad]
    body = table(["node", "status", "summary"], rows) if rows else []
    passing = [esc(n) for n, r in known if r.get("status") in ("pass", "skip")]
    if passing:
        body.append(f"Passing ({len(passing)}): {', '.join(passing)}.")
    summary = (
        f"{step.get('id')}: {step.get('status')} — {len(bad)} of {len(known)} nodes not passing"
    )
    return details(summary, body)


def _skew(rows: Sequence[Any], names: list[str]) -> list[str]:
    rows = [r for r in rows if isinstance(r, Mapping) and isinstance(r.get("values"), Mapping)]
    if not rows:
        return []
    odd_facts = [r for r in rows if r.get("odd")]
    intro = "; ".join(f"⚠️ {differ(r, esc, code)}" for r in odd_facts) + "."
    if not odd_facts:
        intro = f"All nodes agree on all {len(rows)} facts."
    out = ["## Inventory skew", "", intro, ""]
    items = [(r.get("fact"), r["values"], list(r.get("odd") or [])) for r in rows]
    matrix = _matrix("fact", items, names, lambda v: esc(fmt_value(v)))
    if not odd_facts:  # nothing to point at: keep the matrix out of the way
        return out + details("Inventory matrix", matrix)
    return out + matrix


def differ(row: Mapping[str, Any], text: Any, mono: Any) -> str:
    """'node2 differs on `torch`' (text and mono escape for the target format)."""
    odd = list(row.get("odd") or [])
    return f"{text(', '.join(odd))} differ{'s' if len(odd) == 1 else ''} on {mono(row.get('fact'))}"


def _matrix(head: str, items: Sequence[Item], names: list[str], show: Any) -> list[str]:
    """Rows of facts by node columns, the odd nodes' cells marked; a wide cluster gets
    `fact | most nodes | differs` instead, which stays readable at 32 nodes."""
    if len(names) > COMPACT_NODES:
        body = []
        for label, values, odd in items:
            usual = show(usual_value(values, odd)) if len(odd) < len(values) else NONE
            differs = ", ".join(f"**⚠ {esc(n)}**: {show(values.get(n))}" for n in odd)
            body.append([code(label), usual, differs or NONE])
        return table([head, "most nodes", "differs"], body)
    body = []
    for label, values, odd in items:
        cells = [code(label)]
        for n in names:
            value = show(values[n]) if n in values else NONE
            cells.append(f"**⚠ {value}**" if n in odd else value)
        body.append(cells)
    return table([head, *(esc(n) for n in names)], body)


def env_value(value: Any) -> str:
    return "*(unset)*" if value is None else code(value)


def _env(rows: Sequence[Any], names: list[str]) -> list[str]:
    out = ["## Launch environment differences", ""]
    items = env_items(rows, names)
    if not items:
        return [*out, "The audited launch variables agree across nodes.", ""]
    out += ["Variables that differ across nodes (values were redacted on the nodes).", ""]
    return out + _matrix("variable", items, names, env_value)


def rank_note(row: Mapping[str, Any]) -> str:
    return "straggler" if row.get("straggler") else "slowest" if row.get("slowest") else ""


def _allreduce(ar: Mapping[str, Any]) -> list[str]:
    seconds = finite(ar.get("seconds"))
    meta = [f"backend {code(ar.get('backend') or '?')}"]
    meta.append(f"world size {esc(fmt_value(ar.get('world_size')))}")
    meta += [f"{seconds:.1f} s"] if seconds is not None else []
    meta += ["**timed out**"] if ar.get("timed_out") else []
    out = ["## Allreduce bandwidth", "", " · ".join(meta), ""]
    rows = rank_rows(ar)
    if not rows:
        return [*out, "No rank reported a bandwidth.", ""]
    head = ["rank", "node", "busbw GB/s", "algbw GB/s", "link", ""]
    ranks = table(head, [_rank_cells(r) for r in rows])
    if len(rows) > MD_RANK_ROWS:
        ranks = details(f"All {len(rows)} ranks", ranks)
    sweep = sweep_rows(ar)
    if sweep:
        ranks += ["Sweep (the slowest rank per size, as nccl-tests reports it):", ""]
        ranks += table(SWEEP_HEAD, sweep)
    return [*out, busbw_line(rows), "", *ranks]


def _rank_cells(row: Mapping[str, Any]) -> list[str]:
    note = rank_note(row)
    busbw, algbw = finite(row.get("busbw_gbps")), finite(row.get("algbw_gbps"))
    frac, link = finite(row.get("link_fraction")), finite(row.get("link_gbps"))
    return [
        esc(fmt_value(row.get("rank"))),
        esc(fmt_value(row.get("node"))),
        (BUSBW_NA if row.get("one_rank") else NONE)
        if busbw is None
        else f"**{busbw:.3f}**"
        if note
        else f"{busbw:.3f}",
        NONE if algbw is None else f"{algbw:.3f}",
        f"{frac:.0%} of {link:g} Gb/s" if frac is not None and link else NONE,
        {"straggler": "**🐢 straggler**", "slowest": "slowest"}.get(note, ""),
    ]


def _findings(report: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for step in steps_of(report):
        for f in step.get("findings") or []:
            if not isinstance(f, Mapping):
                continue
            severity = str(f.get("severity") or "info")
            nodes = ", ".join(esc(n) for n in f.get("nodes") or []) or NONE
            out += [
                f"### {SEVERITY_GLYPH.get(severity, '')} {code(f.get('id'))} · "
                f"{code(step.get('id'))} · {esc(severity)}",
                "",
                f"**{prose(f.get('summary', ''))}**" if f.get("summary") else "",
                "",
                f"- **Nodes:** {nodes}{_place(f)}",
                f"- **Cause:** {prose(f.get('cause', ''))}",
                "",
                *_fix_block(str(f.get("fix") or "")),
            ]
            evidence = [str(e) for e in f.get("evidence") or []]
            if evidence:
                n = len(evidence)
                out += details(f"Evidence ({n} line{'s' if n != 1 else ''})", fence(evidence))
    return ["## Findings", "", *out] if out else []


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


def _metrics(report: Mapping[str, Any], names: list[str]) -> list[str]:
    body = []
    for n, samples in metric_nodes(report, names):
        s = series(samples)
        top = peak(s["cpu"])
        cpu = (
            f"{code(text_sparkline(s['cpu'], ceiling=100))} max {top:.0f}%"
            if top is not None
            else NONE
        )
        gpu = "no GPU"
        if s["gpus"]:  # the mean over the node's GPUs: an idle one pulls it down
            util = [
                [v for v in col if v is not None] for col in zip(*s["gpus"].values(), strict=True)
            ]
            mean = [sum(col) / len(col) if col else None for col in util]
            count = len(s["gpus"])
            gpu = (
                f"{count} GPU{'s' if count != 1 else ''} {code(text_sparkline(mean, ceiling=100))}"
            )
            gpu += " mean util" if count > 1 else " util"
            gpu += "".join(f", {esc(fact)}" for fact in gpu_facts(s))
        nic = NONE
        if s["nic"]:
            name, values = s["nic"]
            nic = f"{esc(name)} {code(text_sparkline(values))} max {human_rate(peak(values))}"
        body.append([esc(n), cpu, gpu, nic])
    if not body:
        return []
    interval = finite((report.get("metrics") or {}).get("interval_s"))
    every = f", sampled every {interval:g} s" if interval else ""
    head = ["node", "CPU", "GPU", "busiest NIC (rx+tx)"]
    return ["## Live metrics", "", f"Over the session{every}.", "", *table(head, body)]


def _logs(report: Mapping[str, Any], names: list[str]) -> list[str]:
    logs = report.get("logs")
    if not isinstance(logs, Mapping) or not logs:
        return []
    ar = next((s for s in steps_of(report) if s.get("id") == "allreduce"), {})
    out: list[str] = []
    quiet: list[str] = []
    shown = 0
    for n in [*names, *(str(k) for k in logs if str(k) not in names)]:
        log = logs.get(n)
        if not isinstance(log, Mapping):
            continue
        total = log.get("lines_total") or len(log.get("tail") or [])
        excerpts = [e for e in log.get("excerpts") or [] if isinstance(e, Mapping)]
        status = (node_result(ar, n) or {}).get("status")
        if (not excerpts and status in ("pass", "skip", None)) or shown >= MD_LOG_NODES:
            quiet.append(f"{esc(n)} ({esc(total)} lines)")
            continue
        shown += 1
        body = [
            line
            for e in excerpts
            for line in (
                f"{code(e.get('finding'))} ({esc(e.get('step'))}), "
                f"from line {esc(e.get('first_line'))}{' (▶ the line it cites)' if marks(e) else ''}:",
                "",
                *fence(marked_lines(e)),
                "",
            )
        ]
        tail = [str(line) for line in log.get("tail") or []][-MD_TAIL_LINES:]
        if tail:
            body += details(f"Last {len(tail)} of {total} lines", fence(tail))
        count = f"{len(excerpts)} excerpt{'s' if len(excerpts) != 1 else ''}, " if excerpts else ""
        out += details(f"{n}: {count}{total} lines", body)
    if quiet:
        out.append(f"Not shown here (see the HTML or JSON report): {', '.join(quiet)}.")
        out.append("")
    return ["## Logs", "", "Every line was redacted on its node.", "", *out]


def _versions(report: Mapping[str, Any], names: list[str]) -> list[str]:
    out: list[str] = []
    versions = report.get("versions")
    if isinstance(versions, Mapping):
        out.append(
            f"- **ddptui** {esc(versions.get('ddptui') or report.get('ddptui_version') or '?')}, "
            f"login Python {esc(versions.get('login_python') or '?')}"
        )
        nodes = versions.get("nodes")
        if isinstance(nodes, Mapping) and nodes:
            out.append(f"- **Nodes:** {version_line(nodes, names, esc, code)}")
    timings = report.get("timings")
    parts = [f"{esc(k)} {v:.1f} s" for k, v in step_durations(report)]
    total = finite((timings or {}).get("total_s")) if isinstance(timings, Mapping) else None
    if total is not None:
        parts.append(f"**total {total:.1f} s**")
    if parts:
        out.append(f"- **Timings:** {' · '.join(parts)}")
    return ["## Versions and timings", "", *out, ""] if out else []


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
