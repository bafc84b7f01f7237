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
import json
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ddptui.probeset import bootstrap_source, probe_source
from ddptui.sources.hostlist import compress
from ddptui.transport.base import STAGE0, ConnectFailure, NodeTarget, ProbeRun, Transport

SPLIT_CHUNK = 1024  # slurmstepd cuts longer lines into 1024-byte pieces, each labelled
BATCH_WINDOW_S = 0.25
PREPARE_TIMEOUT_S = 15.0  # requests for one probe within this window share one srun step
STOP_GRACE_S = 3.0
NODE_MARK = "ddptui-node "
EXIT_MARK = "ddptui-exit "
_LABEL = re.compile(rb"^\s*(\d+): ?(.*)$", re.S)
# srun's words when one node cannot start its task: the whole step is then aborted
_LAUNCH_FAILED = re.compile(r"Task launch for StepId=\S+ failed on node (\S+?): (.*)$")
# Environment that would shape our steps like the user's (srun reads these as defaults
# inside salloc/sbatch); our own flags say what a probe step needs.
STEP_SHAPING_ENV = (
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_NTASKS_PER_SOCKET",
    "SLURM_NTASKS_PER_CORE",
    "SLURM_NTASKS_PER_GPU",
    "SLURM_CPUS_PER_TASK",
    "SLURM_CPUS_PER_GPU",
    "SLURM_MEM_PER_CPU",
    "SLURM_MEM_PER_GPU",
    "SLURM_MEM_PER_NODE",
    "SLURM_GPUS",
    "SLURM_GPUS_PER_NODE",
    "SLURM_GPUS_PER_TASK",
    "SLURM_GPUS_PER_SOCKET",
    "SLURM_TRES_PER_TASK",
    "SLURM_DISTRIBUTION",
    "SLURM_EXACT",
    "SLURM_EXCLUSIVE",
    "SLURM_CPU_BIND",
    "SLURM_HINT",
    "SLURM_NNODES",
    "SLURM_NODELIST",
    "SLURM_STEP_GRES",
    "SLURM_OVERLAP",
    "SLURM_CONTAINER",
    "SLURM_NETWORK",
    "SLURM_NO_KILL",
    "SLURM_WAIT",
    "SLURM_KILL_BAD_EXIT",
    "SLURM_LABELIO",
    "SLURM_UNBUFFEREDIO",
    "SLURM_STDINMODE",
    "SLURM_STDOUTMODE",
    "SLURM_STDERRMODE",
    "SLURM_JOB_NAME",
    "SLURM_OPEN_MODE",
)


@dataclass(frozen=True)
class SrunOptions:
    job: str
    srun: str = "srun"
    scancel: str = "scancel"
    extra_env: tuple[tuple[str, str], ...] = ()


def srun_argv(options: SrunOptions, hosts: list[str], python: str, probe: str) -> list[str]:
    """The argv of one probe step (see the module docstring for each flag)."""
    n = str(len(hosts))
    return [
        options.srun, "--jobid", options.job, "--overlap",
        "--nodelist", compress(hosts), "--nodes", n, "--ntasks", n, "--ntasks-per-node=1",
        "--label", "--kill-on-bad-exit=0", "--mem=0", "--cpu-bind=none", "--input=all",
        "--export=ALL", f"--job-name=ddptui-{probe}",
        python, "-u", "-c", STAGE0,
    ]  # fmt: skip


def step_env(options: SrunOptions) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in STEP_SHAPING_ENV}
    env.update(dict(options.extra_env))
    return env


def frame_group_payload(name: str, params: dict[str, dict[str, Any]]) -> bytes:
    """Bootstrap, then ONE payload for every node: the params all nodes share once
    (`common`), each node's own difference (`by_node`, keyed by Slurm's node name)."""
    values = list(params.values())
    common = {k: v for k, v in values[0].items() if all(k in p and p[k] == v for p in values[1:])}
    by_node = {host: {k: v for k, v in p.items() if k not in common} for host, p in params.items()}
    boot = bootstrap_source().encode("utf-8")
    payload = json.dumps(
        {"name": name, "source": probe_source(name), "common": common, "by_node": by_node},
        separators=(",", ":"),
    ).encode("utf-8")
    return b"%d\n%s%d\n%s" % (len(boot), boot, len(payload), payload)


