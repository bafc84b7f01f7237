"""The report as one self-contained HTML file (inline CSS, no external resources)."""

from __future__ import annotations

import html
from typing import Any

CSS = """
body{font:14px/1.45 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.5em}.fail{color:#b00020}.pass{color:#1b7f3b}.warn{color:#a66300}
.skip{color:#777}.error{color:#7b1fa2}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}
.banner{border-left:6px solid #b00020;background:#fff3f3;padding:.6em 1em}
.ok{border-left:6px solid #1b7f3b;background:#f1fbf4;padding:.6em 1em}
pre{background:#f6f8fa;padding:.6em;overflow-x:auto}
@media print{body{margin:0}}
"""


def render_html(report: dict[str, Any], screenshot_svg: str | None = None) -> str:
    e = html.escape
    name = report.get("cluster") or report.get("config")
    out = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>ddptui: {e(str(name))}"
        f"</title><style>{CSS}</style></head><body>"
    ]
    verdict = report.get("verdict", "?")
    out.append(
        f"<h1>ddptui diagnosis: {e(str(name))} — "
        f"<span class='{e(verdict)}'>{e(verdict.upper())}</span></h1>"
    )
    first = report.get("first_failure")
    if first:
        out.append(
            f"<div class='banner'><b>First failure: {e(first['step'])} on "
            f"{e(', '.join(first['nodes']))}</b> ({e(str(first['finding']))})<br>"
            f"{e(first['summary'])}<br><b>Fix:</b> {e(first['fix'])}</div>"
        )
    else:
        out.append("<div class='ok'><b>Every step passed.</b></div>")
    nodes = [n["name"] for n in report["nodes"]]
    out.append(
        "<table><tr><th>step</th><th>status</th>"
        + "".join(f"<th>{e(n)}</th>" for n in nodes)
        + "</tr>"
    )
    for step in report["steps"]:
        cells = []
        for n in nodes:
            r = step["nodes"].get(n, {"status": "skip", "summary": ""})
            cells.append(
                f"<td class='{e(r['status'])}' title='{e(r.get('summary', ''))}'>"
                f"{e(r['status'])}</td>"
            )
        out.append(
            f"<tr><td>{e(step['id'])}</td><td class='{e(step['status'])}'>"
            f"{e(step['status'])}</td>{''.join(cells)}</tr>"
        )
    out.append("</table>")
    for step in report["steps"]:
        for f in step["findings"]:
            out.append(
                f"<h3 class='{'fail' if f['severity'] == 'error' else 'warn'}'>"
                f"{e(f['severity'].upper())} {e(f['id'])} ({e(step['id'])}): "
                f"{e(f['summary'])}</h3><p><b>Cause:</b> {e(f['cause'])}</p>"
                f"<p><b>Fix:</b> {e(f['fix'])}</p>"
            )
            if f["evidence"]:
                out.append(
                    "<details><summary>Evidence</summary><pre>"
                    + e("\n".join(map(str, f["evidence"])))
                    + "</pre></details>"
                )
    out.append("</body></html>\n")
    return "\n".join(out)
