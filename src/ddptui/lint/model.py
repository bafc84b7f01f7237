"""What the lint produces: findings with file and line, and a run's result."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddptui.diagnosis.finding import Severity

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class Hit:
    """What a rule saw: the finding id, where, a one-line summary and the facts its
    knowledge-base text is filled with."""

    id: str
    line: int
    summary: str
    facts: dict[str, object] = field(default_factory=dict)
    severity: Severity | None = None  # None: the knowledge base's
    node: ast.AST | None = field(default=None, compare=False)  # says which file
    # other places the fix may go (`called from` the caller that passes the wrapper):
    # (node, label) pairs; the finding stays at `line`
    also: tuple[tuple[ast.AST, str], ...] = field(default=(), compare=False)

    @classmethod
    def at(
        cls,
        id: str,
        node: ast.AST,
        summary: str,
        *,
        severity: Severity | None = None,
        also: tuple[tuple[ast.AST, str], ...] = (),
        **facts: object,
    ) -> Hit:
        return cls(id, getattr(node, "lineno", 1), summary, facts, severity, node, also)


@dataclass(frozen=True)
class Place:
    """A second place a finding points at: where the fix may go when that is not where
    the finding is said (`called from train.py:88`, `rank-only branch at ...:140`)."""

    file: str
    line: int
    label: str  # how the CLI introduces it: "called from", "rank-only branch at", ...

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "label": self.label}


@dataclass(frozen=True)
class LintFinding:
    id: str
    severity: Severity
    file: str
    line: int
    title: str
    summary: str
    why: str
    fix: str
    also: tuple[Place, ...] = ()  # where else the fix may go; empty for most findings

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "severity": self.severity,
            "file": self.file,
            "line": self.line,
            "title": self.title,
            "summary": self.summary,
            "why": self.why,
            "fix": self.fix,
        }
        if self.also:  # only when there is one: readers of the old JSON see no change
            out["also"] = [p.to_dict() for p in self.also]
        return out

    def lines(self) -> tuple[tuple[str, int], ...]:
        """Every (file, line) the finding points at: its own first, then `also`."""
        return ((self.file, self.line), *((p.file, p.line) for p in self.also))


class LintInputError(Exception):
    """A file that cannot be audited (unreadable, not text, not Python); str() says what,
    where and what to do."""


@dataclass(frozen=True)
class LintResult:
    files: tuple[str, ...]
    findings: tuple[LintFinding, ...]
    problems: tuple[str, ...] = ()  # files that could not be audited, one message each
    root: str | None = None  # the project root imports were followed under
    root_why: str = ""  # how it was chosen (--root, nearest .git, ...)
    followed: tuple[str, ...] = ()  # project modules the entry scripts import, audited too
    notes: tuple[str, ...] = ()  # followed modules not audited (syntax error...), caps hit

    @property
    def errors(self) -> tuple[LintFinding, ...]:
        return tuple(f for f in self.findings if f.severity == "error")

    @property
    def exit_code(self) -> int:
        """CONTRACT: 2 unreadable/unparsable input, 1 an error finding, else 0."""
        if self.problems:
            return 2
        return 1 if self.errors else 0

    def headline(self) -> str:
        """One line for a status row: `train.py: 1 error, 2 warnings (first: DDP-SAMPLER at
        line 13)`, or why the script could not be audited."""
        names = ", ".join(Path(f).name for f in self.files) or "no script"
        if self.problems:
            return f"{names}: cannot audit: {self.problems[0]}"
        if not self.findings:
            return f"{names}: no DDP pitfall found"
        counts = [
            f"{n} {sev}{'s' if n != 1 else ''}"
            for sev in SEVERITY_ORDER
            if (n := sum(1 for f in self.findings if f.severity == sev))
        ]
        first = min(self.findings, key=lambda f: (SEVERITY_ORDER[f.severity], f.file, f.line))
        return f"{names}: {', '.join(counts)} (first: {first.id} at line {first.line})"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "files": list(self.files),
            "findings": [f.to_dict() for f in self.findings],
        }
        if self.problems:
            out["problems"] = list(self.problems)
        if self.root is not None:
            out["root"] = self.root
            out["followed"] = list(self.followed)
        if self.notes:
            out["notes"] = list(self.notes)
        return out
