"""Slurm transport: probes reach the nodes of a job through `srun --overlap --jobid J`.

The fan-out is the scheduler's: a probe asked of many nodes at once becomes ONE srun
step over all of them (the requests that arrive within BATCH_WINDOW_S are one batch),
and the step's labelled output is demultiplexed into one ProbeRun per node. The login
side therefore holds one srun process per running step, not one connection per node.

How a step is started (argv, never a shell; nothing is installed on the nodes):

    srun --jobid J --overlap --nodelist HOSTLIST -N n -n n --ntasks-per-node=1
         --label --kill-on-bad-exit=0 --mem=0 --cpu-bind=none --input=all
         --export=ALL --job-name=ddptui-PROBE  PYTHON -u -c STAGE0

- `--overlap`: the step shares CPUs, memory and GRES with every other step (the user's
  training step included), so it never waits behind it and claims nothing.
- No `--gres=none`: a step gets the job's GRES by default, so with `--overlap` the GPUs
  stay visible (device cgroup, CUDA_VISIBLE_DEVICES) for NVML, without being claimed.
- `--mem=0`: the step is limited to the job's memory and takes none of it.
- `--kill-on-bad-exit=0`: one node's failing probe is that node's finding; it does not
  end the step on the others.
- `--input=all` (srun's default, stated): the probe payload is written once to srun's
  stdin and broadcast to every task; each node picks its own params (`by_node`, keyed by
  SLURMD_NODENAME) and announces `ddptui-node NAME STEP PID` first. Closing srun's stdin
  reaches every task as end-of-file: the bootstrap's lifeline then stops the probe.
- `--export=ALL`: the caller's environment reaches the probe (PATH: the training
  python; the launch variables the env step audits), even inside a job submitted with
  `--export=NONE` (its SLURM_EXPORT_ENV would otherwise apply to our steps too).
- `--label`: every line comes back as `TASK: line`; the announcement maps task -> node.

Stopping: stdin closed (the lifeline), then SIGTERM to srun (it forwards it to the
tasks), then `scancel JOB.STEP` of the step this srun created (its id is announced by
the tasks), then SIGKILL. The user's job and steps are never signalled.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ddptui.sources.hostlist import compress
from ddptui.transport.base import ConnectFailure, NodeTarget, ProbeRun, Transport
from ddptui.transport.srun_step import (
    STEP_SHAPING_ENV,
    NodeIO,
    NodeStdin,
    SrunOptions,
    SrunStep,
    frame_group_payload,
    srun_argv,
    step_env,
)

__all__ = [
    "STEP_SHAPING_ENV",
    "SrunGroup",
    "SrunOptions",
    "SrunTransport",
    "frame_group_payload",
    "srun_argv",
    "step_env",
]

BATCH_WINDOW_S = 0.25  # requests for one probe within this window share one srun step
PREPARE_TIMEOUT_S = 15.0  # bound on asking Slurm for the nodes' states


@dataclass
class _Batch:
    probe: str
    python: str
    requests: dict[str, tuple[dict[str, Any], Callable[[str], None] | None]] = field(
        default_factory=dict
    )
    ready: asyncio.Future[SrunStep] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    timer: asyncio.TimerHandle | None = None


class SrunGroup:
    """Every node of one Slurm job, reached through srun: batches probe requests into
    steps and keeps track of the steps it started (and only those)."""

    def __init__(self, options: SrunOptions, targets: list[NodeTarget]) -> None:
        self.options = options
        self.hosts = [t.host for t in targets]
        self.down: dict[str, str] = {}  # host -> why Slurm says it cannot run (DOWN...)
        self.drained: dict[str, str] = {}  # host -> Slurm's DRAIN state and reason
        self._prepared = False
        self._prepare_lock = asyncio.Lock()
        self.steps: set[SrunStep] = set()
        self.peak_steps = 0
        self._batches: dict[tuple[str, str], _Batch] = {}
        self._starting: set[asyncio.Future[None]] = set()  # references keep tasks alive
        self.closed = False

    async def start(
        self,
        host: str,
        probe: str,
        python: str,
        params: dict[str, Any],
        on_stderr: Callable[[str], None] | None,
    ) -> tuple[SrunStep, NodeIO]:
        if self.closed:
            raise ConnectFailure("lost", "the run is stopping; no new srun steps")
        key = (probe, python)
        batch = self._batches.get(key)
        if batch is None or host in batch.requests:
            batch = _Batch(probe, python)
            self._batches[key] = batch
            loop = asyncio.get_running_loop()
            batch.timer = loop.call_later(BATCH_WINDOW_S, self._flush, key, batch)
        batch.requests[host] = (params, on_stderr)
        if set(batch.requests) >= {h for h in self.hosts if h not in self.down}:
            self._flush(key, batch)
        step = await asyncio.shield(batch.ready)
        if host not in step.io:
            raise ConnectFailure("slurm", self.down.get(host, "left out of the srun step"))
        return step, step.io[host]

    def _flush(self, key: tuple[str, str], batch: _Batch) -> None:
        if self._batches.get(key) is batch:
            del self._batches[key]
        if batch.timer is not None:
            batch.timer.cancel()
        if batch.ready.done():
            return
        order = [h for h in self.hosts if h in batch.requests]
        gone = [h for h in order if h in self.down]
        if gone:  # Slurm says they cannot run a step: they must not abort it for the rest
            order = [h for h in order if h not in self.down]
        if not order:
            batch.ready.set_exception(
                ConnectFailure("slurm", self.down.get(gone[0], "no node left to reach"))
            )
            batch.ready.exception()  # retrieved: callers re-raise it themselves
            return
        step = SrunStep(self, batch.probe, batch.python, order)
        self.steps.add(step)
        self.peak_steps = max(self.peak_steps, len(self.steps))

        async def _go() -> None:
            try:
                await step.start({h: batch.requests[h][0] for h in order})
            except ConnectFailure as exc:
                self.steps.discard(step)
                batch.ready.set_exception(exc)
                return
            batch.ready.set_result(step)

        self._starting.add(asyncio.ensure_future(_go()))

    async def prepare(self) -> None:
        """Once: ask Slurm which of the job's nodes cannot run a step (DOWN, NOT_RESPONDING:
        srun would refuse the whole step with them in it) and which are draining."""
        async with self._prepare_lock:
            if self._prepared:
                return
            self._prepared = True
            from ddptui.sources.slurm import parse_node_states, unusable_nodes

            try:
                proc = await asyncio.create_subprocess_exec(
                    "scontrol", "show", "node", "-o", compress(self.hosts),
                    stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.DEVNULL, env=step_env(self.options),
                )  # fmt: skip
            except OSError:
                return  # srun itself will say what is wrong
            try:
                out, _ = await asyncio.wait_for(proc.communicate(), PREPARE_TIMEOUT_S)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
                return
            states, reasons = parse_node_states(out.decode("utf-8", "replace"))
            self.down = unusable_nodes(self.hosts, states, reasons)
            for host, state in states.items():
                if "DRAIN" in state and host in self.hosts:
                    why = reasons.get(host)
                    self.drained[host] = f"Slurm marks it {state}" + (f" ({why})" if why else "")

    def forget(self, step: SrunStep) -> None:
        self.steps.discard(step)

    async def scancel_step(self, step_id: str) -> None:
        """Cancel ONE step that this group started, by its full id JOB.STEP."""
        if not step_id.isdigit():
            return
        with contextlib.suppress(OSError):
            proc = await asyncio.create_subprocess_exec(
                self.options.scancel, f"{self.options.job}.{step_id}",
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                env=step_env(self.options),
            )  # fmt: skip
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(proc.wait(), 10)
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()

    async def close(self) -> None:
        """End every step this group started (bounded); none of the user's."""
        self.closed = True
        for key, batch in list(self._batches.items()):
            self._batches.pop(key, None)
            if batch.timer is not None:
                batch.timer.cancel()
            if not batch.ready.done():
                batch.ready.set_exception(ConnectFailure("lost", "the run stopped"))
        await asyncio.gather(*(s.terminate() for s in list(self.steps)), return_exceptions=True)


