"""Writing reports: one function for the CLI and the TUI, atomic (temp file + rename)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    from ddptui.report.schema import ReportModel

FORMATS = ("json", "markdown", "html")
# A report as built (the model) or as saved and loaded again (its JSON document).
Report = Union["ReportModel", Mapping[str, Any]]


def document_of(report: Report) -> dict[str, Any]:
    """The JSON document of a report: a loaded one as it is, a built one dumped."""
    if isinstance(report, dict):
        return report
    return dict(report) if isinstance(report, Mapping) else report.document()


def render(report: Report, fmt: str, *, screenshot_svg: str | None = None) -> str:
    """The report as text; an HTML report embeds screenshot_svg (the TUI at export time)."""
    report = document_of(report)
    if fmt == "json":
        return json.dumps(report, indent=2) + "\n"
    if fmt == "markdown":
        from ddptui.report.markdown import render_markdown

        return render_markdown(report)
    if fmt == "html":
        from ddptui.report.html import render_html

        return render_html(report, screenshot_svg=screenshot_svg)
    raise ValueError(f"unknown report format {fmt!r} (choose from {', '.join(FORMATS)})")


def atomic_write(path: Path, text: str, mode: int | None = None) -> None:
    """Readers never see half a file: write a temp file beside it, then rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        if mode is not None:
            tmp.chmod(mode)
        tmp.replace(path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_report(
    report: Report, fmt: str, path: str | Path, *, screenshot_svg: str | None = None
) -> Path:
    target = Path(path).expanduser()
    atomic_write(target, render(report, fmt, screenshot_svg=screenshot_svg))
    return target
