"""The report as one self-contained HTML file: inline CSS and SVG, no script, nothing
fetched from outside, readable on screen and on paper. Same content as the Markdown
(whose shared views it uses), plus per-node metric sparklines and, from the TUI, a
screenshot of the screen at export time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from ddptui.glyphs import GLYPH, STATUSES
from ddptui.report.first import FirstFailure
from ddptui.report.screenshot import clean_screenshot
from ddptui.report.svg import finite, human_rate, peak, series, sparkline
from ddptui.report.views import (
    BUSBW_NA,
    CODE_SPAN,
    COMPACT_NODES,
    NONE,
    SWEEP_HEAD,
    Item,
    busbw_line,
    clean_line,
    differ,
    env_items,
    failing_first,
    fix_commands,
    fmt_value,
    gpu_facts,
    has_step,
    marks,
    metric_nodes,
    node_names,
    node_result,
    place,
    rank_note,
    rank_rows,
    report_tables,
    session_id,
    shorten,
    step_durations,
    step_title,
    steps_of,
    sweep_rows,
    usual_value,
    version_line,
)

__all__ = ["clean_screenshot", "render_html"]  # clean_screenshot: re-exported for callers

CELL_CHARS = 90
MANY_RANKS = 16  # more ranks than this: the table is collapsed
SEVERITY_CLASS = {"error": "fail", "warning": "warn", "info": "info"}
GPU_COLOURS = ("#8250df", "#bf3989", "#0969da", "#1a7f37", "#9a6700", "#cf222e")

CSS = """
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--soft:#f6f8fa;
--pass:#1a7f37;--pass-bg:#dafbe1;--warn:#9a6700;--warn-bg:#fff8c5;--fail:#cf222e;
--fail-bg:#ffebe9;--error:#8250df;--error-bg:#fbefff;--skip:#59636e;--skip-bg:#f6f8fa}
*{box-sizing:border-box}
body{font:14px/1.5 system-ui,"Segoe UI","DejaVu Sans",sans-serif;color:var(--fg);
background:#fff;max-width:1180px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h1 .badge{font-size:15px}
h2{font-size:18px;border-bottom:1px solid var(--line);padding-bottom:4px;margin:28px 0 10px}
h3{font-size:15px;margin:0 0 6px}
.meta,.note{color:var(--muted)}nav{margin:8px 0 0;font-size:13px}
nav a{color:#0969da;margin-right:12px;text-decoration:none}
code,pre{font-family:"DejaVu Sans Mono",ui-monospace,Menlo,Consolas,monospace}
code{font-size:12.5px;background:var(--soft);padding:0 4px;border-radius:4px}
pre{font-size:12px;line-height:1.45;background:var(--soft);border:1px solid var(--line);
border-radius:6px;padding:8px 10px;margin:6px 0;white-space:pre-wrap;overflow-wrap:anywhere}
pre mark{background:var(--warn-bg);color:inherit;font-weight:700;display:inline-block;width:100%;
box-shadow:inset 3px 0 0 var(--warn)}
pre.cmd{border-left:4px solid var(--fg);background:#fff;font-size:13px}
.badge{display:inline-block;padding:0 10px;border-radius:12px;font-weight:600;
vertical-align:middle}
.pass{--c:var(--pass);--b:var(--pass-bg)}.warn,.warning{--c:var(--warn);--b:var(--warn-bg)}
.fail{--c:var(--fail);--b:var(--fail-bg)}.error{--c:var(--error);--b:var(--error-bg)}
.skip,.info{--c:var(--skip);--b:var(--skip-bg)}
.badge,td.st{background:var(--b);color:var(--c)}td.st .s{color:var(--fg)}
.banner{border:1px solid var(--c);border-left:8px solid var(--c);background:var(--b);
border-radius:6px;padding:12px 16px;margin:16px 0}
.banner h2{border:0;margin:0 0 6px;padding:0;color:var(--c)}.banner p{margin:4px 0}
.scroll{overflow-x:auto}
table{border-collapse:collapse;margin:6px 0;font-size:13px}
th,td{border:1px solid var(--line);padding:4px 8px;text-align:left;vertical-align:top}
th{background:var(--soft);font-weight:600}
td.st{min-width:2.2em}td.st .g{font-weight:700}
table.compact th.node{writing-mode:vertical-rl;transform:rotate(180deg);padding:6px 2px}
table.compact td.st{text-align:center;padding:4px 2px}
td.odd{background:var(--warn-bg);color:var(--warn);font-weight:700;
box-shadow:inset 0 0 0 2px var(--warn)}
td.null{color:var(--muted)}.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.straggler td{background:var(--fail-bg)}tr.slowest td:first-child{border-left:3px solid var(--warn)}
.bar{display:inline-block;height:9px;background:#0969da;border-radius:2px;margin-left:6px;
vertical-align:middle}
.finding{border:1px solid var(--line);border-left:5px solid var(--c);border-radius:6px;
padding:10px 14px;margin:10px 0}
.finding dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:6px 0}
.finding dt{font-weight:600;color:var(--muted)}.finding dd{margin:0}
details{margin:6px 0}summary{cursor:pointer;color:var(--muted);font-weight:600}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(360px,1fr));gap:12px}
.card{border:1px solid var(--line);border-radius:6px;padding:8px 12px}
.card h3{font-size:14px}
.spark-row{display:grid;grid-template-columns:96px 140px 1fr;align-items:center;gap:8px;
font-size:12px;white-space:nowrap}
.spark-row>span:first-child{overflow:hidden;text-overflow:ellipsis}
.spark-row .v{color:var(--muted);font-variant-numeric:tabular-nums}
.card .gpus{font-size:12px;color:var(--muted);margin:2px 0 4px}
svg.spark{display:block}
.shot{margin:0;max-width:1000px}
.shot svg{display:block;width:100%;height:auto}
footer{margin-top:32px;color:var(--muted);font-size:12px}
@media print{
@page{margin:12mm}
*{-webkit-print-color-adjust:exact;print-color-adjust:exact}
body{max-width:none;padding:0;font-size:11px}nav{display:none}
.scroll{overflow:visible}pre{white-space:pre-wrap;overflow-wrap:anywhere}
h2{break-after:avoid}.banner,.finding,.card,tr,figure,.scroll{break-inside:avoid}
.scroll,pre{break-before:avoid}
.cards{grid-template-columns:repeat(2,1fr)}
}
"""


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _code(value: Any) -> str:
    return f"<code>{_e(value)}</code>"


def _prose(text: Any) -> str:
    """Escaped text whose backtick spans become <code>."""
    text = str(text or "")
    out, last = [], 0
    for m in CODE_SPAN.finditer(text):
        out += [_e(text[last : m.start()]), f"<code>{_e(m.group(1))}</code>"]
        last = m.end()
    return "".join([*out, _e(text[last:])])


def _pre(lines: Sequence[Any], cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return f"<pre{attr}>" + _e("\n".join(clean_line(x, 4000) for x in lines)) + "</pre>"


def _pre_marked(excerpt: Mapping[str, Any]) -> str:
    """An excerpt's lines with the ones its finding cites in <mark>."""
    hit = marks(excerpt)
    lines = [_e(clean_line(x, 4000)) for x in excerpt.get("lines") or []]
    return (
        "<pre>"
        + "\n".join(f"<mark>{line}</mark>" if i in hit else line for i, line in enumerate(lines))
        + "</pre>"
    )


