"""Text the TUI shows, built from immutable results: no Textual here, so it is testable
and shared with replay."""

from __future__ import annotations

from collections.abc import Mapping

from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.model import StepResult
from ddptui.glyphs import GLYPH
from ddptui.report.first import FirstFailure
from ddptui.stepmeta import ORDER

__all__ = [
    "GLYPH",
    "STYLE",
    "banner_text",
    "detail_markdown",
    "finding_markdown",
    "first_attention",
]

MANY_NODES = 16  # the detail pane lists every node up to this many

STYLE = {
    "pass": "green",
    "warn": "yellow",
    "fail": "bold red",
    "skip": "dim",
    "error": "magenta",
    "pending": "dim",
    "running": "cyan",
}


def finding_markdown(f: Finding, step: str) -> str:
    lines = [
        f"### {f.severity.upper()} `{f.id}` ({step})",
        "",
        f"**{f.summary}**",
        "",
        f"**Nodes:** {', '.join(f.nodes) or '-'}",
        "",
        f"**Cause.** {f.cause}",
        "",
        f"**Fix.** {f.fix}",
    ]
    if f.evidence:
        lines += ["", "```text", *[e[:300] for e in f.evidence[:12]], "```"]
    return "\n".join(lines)


def node_lines(result: StepResult) -> list[str]:
    """One bullet per node; past MANY_NODES, the nodes not passing (up to MANY_NODES) and
    one line for the passing rest: 256 bullets nobody reads cost ~0.5 s to render."""
    items = list(result.nodes.items())
    if len(items) <= MANY_NODES:
        return [f"- **{n}**: {GLYPH[r.status]} {r.summary}" for n, r in items]
    odd = [(n, r) for n, r in items if r.status != "pass"]
    lines = [f"- **{n}**: {GLYPH[r.status]} {r.summary}" for n, r in odd[:MANY_NODES]]
    if len(odd) > MANY_NODES:
        lines.append(f"- … and {len(odd) - MANY_NODES} more not passing (`/` filters the nodes)")
    passing = [n for n, r in items if r.status == "pass"]
    if passing:
        names = ", ".join(passing[:6]) + (f" … (+{len(passing) - 6})" if len(passing) > 6 else "")
        lines.append(f"- {GLYPH['pass']} **{len(passing)} nodes pass**: {names}")
    return lines


def detail_markdown(
    result: StepResult | None, title: str, node: str | None, running: bool = False
) -> str:
    """What the detail pane says for a step (and a node, when one is selected)."""
    if result is None and running:
        return (
            f"## {title}\n\nRunning now: the cells fill in as each node answers. "
            "**l** shows the selected node's log as it streams."
        )
    if result is None:
        return f"## {title}\n\nNot run yet. Press **enter** to run the next step, **a** for all."
    head = f"## {result.title}: {result.status.upper()} ({result.duration_s:.1f}s)"
    parts = [head, ""]
    if node is not None and node in result.nodes:
        nr = result.nodes[node]
        parts += [f"**{node}**: {GLYPH[nr.status]} {nr.status} — {nr.summary}", ""]
        shown = [f for f in result.findings if node in f.nodes]
    else:
        parts += node_lines(result)
        parts.append("")
        shown = list(result.findings)
    if not shown:
        parts.append("No findings." if node is None else f"No findings for {node}.")
    order = {"error": 0, "warning": 1, "info": 2}
    for f in sorted(shown, key=lambda f: order.get(f.severity, 3)):
        parts += [finding_markdown(f, result.id), ""]
    return "\n".join(parts)


def first_attention(results: Mapping[str, StepResult]) -> StepResult | None:
    """The first step (checklist order) that ended in error, else in warn: what the
    banner leads with when nothing failed."""
    for status in ("error", "warn"):
        for step in ORDER:
            r = results.get(step)
            if r is not None and r.status == status:
                return r
    return None


def _attention_text(r: StepResult) -> str:
    f = r.primary
    nodes = [n for n, nr in r.nodes.items() if nr.status == r.status]
    where = f" on {', '.join(f.nodes if f is not None and f.nodes else nodes)}" if nodes or f else ""
    label = "ERROR" if r.status == "error" else "WARN"
    if f is None:
        reasons = [nr.summary for nr in r.nodes.values() if nr.status == r.status]
        return f"{GLYPH[r.status]} {label} at {r.id}{where}: {reasons[0] if reasons else r.title}"
    return f"{GLYPH[r.status]} {label} at {r.id}{where}: {f.summary}\n  Fix: {f.fix}"


def banner_text(
    first: FirstFailure | None,
    running: str | None,
    done: bool,
    results: Mapping[str, StepResult] | None = None,
) -> tuple[str, str]:
    """(text, style class) of the banner: the first failure and its fix lead; with
    no failure, the first step in error or warning (never "passed" under a WARN)."""
    if first is not None:
        nodes = ", ".join(first.nodes) or "-"
        return (
            f"{GLYPH['fail']} FAIL at {first.step} on {nodes}: {first.summary}\n  Fix: {first.fix}",
            "fail",
        )
    if running:
        return f"… running {running}", "running"
    other = first_attention(results or {})
    if other is not None:
        return _attention_text(other), other.status
    if done:
        skipped = [s for s, r in (results or {}).items() if r.status == "skip"]
        if skipped:
            return f"{GLYPH['pass']} every step that ran passed ({', '.join(skipped)} skipped)", "pass"
        return f"{GLYPH['pass']} every step passed", "pass"
    return "Connected: the steps wait for you. enter = next step, a = all, q = quit", "idle"
