"""A project written to a temporary folder and linted from its entry script, as `ddptui
lint ENTRY --root DIR` does (the folder marked as a repository's root)."""

from __future__ import annotations

from pathlib import Path

from ddptui.lint import lint_paths
from ddptui.lint.model import LintFinding


def lint_project(root: Path, files: dict[str, str], entry: str = "train.py") -> list[LintFinding]:
    (root / ".git").mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return list(lint_paths([root / entry], root=root).findings)


def severities(found: list[LintFinding], fid: str) -> list[tuple[str, int, str]]:
    """(file name, line, severity) of each finding `fid`."""
    return [(Path(f.file).name, f.line, f.severity) for f in found if f.id == fid]