def _place(item: Mapping[str, Any]) -> str:
    rank, where = place(item)
    parts = ([f"rank {_e(rank)}"] if rank else []) + ([f"at {_code(where)}"] if where else [])
    return f" ({', '.join(parts)})" if parts else ""


def _fix(fix: str) -> str:
    commands = fix_commands(fix)
    text = f"{_prose(fix)}" if fix else "none recorded; see the step below."
    return text + (_pre(commands, "cmd") if commands else "")


def _table(head: Sequence[str], rows: Sequence[str], cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return (
        f'<div class="scroll"><table{attr}><thead><tr>{"".join(head)}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def render_html(report: dict[str, Any], screenshot_svg: str | None = None) -> str:
    names = node_names(report)
    tables = report_tables(report)
    name = report.get("cluster") or report.get("config") or "cluster"
    sections: list[tuple[str, str, str]] = [("steps", "Steps", _steps(report, names))]
    sections.append(("skew", "Inventory skew", _skew(tables.get("skew") or [], names)))
    if has_step(report, "env") or "env_diff" in (report.get("tables") or {}):
        sections.append(("env", "Launch environment", _env(tables.get("env_diff") or [], names)))
    if isinstance(tables.get("allreduce"), Mapping):
        sections.append(("allreduce", "Allreduce bandwidth", _allreduce(tables["allreduce"])))
    sections.append(("findings", "Findings", _findings(report)))
    sections.append(("metrics", "Live metrics", _metrics(report, names)))
    sections.append(("logs", "Logs", _logs(report, names)))
    sections.append(("versions", "Versions and timings", _versions(report, names)))
    shot = clean_screenshot(screenshot_svg) if screenshot_svg else ""
    if shot:
        body = f'<figure class="shot">{shot}</figure>'
        sections.append(("screen", "Screen at export time", body))
    sections = [s for s in sections if s[2]]
    nav = "".join(f'<a href="#{i}">{_e(t)}</a>' for i, t, _ in sections)
    out = [
        '<!doctype html><html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>ddptui {_e(report.get('command') or 'check')}: {_e(name)} — "
        f"{_e(str(report.get('verdict') or '?').upper())}</title>",
        f"<style>{CSS}</style></head><body>",
        _header(report, names, name),
        f"<nav>{nav}</nav>",
        _banner(report),
    ]
    out += [f'<section id="{i}"><h2>{_e(t)}</h2>{body}</section>' for i, t, body in sections]
    sid = session_id(report)
    sid = f" · session <code>{_e(sid)}</code>" if sid else ""
    out.append(f"<footer>Generated by ddptui {_e(report.get('ddptui_version', '?'))}{sid}</footer>")
    out.append("</body></html>\n")
    return "\n".join(out)


def _header(report: Mapping[str, Any], names: list[str], name: Any) -> str:
    verdict = str(report.get("verdict") or "?")
    meta = [f"{len(names)} node{'s' if len(names) != 1 else ''}"]
    master = report.get("master")
    if isinstance(master, Mapping) and master.get("addr"):
        meta.append(f"master <code>{_e(master.get('addr'))}:{_e(master.get('port'))}</code>")
    total = finite((report.get("timings") or {}).get("total_s"))
    when = f"{_e(report.get('started_at') or '?')} → {_e(report.get('finished_at') or '?')}"
    meta.append(when + (f" ({total:.1f} s)" if total is not None else ""))
    if report.get("config"):  # diagnose on local files has none: no "config ?"
        meta.append(f"config <code>{_e(report.get('config'))}</code>")
    return (
        f"<header><h1>ddptui {_e(report.get('command') or 'check')}: {_e(name)} "
        f'<span class="badge {_e(verdict)}">'
        f"{_e(GLYPH.get(verdict, ''))} {_e(verdict.upper())}</span></h1>"
        f'<div class="meta">{" · ".join(meta)}</div></header>'
    )


def _banner(report: Mapping[str, Any]) -> str:
    first = FirstFailure.from_document(report)
    steps = {str(s.get("id")): s for s in steps_of(report)}
    if first is not None:
        step = steps.get(first.step, {"id": first.step})
        finding = f"<code>{_e(first.finding)}</code> " if first.finding else ""
        # a finding that names no node (a node that never launched, a shared file) says none
        where = f"{finding}on <b>{_e(', '.join(first.nodes))}</b>" if first.nodes else finding.rstrip()
        return (
            f'<div class="banner fail" role="alert"><h2>{GLYPH["fail"]} First failure: <code>'
            f"{_e(first.step)}</code> — {_e(step_title(step))}</h2>"
            f"<p>{where}{_place(first.to_dict())}: {_prose(first.summary)}</p>"
            f"<p><b>Fix:</b> {_fix(first.fix)}</p></div>"
        )
    bad = [s for s in steps.values() if s.get("status") not in ("pass", "skip")]
    if not bad:
        return f'<div class="banner pass"><h2>{GLYPH["pass"]} Every step passed.</h2></div>'
    items = "".join(
        f"<li><code>{_e(s.get('id'))}</code> {_e(s.get('status'))}: {_e(step_title(s))}</li>"
        for s in bad
    )
    return f'<div class="banner warn"><h2>No step failed, but:</h2><ul>{items}</ul></div>'


def _st(result: Mapping[str, Any] | None, compact: bool) -> str:
    if result is None:
        return f'<td class="st skip">{NONE}</td>'
    status = str(result.get("status"))
    summary = str(result.get("summary") or "")
    glyph = f'<span class="g">{_e(GLYPH.get(status, status))}</span>'
    text = "" if compact else f' <span class="s">{_e(shorten(summary, CELL_CHARS))}</span>'
    return f'<td class="st {_e(status)}" title="{_e(status)}: {_e(summary)}">{glyph}{text}</td>'


def _steps(report: Mapping[str, Any], names: list[str]) -> str:
    compact = len(names) > COMPACT_NODES
    names = failing_first(report, names) if compact else names
    head = ["<th>step</th>", "<th>status</th>", "<th>time</th>"]
    head += [f'<th class="node">{_e(n)}</th>' for n in names]
    rows, more = [], []
    for step in steps_of(report):
        status = str(step.get("status"))
        duration = finite(step.get("duration_s"))
        cells = [
            f'<td title="{_e(step_title(step))}"><code>{_e(step.get("id"))}</code></td>',
            f'<td class="st {_e(status)}"><span class="g">{_e(GLYPH.get(status, ""))}</span> {_e(status)}</td>',
            f'<td class="num">{f"{duration:.1f} s" if duration is not None else NONE}</td>',
            *(_st(node_result(step, n), compact) for n in names),
        ]
        rows.append(f"<tr>{''.join(cells)}</tr>")
        if compact:
            more.append(_step_details(step, names))
    legend = " · ".join(f"{_e(GLYPH[s])} {s}" for s in STATUSES)
    table = _table(head, rows, "steps compact" if compact else "steps")
    return table + f'<p class="note">{legend}</p>' + "".join(more)


def _step_details(step: Mapping[str, Any], names: list[str]) -> str:
    known = [(n, r) for n in names if (r := node_result(step, n)) is not None]
    bad = [(n, r) for n, r in known if r.get("status") not in ("pass", "skip")]
    flagged = {n for n, _ in bad}
    ordered = bad + [(n, r) for n, r in known if n not in flagged]
    rows = [
        f"<tr><td>{_e(n)}</td>{_st(r, compact=True)}<td>{_e(r.get('summary') or '')}</td></tr>"
        for n, r in ordered
    ]
    return (
        f"<details{' open' if 0 < len(bad) <= COMPACT_NODES else ''}><summary><code>{_e(step.get('id'))}</code> "
        f"{_e(step.get('status'))}: {len(bad)} of {len(known)} nodes not passing</summary>"
        + _table(["<th>node</th><th>status</th><th>summary</th>"], rows)
        + "</details>"
    )


def _skew_value(value: Any) -> str:
    return NONE if value is None else _e(fmt_value(value))


def _env_value(value: Any) -> str:
    return "(unset)" if value is None else f"<code>{_e(value)}</code>"


def _matrix(head: str, items: Sequence[Item], names: list[str], show: Any) -> str:
    """Facts by node columns with the odd nodes' cells marked; a wide cluster gets
    `fact | most nodes | differs` instead (as in the Markdown)."""
    if len(names) > COMPACT_NODES:
        rows = []
        for label, values, odd in items:
            usual = show(usual_value(values, odd)) if len(odd) < len(values) else NONE
            differs = ", ".join(f"<b>⚠ {_e(n)}</b>: {show(values.get(n))}" for n in odd)
            cls = ' class="odd"' if odd else ""
            rows.append(
                f"<tr><th><code>{_e(label)}</code></th><td>{usual}</td>"
                f"<td{cls}>{differs or NONE}</td></tr>"
            )
        return _table([f"<th>{_e(head)}</th><th>most nodes</th><th>differs</th>"], rows)
    rows = []
    for label, values, odd in items:
        cells = []
        for n in names:
            value = values.get(n)
            cls = " ".join(
                c for c in ("null" if value is None else "", "odd" if n in odd else "") if c
            )
            attr = f' class="{cls}"' if cls else ""
            cells.append(f"<td{attr}>{'⚠ ' if n in odd else ''}{show(value)}</td>")
        rows.append(f"<tr><th><code>{_e(label)}</code></th>{''.join(cells)}</tr>")
    head_cells = [f"<th>{_e(head)}</th>", *(f'<th class="node">{_e(n)}</th>' for n in names)]
    return _table(head_cells, rows)


def _skew(rows: Sequence[Any], names: list[str]) -> str:
    rows = [r for r in rows if isinstance(r, Mapping) and isinstance(r.get("values"), Mapping)]
    if not rows:
        return ""
    odd_facts = [r for r in rows if r.get("odd")]
    intro = "; ".join(f"⚠ {differ(r, _e, _code)}" for r in odd_facts) + "."
    if not odd_facts:
        intro = f"All nodes agree on all {len(rows)} facts."
    items = [(r.get("fact"), r["values"], list(r.get("odd") or [])) for r in rows]
    table = _matrix("fact", items, names, _skew_value)
    if not odd_facts:
        table = f"<details><summary>Inventory matrix</summary>{table}</details>"
    return f"<p>{intro}</p>{table}"


def _env(rows: Sequence[Any], names: list[str]) -> str:
    items = env_items(rows, names)
    if not items:
        return "<p>The audited launch variables agree across nodes.</p>"
    note = "<p>Variables that differ across nodes (values were redacted on the nodes).</p>"
    return note + _matrix("variable", items, names, _env_value)


def _allreduce(ar: Mapping[str, Any]) -> str:
    seconds = finite(ar.get("seconds"))
    meta = [
        f"backend <code>{_e(ar.get('backend') or '?')}</code>",
        f"world size {_e(fmt_value(ar.get('world_size')))}",
        f"{seconds:.1f} s" if seconds is not None else "",
        '<b class="fail" style="color:var(--c)">timed out</b>' if ar.get("timed_out") else "",
    ]
    out = f"<p>{' · '.join(m for m in meta if m)}</p>"
    rows = rank_rows(ar)
    if not rows:
        return out + "<p>No rank reported a bandwidth.</p>"
    top = max((finite(r.get("busbw_gbps")) or 0.0 for r in rows), default=0.0) or 1.0
    body = []
    for r in rows:
        note = rank_note(r)
        busbw, algbw = finite(r.get("busbw_gbps")), finite(r.get("algbw_gbps"))
        frac, link = finite(r.get("link_fraction")), finite(r.get("link_gbps"))
        na = BUSBW_NA if r.get("one_rank") else NONE
        bar = (
            f'<span class="bar" style="width:{80 * busbw / top:.0f}px"></span>'
            if busbw is not None
            else ""
        )
        body.append(
            f'<tr class="{note}"><td class="num">{_e(fmt_value(r.get("rank")))}</td>'
            f"<td>{_e(fmt_value(r.get('node')))}</td>"
            f'<td class="num">{f"{busbw:.3f}" if busbw is not None else na}{bar}</td>'
            f'<td class="num">{f"{algbw:.3f}" if algbw is not None else NONE}</td>'
            f"<td>{f'{frac:.0%} of {link:g} Gb/s' if frac is not None and link else NONE}</td>"
            f"<td>{'<b>straggler</b>' if note == 'straggler' else note}</td></tr>"
        )
    head = [f"<th>{h}</th>" for h in ("rank", "node", "busbw GB/s", "algbw GB/s", "link", "")]
    table = _table(head, body)
    if len(rows) > MANY_RANKS:
        flagged = [
            f"rank {_e(r.get('rank'))} on {_e(r.get('node'))}: {rank_note(r)}"
            for r in rows
            if rank_note(r)
        ]
        table = (
            f"<p>{'; '.join(flagged)}.</p>" if flagged else ""
        ) + f"<details><summary>All {len(rows)} ranks</summary>{table}</details>"
    sweep = sweep_rows(ar)
    if sweep:
        cells = ["".join(f'<td class="num">{_e(c)}</td>' for c in row) for row in sweep]
        table += "<p>Sweep (the slowest rank per size, as nccl-tests reports it):</p>" + _table(
            [f"<th>{h}</th>" for h in SWEEP_HEAD], [f"<tr>{c}</tr>" for c in cells]
        )
    return out + f"<p>{_e(busbw_line(rows))}</p>" + table


def _findings(report: Mapping[str, Any]) -> str:
    out = []
    for step in steps_of(report):
        for f in step.get("findings") or []:
            if not isinstance(f, Mapping):
                continue
            severity = str(f.get("severity") or "info")
            evidence = [str(x) for x in f.get("evidence") or []]
            opened = " open" if severity != "info" else ""
            cls = SEVERITY_CLASS.get(severity, "info")
            ev = (
                f"<details class=evidence{opened}><summary>Evidence ({len(evidence)})</summary>"
                f"{_pre(evidence)}</details>"
                if evidence
                else ""
            )
            out.append(
                f'<div class="finding {cls}"><h3><span class="badge {cls}">'
                f"{_e(severity)}</span> <code>{_e(f.get('id'))}</code> "
                f"<span class=note>({_e(step.get('id'))})</span> {_prose(f.get('summary', ''))}</h3>"
                f"<dl><dt>Nodes</dt><dd>{_e(', '.join(map(str, f.get('nodes') or [])) or NONE)}"
                f"{_place(f)}</dd>"
                f"<dt>Cause</dt><dd>{_prose(f.get('cause', ''))}</dd>"
                f"<dt>Fix</dt><dd>{_fix(str(f.get('fix') or ''))}</dd></dl>{ev}</div>"
            )
    return "".join(out)


def _spark_row(label: str, values: Sequence[float | None], colour: str, *, pct: bool) -> str:
    top = peak(values)
    text = NONE if top is None else f"max {top:.0f}%" if pct else f"max {human_rate(top)}"
    chart = sparkline(
        values,
        width=140,
        height=28,
        ceiling=100 if pct else None,
        colour=colour,
        label=f"{label} {text}",
    )
    name = f'<span title="{_e(label)}">{_e(label)}</span>'  # a long port name is cut: full here
    return f'<div class="spark-row">{name}{chart}<span class="v">{_e(text)}</span></div>'


def _metrics(report: Mapping[str, Any], names: list[str]) -> str:
    cards = []
    for n, samples in metric_nodes(report, names):
        s = series(samples)
        times = [t for t in (finite(x.get("t")) for x in samples) if t is not None]
        span = f"{len(samples)} samples" + (
            f" over {max(times) - min(times):.0f} s" if len(times) > 1 else ""
        )
        rows = [
            _spark_row("CPU %", s["cpu"], "#0969da", pct=True),
            _spark_row("memory %", s["mem"], "#1a7f37", pct=True),
        ]
        for i, (idx, util) in enumerate(sorted(s["gpus"].items())):
            colour = GPU_COLOURS[i % len(GPU_COLOURS)]
            rows.append(_spark_row(f"GPU{idx} util", util, colour, pct=True))
        if not s["gpus"]:
            rows.append(
                '<div class="spark-row"><span>GPU</span><span class="v">no GPU</span></div>'
            )
        for kind, colour in (("nic", "#bf3989"), ("ib", "#9a6700")):
            if s[kind]:
                port, values = s[kind]
                rows.append(_spark_row(f"{port} rx+tx", values, colour, pct=False))
        facts = gpu_facts(s)
        if facts:
            models = gpu_models(report, n) or "GPU"
            rows.append(f'<p class="gpus">{_e(models)}: {_e(" · ".join(facts))}</p>')
        title = f'<h3>{_e(n)} <span class="note">{_e(span)}</span></h3>'
        cards.append(f'<div class="card">{title}{"".join(rows)}</div>')
    if not cards:
        return ""
    interval = finite((report.get("metrics") or {}).get("interval_s"))
    note = f"<p class=note>Sampled every {interval:g} s during the session.</p>" if interval else ""
    return note + f'<div class="cards">{"".join(cards)}</div>'


def gpu_models(report: Mapping[str, Any], node: str) -> str:
    """'8x NVIDIA H100 80GB HBM3' (a multiplication sign, not x) from the metrics
    probe's hello, when it named the GPUs."""
    nodes = (report.get("metrics") or {}).get("nodes") or {}
    hello = (nodes.get(node) or {}).get("hello") if isinstance(nodes, Mapping) else None
    models = hello.get("gpu_names") if isinstance(hello, Mapping) else None
    if not isinstance(models, list) or not models:
        return ""
    counts: dict[str, int] = {}
    for m in models:
        counts[str(m)] = counts.get(str(m), 0) + 1
    return ", ".join(f"{c}\u00d7 {m}" for m, c in counts.items())


def _logs(report: Mapping[str, Any], names: list[str]) -> str:
    logs = report.get("logs")
    if not isinstance(logs, Mapping) or not logs:
        return ""
    out = ["<p class=note>Every line was redacted on its node.</p>"]
    for n in [*names, *(str(k) for k in logs if str(k) not in names)]:
        log = logs.get(n)
        if not isinstance(log, Mapping):
            continue
        tail = [str(x) for x in log.get("tail") or []]
        total = log.get("lines_total") or len(tail)
        excerpts = [e for e in log.get("excerpts") or [] if isinstance(e, Mapping)]
        body = "".join(
            f"<p><code>{_e(e.get('finding'))}</code> ({_e(e.get('step'))}), from line "
            f"{_e(e.get('first_line'))}{' (marked: the line it cites)' if marks(e) else ''}:</p>"
            f"{_pre_marked(e)}"
            for e in excerpts
        )
        if tail:
            body += f"<details><summary>Last {len(tail)} of {_e(total)} lines</summary>{_pre(tail)}</details>"
        count = f"{len(excerpts)} excerpt{'s' if len(excerpts) != 1 else ''}, " if excerpts else ""
        opened = " open" if excerpts else ""
        summary = f"<summary>{_e(n)}: {count}{_e(total)} lines</summary>"
        out.append(f"<details{opened}>{summary}{body}</details>")
    return "".join(out)


def _versions(report: Mapping[str, Any], names: list[str]) -> str:
    out = []
    versions = report.get("versions")
    if isinstance(versions, Mapping):
        out.append(
            f"<p><b>ddptui</b> {_e(versions.get('ddptui') or report.get('ddptui_version') or '?')}, "
            f"login Python {_e(versions.get('login_python') or '?')}</p>"
        )
        nodes = versions.get("nodes")
        if isinstance(nodes, Mapping) and nodes:
            line = version_line(nodes, names, _e, lambda v: f"<code>{_e(v)}</code>")
            out.append(f"<p><b>Nodes:</b> {line}</p>")
    known = step_durations(report)
    if known:
        top = max(v for _, v in known) or 1.0
        rows = [
            f'<tr><td><code>{_e(k)}</code></td><td class="num">{v:.1f} s</td>'
            f'<td><span class="bar" style="width:{160 * v / top:.0f}px"></span></td></tr>'
            for k, v in known
        ]
        total = finite((report.get("timings") or {}).get("total_s"))
        if total is not None:
            rows.append(f'<tr><th>total</th><th class="num">{total:.1f} s</th><th></th></tr>')
        out.append(_table(["<th>step</th><th>time</th><th></th>"], rows))
    return "".join(out)