class SrunTransport(Transport):
    """One node's face of an SrunGroup (the steps and the runner see one per node)."""

    kind = "srun"

    def __init__(self, target: NodeTarget, group: SrunGroup) -> None:
        super().__init__(target)
        self.group = group
        self._summary: str | None = None
        self._steps: dict[int, SrunStep] = {}  # id(ProbeRun) -> the step it runs in

    async def connect(self) -> str:
        if self._summary is not None:
            return self._summary
        await self.group.prepare()
        started = time.monotonic()
        for _attempt in range(2):
            why = self.group.down.get(self.target.host)
            if why is not None:
                raise ConnectFailure("slurm", why)
            down_before = len(self.group.down)
            run = await self.start_probe("echo", {})
            out = await run.wait(30)
            step = self._steps.pop(id(run), None)
            if out.first("hello") is not None and out.ok:
                break
            if len(self.group.down) == down_before:
                break
            # another node of the step could not start its task, and srun aborted the
            # whole step: try again without it (the batch leaves out known-down nodes)
        if out.first("hello") is None or not out.ok:
            problem = out.problem() or "the node printed nothing"
            tail = [ln for ln in out.stderr.strip().splitlines() if ln][-3:]
            raise ConnectFailure(
                "slurm", f"srun did not reach the node: {problem}", "\n".join(tail)
            )
        job = self.group.options.job
        sid = step.step_id if step is not None and step.step_id else "?"
        self._summary = (
            f"reached with srun --overlap (job {job}, step {job}.{sid}, "
            f"{time.monotonic() - started:.1f} s; no SSH)"
        )
        drained = self.group.drained.get(self.target.host)
        if drained:
            self._summary += f"; {drained}"
        return self._summary

    async def start_probe(
        self, name: str, params: dict[str, Any], *, on_stderr: Callable[[str], None] | None = None
    ) -> ProbeRun:
        step, io = await self.group.start(
            self.target.host, name, self.target.python, params, on_stderr
        )

        async def _wait() -> int | None:
            code = await io.exit
            step.release(io.host)
            return code

        def _force() -> None:
            step.force(io.host)
            io.stdout.end()
            io.stderr.end()
            if not io.exit.done():
                io.exit.set_result(None)

        run = ProbeRun(
            node=self.target.name,
            probe=name,
            stdin=NodeStdin(step, io.host),
            stdout=io.stdout,
            stderr_stream=io.stderr,
            wait_exit=_wait,
            force_close=_force,
            on_stderr=on_stderr,
        )
        if name == "echo":
            self._steps[id(run)] = step
        return self._track(run)

    async def close(self) -> None:
        await self._stop_probes()
