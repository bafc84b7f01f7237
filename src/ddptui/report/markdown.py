"""The report as Markdown that renders well when pasted into a GitHub issue."""

from __future__ import annotations

from typing import Any

GLYPH = {"pass": "✅", "warn": "⚠️", "fail": "❌", "skip": "·", "error": "❓"}


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(report: dict[str, Any]) -> str:
    lines: list[str] = []
    name = report.get("cluster") or report.get("config")
    verdict = report.get("verdict", "?")
    lines.append(f"# ddptui diagnosis: {name} — {verdict.upper()}")
    lines.append("")
    lines.append(
        f"ddptui {report['ddptui_version']} · {len(report['nodes'])} node(s) · "
        f"{report['started_at']} → {report.get('finished_at') or '?'}"
    )
    lines.append("")
    first = report.get("first_failure")
    if first:
        lines += [
            f"## First failure: `{first['step']}` on {', '.join(first['nodes']) or '-'}",
            "",
            f"**{first['finding']}**: {first['summary']}",
            "",
            f"**Fix:** {first['fix']}",
            "",
        ]
    else:
        lines += ["**Every step passed.**", ""]
    nodes = [n["name"] for n in report["nodes"]]
    lines.append("## Steps")
    lines.append("")
    lines.append("| step | status | " + " | ".join(_cell(n) for n in nodes) + " |")
    lines.append("|---|---|" + "---|" * len(nodes))
    for step in report["steps"]:
        cells = [GLYPH.get(step["nodes"].get(n, {}).get("status", "skip"), "") for n in nodes]
        lines.append(
            f"| {step['id']} | {GLYPH.get(step['status'], '')} {step['status']} | "
            + " | ".join(cells)
            + " |"
        )
    lines.append("")
    findings = [(s["id"], f) for s in report["steps"] for f in s["findings"]]
    if findings:
        lines.append("## Findings")
        lines.append("")
        for step_id, f in findings:
            lines.append(f"### {f['severity'].upper()} `{f['id']}` ({step_id}): {f['summary']}")
            lines.append("")
            lines.append(f"- **Nodes:** {', '.join(f['nodes']) or '-'}")
            lines.append(f"- **Cause:** {f['cause']}")
            lines.append(f"- **Fix:** {f['fix']}")
            if f["evidence"]:
                lines.append("")
                lines.append("<details><summary>Evidence</summary>")
                lines.append("")
                lines.append("```text")
                lines += [str(e) for e in f["evidence"]]
                lines.append("```")
                lines.append("")
                lines.append("</details>")
            lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"
