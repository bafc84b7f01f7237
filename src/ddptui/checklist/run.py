"""The run core: one place that owns a diagnosis run's lifecycle. Core layer.

`RunCore` owns the Session (connections, steps, results), the metrics streamer and its
model, the autosaver and the one log store. Views (`ddptui check`, the TUI) subscribe
to its events and render; they never wire the lifecycle themselves:

    core = RunCore(config, source)
    core.subscribe(listener)           # RunEvent: step started, node, step, log, saved
    await core.connect()               # the ssh step, then the nodes' metrics
    await core.run_step("inventory")   # a step that raises becomes status "error"
    core.report()                      # the one report document, at any moment
    await core.stop()                  # bounded: nothing stays on the nodes

Events are delivered synchronously, on the loop that runs the core.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ddptui.checklist.runner import Session
from ddptui.checklist.snapshot import RunSnapshot
from ddptui.config import ClusterConfig
from ddptui.diagnosis.logstore import LogLine
from ddptui.diagnosis.model import NodeResult, StepResult
from ddptui.metrics import MetricsModel
from ddptui.report.autosave import Autosaver
from ddptui.report.json_report import build_report, run_state
from ddptui.stepmeta import ORDER

if TYPE_CHECKING:
    from ddptui.report.schema import ReportModel

METRICS_STOP_S = 10.0  # bound on stopping the metrics probes (closing kills them anyway)

EventKind = Literal["step-started", "node", "step", "log", "saved", "metrics"]


@dataclass(frozen=True)
class RunEvent:
    """One thing that happened in a run; immutable, so any view may keep it."""

    kind: EventKind
    step: str | None = None
    node: str | None = None
    node_result: NodeResult | None = None
    result: StepResult | None = None
    line: LogLine | None = None
    message: str | None = None


RunListener = Callable[[RunEvent], None]


@dataclass
class RunCore:
    """A run on one cluster; see the module docstring."""

    config: ClusterConfig
    config_path: str
    metrics: bool = True
    autosave: bool = True
    selected: tuple[str, ...] = ORDER
    session: Session = field(init=False)
    model: MetricsModel | None = field(init=False, default=None)
    saver: Autosaver | None = field(init=False, default=None)
    running: str | None = field(init=False, default=None)
    _listeners: list[RunListener] = field(init=False, default_factory=list)
    _streamer: Any = field(init=False, default=None)
    _stopped: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self.session = Session(
            self.config, self.config_path, on_node=self._on_node, on_step=self._on_step
        )
        self.session.logs.subscribe(lambda line: self._emit(RunEvent("log", line=line)))
        # The job's entry point (`script:`), audited before anything is launched: pure
        # AST, a few ms, nothing runs.
        self.lint: Any = None
        if self.config.script:
            from ddptui.lint import lint_paths

            self.lint = lint_paths([self.config.script])
        if self.autosave:
            self.saver = Autosaver(self.config.name)
            self.session.info = self.saver.info

    # ------------------------------------------------------------------ subscribers

    def subscribe(self, listener: RunListener) -> None:
        self._listeners.append(listener)

    def _emit(self, event: RunEvent) -> None:
        for listener in list(self._listeners):
            listener(event)

    def _on_node(self, step: str, node: str, result: NodeResult) -> None:
        self._emit(RunEvent("node", step=step, node=node, node_result=result))

    def _on_step(self, result: StepResult) -> None:
        self._emit(RunEvent("step", step=result.id, result=result))
        self.save_later()

    # ------------------------------------------------------------------ state

    @property
    def logs(self) -> Any:
        return self.session.logs

    @property
    def results(self) -> dict[str, StepResult]:
        return self.session.results

    @property
    def connected(self) -> bool:
        return "ssh" in self.session.results

    def snapshot(self) -> RunSnapshot:
        results = dict(self.session.results)
        state, label = run_state(results, self.selected, self.running)
        return RunSnapshot(results, self.running, self.selected, state, label)

    def report(self) -> ReportModel:
        """The one report (document() is its JSON), as the run stands now."""
        report = build_report(self.session, metrics=self.model)
        if self.lint is not None:
            lint = {"script": self.config.script, "headline": self.lint.headline(),
                    **self.lint.to_dict()}  # fmt: skip
            report = report.model_copy(update={"lint": lint})
        return report

    def script_headline(self) -> str | None:
        """One line on the audited training script (`script:`), or None."""
        return f"script {self.lint.headline()}" if self.lint is not None else None

    def pending(self) -> list[str]:
        return [s for s in self.selected if s not in self.session.results]

    # ------------------------------------------------------------------ running

    async def connect(self) -> StepResult:
        """The ssh step; then the reachable nodes' metrics stream for the rest of the run."""
        result = await self.run_step("ssh")
        await self._start_metrics()
        return result

    async def run_step(self, step_id: str) -> StepResult:
        """Run (or re-run) one step. A step that raises is a result with status "error"
        and a one-line reason (Session.run_step), never an exception here."""
        self.running = step_id
        self._emit(RunEvent("step-started", step=step_id))
        try:
            return await self.session.run_step(step_id)
        finally:
            self.running = None

    async def run_steps(self, step_ids: list[str]) -> None:
        for step_id in step_ids:
            if step_id == "ssh":
                await self.connect()
            else:
                await self.run_step(step_id)

    def skip_step(self, step_id: str) -> StepResult:
        return self.session.skip_step(step_id)

    async def _start_metrics(self) -> None:
        if not self.metrics or self._streamer is not None or self._stopped:
            return
        self.model = MetricsModel([t.name for t in self.session.targets])
        self._streamer = self.session.metrics_streamer(self.model)
        await self._streamer.start()
        self._emit(RunEvent("metrics"))

    # ------------------------------------------------------------------ saving, stopping

    def save_later(self) -> None:
        """Autosave in the background (after a step)."""
        if self.saver is None:
            return
        self.saver.save_later(self.report())
        self._emit(RunEvent("saved", message=self.saver.error))

    def save_now(self, timeout: float = 30) -> None:
        if self.saver is None:
            return
        self.saver.flush(timeout=timeout)
        self.saver.save(self.report())
        self._emit(RunEvent("saved", message=self.saver.error))

    async def stop(self, *, save_timeout: float = 30) -> None:
        """Stop everything on every node (bounded), close the connections, save last.
        Safe to call twice and from a cancelled task."""
        if self._stopped:
            return
        self._stopped = True
        if self._streamer is not None:
            # Bounded: closing the transports below kills any probe still there.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.shield(asyncio.wait_for(self._streamer.stop(), METRICS_STOP_S))
        await asyncio.shield(self.session.close())
        self.save_now(timeout=save_timeout)
