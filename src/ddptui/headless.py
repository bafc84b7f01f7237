"""What `ddptui check` prints: a live line per node and step, then the diagnosis."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, TextIO

import click

from ddptui import __version__
from ddptui.config import ClusterConfig
from ddptui.diagnosis.model import NodeResult, StepResult
from ddptui.glyphs import GLYPH

if TYPE_CHECKING:
    from ddptui.report.schema import ReportModel

COLOR = {
    "pass": "green",
    "warn": "yellow",
    "fail": "red",
    "skip": "bright_black",
    "error": "magenta",
}


class HeadlessPrinter:
    def __init__(self, cfg: ClusterConfig, source: str, steps: list[str], out: TextIO) -> None:
        self.cfg = cfg
        self.source = source
        self.steps = steps
        self.out = out
        self.color = out.isatty()
        self.started = time.monotonic()
        self.width = max(len(n.display) for n in cfg.nodes)

    def _echo(self, text: str = "", **style: Any) -> None:
        if style and self.color:
            text = click.style(text, **style)
        click.echo(text, file=self.out)

    def start(self) -> None:
        name = self.cfg.name or self.source
        self._echo(
            f"ddptui {__version__} · {name} · {len(self.cfg.nodes)} node(s) · "
            f"master {self.cfg.master.addr}:{self.cfg.master.port} · steps: "
            f"{', '.join(self.steps)}",
            bold=True,
        )

    def note(self, text: str) -> None:
        self._echo(f"  {text}", fg="yellow" if " error" in text else None)

    def node(self, step: str, node: str, result: NodeResult) -> None:
        took = f" ({result.duration_s:.2f}s)" if result.duration_s else ""
        line = (
            f"  {step:<9} {node:<{self.width}}  {GLYPH[result.status]} {result.status:<4}  "
            f"{result.summary}{took}"
        )
        self._echo(line, fg=COLOR[result.status] if result.status != "pass" else None)

    def step(self, result: StepResult) -> None:
        self._echo(
            f"{GLYPH[result.status]} {result.id:<9} {result.title}: {result.status} "
            f"in {result.duration_s:.1f}s",
            fg=COLOR[result.status],
            bold=True,
        )
        for f in result.findings:
            if f.severity == "info":
                continue
            self._echo(
                f"    {f.severity.upper()} {f.id}: {f.summary}",
                fg="red" if f.severity == "error" else "yellow",
            )

    def summary(self, report: ReportModel) -> None:
        took = time.monotonic() - self.started
        self._echo()
        first = report.first()
        if first is None:
            warns = [s.id for s in report.steps if s.status == "warn"]
            tail = f" (warnings in: {', '.join(warns)})" if warns else ""
            self._echo(f"PASS: every step passed in {took:.1f}s{tail}", fg="green", bold=True)
            self._exclude(report)
            return
        nodes = ", ".join(first.nodes) or "-"
        self._echo(f"FAIL at step '{first.step}' on {nodes}: {first.summary}", fg="red", bold=True)
        if first.finding is not None:
            self._echo(f"  finding: {first.finding}")
            self._echo(f"  cause:   {first.cause}")
            self._echo(f"  fix:     {first.fix}", fg="cyan", bold=True)
            for ev in first.evidence[:6]:
                self._echo(f"  | {ev}", dim=True)
        errors: list[tuple[str, str | None]] = [
            (s.id, x.id) for s in report.steps for x in s.findings if x.severity == "error"
        ]
        if (first.step, first.finding) in errors:
            errors.remove((first.step, first.finding))  # the one said above
        others = errors
        if others:
            self._echo(f"  ({len(others)} more error finding(s) above; --json for all)")
        self._echo(f"diagnosed in {took:.1f}s")
        self._exclude(report)

    def _exclude(self, report: ReportModel) -> None:
        """The nodes to resubmit without, ready for sbatch (CONTRACT 2026-11-25)."""
        if report.exclude:
            self._echo(f"exclude: --exclude={report.exclude}", fg="yellow", bold=True)

    def saved(self, saver: Any) -> None:
        if saver.error:
            self._echo(f"warning: {saver.error}", fg="yellow")
        elif saver.saves:
            self._echo(f"session saved: {saver.path}", dim=True)

    def interrupted(self) -> None:
        self._echo("\ninterrupted: stopped everything ddptui started on the nodes", fg="yellow")
