"""Run the checklist: steps in order, every node at once, each step bounded in time."""

from __future__ import annotations

import asyncio
import datetime as dt
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ddptui.checklist.base import LogCallback, NodeCallback, StepContext
from ddptui.checklist.metrics_stream import MetricsStreamer
from ddptui.checklist.registry import STEPS
from ddptui.config import ClusterConfig
from ddptui.diagnosis.model import NodeResult, StepResult, finding
from ddptui.metrics import MetricsModel
from ddptui.transport import make_transports
from ddptui.transport.base import NodeTarget, Transport

StepCallback = Callable[[StepResult], None]
STEP_SLACK_S = 15.0  # on top of the per-probe timeout: a step runs a few probes in sequence
LOG_LINES = 5000  # per node: the allreduce stream kept for the log view and the report


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
    on_log: LogCallback | None = None
    transports: dict[str, Transport] = field(default_factory=dict)
    started_at: str = field(default_factory=utcnow)
    finished_at: str | None = None
    info: dict[str, str] | None = None  # where the session is autosaved (report `session`)

    def __post_init__(self) -> None:
        self.targets = targets_from(self.config)
        # Each node's log (the allreduce stream, "[rRANK] " before a rank's lines), bounded;
        # every line was redacted on the node.
        self.logs: dict[str, deque[str]] = {t.name: deque(maxlen=LOG_LINES) for t in self.targets}
        self.log_counts: dict[str, int] = dict.fromkeys(self.logs, 0)
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
            on_log=self._log,
        )

    def _log(self, node: str, rank: int | None, stream: str, line: str) -> None:
        tag = f"[r{rank}] " if rank is not None else ""
        self.logs.setdefault(node, deque(maxlen=LOG_LINES)).append(tag + line)
        self.log_counts[node] = self.log_counts.get(node, 0) + 1
        if self.on_log is not None:
            self.on_log(node, rank, stream, line)

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
        return t.step + STEP_SLACK_S

    def _timed_out(self, step_id: str, limit: float, took: float) -> StepResult:
        """A whole step overran its bound: say so, per node, instead of hanging."""
        step = STEPS[step_id]
        names = [t.name for t in self.targets if t.name not in self.ctx.unreachable]
        f = finding(
            "STEP-TIMEOUT",
            "error",
            names,
            f"the {step_id} step did not finish in {limit:.0f} s",
            "At least one node stopped answering during this step (hung filesystem, overloaded "
            "node, network stall).",
            "Check the nodes' load and network; raise `timeouts.step` if they are just slow.",
        )
        nodes = {
            t.name: NodeResult(
                "fail" if t.name in names else "skip",
                "did not finish in time" if t.name in names else "not reachable over SSH",
            )
            for t in self.targets
        }
        return StepResult(step_id, step.title, "fail", took, nodes, (f,))

    def skip_step(self, step_id: str) -> StepResult:
        """Mark a step skipped by the user (replacing any earlier result)."""
        step = STEPS[step_id]
        nodes = {t.name: NodeResult("skip", "skipped by the user") for t in self.targets}
        result = StepResult(step_id, step.title, "skip", 0.0, nodes)
        self.ctx.results[step_id] = result
        if self.on_step is not None:
            self.on_step(result)
        return result

    async def run(self, step_ids: list[str]) -> dict[str, StepResult]:
        for step_id in step_ids:
            await self.run_step(step_id)
        self.finished_at = utcnow()
        return self.ctx.results

    def metrics_streamer(self, model: MetricsModel) -> MetricsStreamer:
        """A streamer of the nodes' metrics into model, on every node the ssh step
        reached, at the config's interval (started by the caller)."""
        reachable = {n: t for n, t in self.transports.items() if n not in self.ctx.unreachable}
        return MetricsStreamer(reachable, model, interval=self.config.metrics_interval)

    async def close(self) -> None:
        """Stop every probe on every node and drop the connections."""
        await asyncio.gather(*(t.close() for t in self.transports.values()), return_exceptions=True)