class _Lines:
    """A StreamReader-like line source fed by the demultiplexer."""

    def __init__(self) -> None:
        self._q: asyncio.Queue[bytes] = asyncio.Queue()
        self._ended = False

    def feed(self, line: bytes) -> None:
        if not self._ended:
            self._q.put_nowait(line)

    def end(self) -> None:
        if not self._ended:
            self._ended = True
            self._q.put_nowait(b"")

    async def readline(self) -> bytes:
        line = await self._q.get()
        if not line:
            self._q.put_nowait(b"")  # stay at end for later readers
        return line


class _NodeStdin:
    """A node's view of the step's stdin: its end-of-file is a vote; the step's stdin
    closes when every node of the step is stopped or done."""

    def __init__(self, step: _Step, host: str) -> None:
        self._step, self._host = step, host

    def write(self, data: bytes) -> None:  # the payload was written once for all
        return

    def write_eof(self) -> None:
        self._step.release(self._host)

    def close(self) -> None:
        self._step.release(self._host)


@dataclass
class _NodeIO:
    host: str
    stdout: _Lines = field(default_factory=_Lines)
    stderr: _Lines = field(default_factory=_Lines)
    exit: asyncio.Future[int | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    released: bool = False


class _Step:
    """One srun process: one probe on several nodes of the job."""

    def __init__(
        self,
        group: SrunGroup,
        probe: str,
        python: str,
        hosts: list[str],
        io: dict[str, _NodeIO] | None = None,
        retry: bool = True,
    ) -> None:
        self.group, self.probe, self.python, self.hosts = group, probe, python, hosts
        self.io = io if io is not None else {h: _NodeIO(h) for h in hosts}
        self.retry = retry  # may this step be started again without a node srun lost?
        self.moved: dict[str, _Step] = {}  # host -> the step that runs it now
        self.params: dict[str, dict[str, Any]] = {}
        self.task_host: dict[int, str] = {}
        self.pending: dict[int, list[tuple[str, bytes]]] = {}
        self.step_id: str | None = None
        self.proc: asyncio.subprocess.Process | None = None
        self.srun_errors: list[str] = []
        self._pumps: list[asyncio.Task[None]] = []
        self._tasks: list[asyncio.Future[None]] = []  # reaper, terminator: kept referenced
        self._closed_stdin = False
        self.done = asyncio.Event()

    async def start(self, params: dict[str, dict[str, Any]]) -> None:
        self.params = params
        argv = srun_argv(self.group.options, self.hosts, self.python, self.probe)
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=step_env(self.group.options),
                limit=4 * 1024 * 1024,
                start_new_session=True,  # a terminal's ^C goes to ddptui, which stops us
            )
        except OSError as exc:
            raise ConnectFailure(
                "other", f"cannot start {self.group.options.srun!r}: {exc.strerror or exc}"
            ) from None
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr
        with contextlib.suppress(OSError, RuntimeError):
            self.proc.stdin.write(frame_group_payload(self.probe, params))
        self._pumps = [
            asyncio.ensure_future(self._pump(self.proc.stdout, "out")),
            asyncio.ensure_future(self._pump(self.proc.stderr, "err")),
        ]
        self._tasks.append(asyncio.ensure_future(self._reap()))

    async def _pump(self, stream: asyncio.StreamReader, which: str) -> None:
        partial: dict[int, bytes] = {}  # task -> the pieces of a line cut by slurmstepd
        with contextlib.suppress(OSError, ValueError, ConnectionError):
            while True:
                line = await stream.readline()
                if not line:
                    break
                m = _LABEL.match(line)
                if m is None:
                    # srun's own words ("srun: error: ..."): evidence for every node
                    text = line.decode("utf-8", "replace").rstrip()
                    if text and len(self.srun_errors) < 50:
                        self.srun_errors.append(text)
                    continue
                task, body = int(m.group(1)), m.group(2)
                piece = body[:-1] if body.endswith(b"\n") else body
                if len(piece) == SPLIT_CHUNK:
                    # a long line (a big JSON record) arrives in pieces: join them
                    partial[task] = partial.get(task, b"") + piece
                    continue
                self._route(task, which, partial.pop(task, b"") + piece + b"\n")

    def _route(self, task: int, which: str, body: bytes) -> None:
        host = self.task_host.get(task)
        if host is None:
            text = body.decode("utf-8", "replace").strip()
            if which == "out" and text.startswith(NODE_MARK):
                parts = text[len(NODE_MARK) :].split()
                if parts and parts[0] in self.io:
                    self.task_host[task] = parts[0]
                    if len(parts) > 1 and parts[1].isdigit():
                        self.step_id = parts[1]
                    for w, b in self.pending.pop(task, []):
                        self._route(task, w, b)
                    return
            self.pending.setdefault(task, []).append((which, body))
            return
        io = self.io[host]
        if which == "out":
            text = body.decode("utf-8", "replace").strip()
            if text.startswith(EXIT_MARK):
                code = text[len(EXIT_MARK) :]
                if not io.exit.done():
                    io.exit.set_result(int(code) if code.lstrip("-").isdigit() else None)
                return
            io.stdout.feed(body)
        else:
            io.stderr.feed(body)

    async def _reap(self) -> None:
        assert self.proc is not None
        rc = await self.proc.wait()
        await asyncio.gather(*self._pumps, return_exceptions=True)
        lost: set[str] = set()
        for text in self.srun_errors:
            m = _LAUNCH_FAILED.search(text)
            if m and m.group(1) in self.io:
                lost.add(m.group(1))
                self.group.down.setdefault(
                    m.group(1), f"srun could not start a task there: {m.group(2).strip()}"
                )
        unmapped = set(self.hosts) - set(self.task_host.values())
        again = [
            h for h in self.hosts
            if h in unmapped and h not in lost and not self.io[h].released
            and not self.io[h].exit.done()
        ]  # fmt: skip
        if lost and again and self.retry and not self.group.closed:
            # srun aborted the whole step for the nodes it lost: the others run the same
            # probe again in a new step, on the same per-node streams (their ProbeRuns
            # never notice), once.
            await self._rerun(again)
        for host, io in self.io.items():
            if host in self.moved:
                continue
            if not io.exit.done():
                if io.host in unmapped:
                    # The task never started (srun could not create the step, the node
                    # is gone): srun's own words are this node's stderr, the line about
                    # this very node last (the finding quotes the last line).
                    mine = [t for t in self.srun_errors if f"node {host}:" in t]
                    for text in [t for t in self.srun_errors if t not in mine] + mine:
                        io.stderr.feed((text + "\n").encode())
                    io.exit.set_result(rc if rc not in (0, None) else None)
                else:
                    io.exit.set_result(None)  # started, then vanished without a status
            io.stdout.end()
            io.stderr.end()
        self.done.set()
        self.group.forget(self)

    async def _rerun(self, hosts: list[str]) -> None:
        step = _Step(
            self.group, self.probe, self.python, hosts,
            io={h: self.io[h] for h in hosts}, retry=False,
        )  # fmt: skip
        self.group.steps.add(step)
        try:
            await step.start({h: self.params[h] for h in hosts})
        except ConnectFailure:
            self.group.steps.discard(step)
            return
        for h in hosts:
            self.moved[h] = step

    def release(self, host: str) -> None:
        """One node's run is stopped (or finished): when all are, close srun's stdin."""
        if host in self.moved:
            self.moved[host].release(host)
            return
        self.io[host].released = True
        if all(io.released or io.exit.done() for io in self.io.values()):
            self.close_stdin()

    def close_stdin(self) -> None:
        if self._closed_stdin or self.proc is None or self.proc.stdin is None:
            return
        self._closed_stdin = True
        with contextlib.suppress(OSError, RuntimeError):
            self.proc.stdin.close()

    def force(self, host: str) -> None:
        """A node whose probe did not stop in its grace: when every node of the step
        is past that point, end the step (terminate)."""
        if host in self.moved:
            self.moved[host].force(host)
            return
        self.io[host].released = True
        if all(io.released or io.exit.done() for io in self.io.values()):
            self._tasks.append(asyncio.ensure_future(self.terminate()))

    async def terminate(self, grace: float = STOP_GRACE_S) -> None:
        """Lifeline, then SIGTERM to our srun, then scancel of OUR step, then SIGKILL."""
        self.close_stdin()
        if self.proc is None or await self._ended(grace):
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        if await self._ended(grace):
            return
        if self.step_id is not None:
            await self.group.scancel_step(self.step_id)
            if await self._ended(grace):
                return
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        await self._ended(grace)

    async def _ended(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(asyncio.shield(self.done.wait()), timeout)
        except asyncio.TimeoutError:
            return False
        return True


@dataclass
class _Batch:
    probe: str
    python: str
    requests: dict[str, tuple[dict[str, Any], Callable[[str], None] | None]] = field(
        default_factory=dict
    )
    ready: asyncio.Future[_Step] = field(
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
        self.steps: set[_Step] = set()
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
    ) -> tuple[_Step, _NodeIO]:
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
        step = _Step(self, batch.probe, batch.python, order)
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

    def forget(self, step: _Step) -> None:
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
        self._steps: dict[int, _Step] = {}  # id(ProbeRun) -> the step it runs in

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
            stdin=_NodeStdin(step, io.host),
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
