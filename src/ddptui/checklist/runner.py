"""Run the checklist: steps in order, every node at once, each step bounded in time."""

from __future__ import annotations

import asyncio
import datetime as dt
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ddptui.checklist.base import NodeCallback, StepContext
from ddptui.checklist.metrics_stream import MetricsStreamer
from ddptui.checklist.registry import STEPS
from ddptui.config import ClusterConfig
from ddptui.diagnosis.kb import kb_finding
from ddptui.diagnosis.logstore import LogStore
from ddptui.diagnosis.model import NodeResult, StepResult
from ddptui.metrics import MetricsModel
from ddptui.transport import close_transports, make_transports
from ddptui.transport.base import NodeTarget, Transport

StepCallback = Callable[[StepResult], None]
STEP_SLACK_S = 15.0  # on top of the per-probe timeout: a step runs a few probes in sequence


def targets_from(config: ClusterConfig) -> list[NodeTarget]:
    return [
        NodeTarget(
            name=n.display,
            host=n.host,
            rank=i,
            python=config.python_for(n),
            user=n.user,
            port=n.port,
        )
        for i, n in enumerate(config.nodes)
    ]


def utcnow() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Session:
    """One diagnosis session: the connections, and the results so far."""

    config: ClusterConfig
    config_path: str
    on_node: NodeCallback | None = None
    on_step: StepCallback | None = None
    transports: dict[str, Transport] = field(default_factory=dict)
    started_at: str = field(default_factory=utcnow)
    finished_at: str | None = None
    info: dict[str, str] | None = None  # where the session is autosaved (report `session`)

    def __post_init__(self) -> None:
        self.targets = targets_from(self.config)
        # Every line the nodes stream (allreduce, ddp), bounded per node, each with its
        # id; every line was redacted on the node.
        self.logs = LogStore(t.name for t in self.targets)
        self._started = time.monotonic()
        self.elapsed_s = 0.0  # until the last step finished
        if not self.transports:
            self.transports = make_transports(self.config, self.targets)
        self.ctx = StepContext(
            config=self.config,
            targets=self.targets,
            transports=self.transports,
            salt=secrets.token_hex(8),
            on_node=self.on_node,
            logs=self.logs,
        )

    @property
    def results(self) -> dict[str, StepResult]:
        return self.ctx.results

    async def run_step(self, step_id: str) -> StepResult:
        """Run (or re-run) one step; the other steps' results stay as they are."""
        step = STEPS[step_id]()
        if step_id == "ssh":
            self.ctx.unreachable.clear()  # a re-run re-decides who is reachable
        limit = self._limit(step_id)
        started = time.monotonic()
        try:
            result = await asyncio.wait_for(step.run(self.ctx), limit)
        except asyncio.TimeoutError:
            result = self._timed_out(step_id, limit, time.monotonic() - started)
        except Exception as exc:  # noqa: BLE001 - a bug in a step is its result, not a crash
            result = self._errored(step_id, exc, time.monotonic() - started)
        self.ctx.results[step_id] = result
        self.finished_at = utcnow()
        self.elapsed_s = time.monotonic() - self._started
        if self.on_step is not None:
            self.on_step(result)
        return result

    def _limit(self, step_id: str) -> float:
        t = self.config.timeouts
        if step_id == "ssh":
            return (
                self.config.ssh.connect_timeout
                * (1 + len(self.targets) // max(1, self.config.ssh.max_concurrent_connects))
                + STEP_SLACK_S
            )
        if step_id == "allreduce":
            return t.allreduce + STEP_SLACK_S
        if step_id == "ddp":
            return t.ddp + STEP_SLACK_S
        if step_id == "fabric":
            return t.fabric + STEP_SLACK_S
        return t.step + STEP_SLACK_S

    def _timed_out(self, step_id: str, limit: float, took: float) -> StepResult:
        """A whole step overran its bound: say so, per node, instead of hanging."""
        step = STEPS[step_id]
        names = [t.name for t in self.targets if t.name not in self.ctx.unreachable]
        f = kb_finding("STEP-TIMEOUT", names, f"the {step_id} step did not finish in {limit:.0f} s")
        nodes = {
            t.name: NodeResult(
                "fail" if t.name in names else "skip",
                "did not finish in time" if t.name in names else "not reachable over SSH",
            )
            for t in self.targets
        }
        return StepResult(step_id, step.title, "fail", took, nodes, (f,))

    def _errored(self, step_id: str, exc: Exception, took: float) -> StepResult:
        """ddptui itself could not run the step (a bug): status "error", one line why."""
        reason = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:200]
        f = kb_finding(
            "STEP-ERROR",
            [t.name for t in self.targets],
            f"ddptui could not run the {step_id} step ({reason})",
            step=step_id,
            reason=reason,
        )
        nodes = {t.name: NodeResult("error", f"ddptui error: {reason}") for t in self.targets}
        return StepResult(step_id, STEPS[step_id].title, "error", took, nodes, (f,))

    def skip_step(self, step_id: str) -> StepResult:
        """Mark a step skipped by the user (replacing any earlier result)."""
        step = STEPS[step_id]
        nodes = {t.name: NodeResult("skip", "skipped by the user") for t in self.targets}
        result = StepResult(step_id, step.title, "skip", 0.0, nodes)
        self.ctx.results[step_id] = result
        if self.on_step is not None:
            self.on_step(result)
        return result

    def metrics_streamer(self, model: MetricsModel) -> MetricsStreamer:
        """A streamer of the nodes' metrics into model, on every node the ssh step
        reached, at the config's interval (started by the caller)."""
        reachable = {n: t for n, t in self.transports.items() if n not in self.ctx.unreachable}
        return MetricsStreamer(reachable, model, interval=self.config.metrics_interval)

    async def close(self) -> None:
        """Stop every probe on every node and drop the connections."""
        await close_transports(self.transports)
