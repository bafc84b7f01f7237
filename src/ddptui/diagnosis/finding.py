"""One diagnosed fact (a Finding) and its severity: the ground that the knowledge base,
ranking and every result stand on. Findings are built by the knowledge base
(diagnosis/kb.py: kb_finding, signature_finding), never elsewhere; tests/test_kb.py
enforces it. Core layer: stdlib only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class Finding:
    """One diagnosed fact: what is wrong (or noteworthy), where, why, and the fix."""

    id: str
    severity: Severity
    nodes: tuple[str, ...]
    summary: str
    cause: str
    fix: str
    evidence: tuple[str, ...] = ()
    rank: int | None = None  # the global rank it is about, when one is (job, logs)
    where: str | None = None  # "file.py:123 in func", when a place in code is known
    lines: tuple[str, ...] = ()  # ids of the log lines it quotes (LogStore "node#seq")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "severity": self.severity,
            "nodes": list(self.nodes),
            "summary": self.summary,
            "cause": self.cause,
            "fix": self.fix,
            "evidence": list(self.evidence),
        }
        if self.rank is not None:
            out["rank"] = self.rank
        if self.where:
            out["where"] = self.where
        if self.lines:
            out["lines"] = list(self.lines)
        return out

    @classmethod
    def from_dict(cls, f: dict[str, Any]) -> Finding:
        rank = f.get("rank")
        return cls(
            str(f["id"]),
            f["severity"],
            tuple(f.get("nodes") or ()),
            f.get("summary", ""),
            f.get("cause", ""),
            f.get("fix", ""),
            tuple(f.get("evidence") or ()),
            rank if isinstance(rank, int) else None,
            f.get("where") or None,
            tuple(f.get("lines") or ()),
        )
