"""One srun step: one probe on several nodes of a Slurm job, its labelled output
demultiplexed into per-node streams (see ddptui.transport.srun for the whole design)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
from dataclasses import dataclass, field
from typing import Any, Protocol

from ddptui.probeset import bootstrap_source, probe_source
from ddptui.sources.hostlist import compress
from ddptui.transport.base import STAGE0, ConnectFailure


class StepOwner(Protocol):
    """What a step needs of its group (SrunGroup)."""

    options: SrunOptions
    down: dict[str, str]
    closed: bool
    steps: set[Any]

    def forget(self, step: Any) -> None: ...

    async def scancel_step(self, step_id: str) -> None: ...


SPLIT_CHUNK = 1024  # slurmstepd cuts longer lines into 1024-byte pieces, each labelled
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


class NodeStdin:
    """A node's view of the step's stdin: its end-of-file is a vote; the step's stdin
    closes when every node of the step is stopped or done."""

    def __init__(self, step: SrunStep, host: str) -> None:
        self._step, self._host = step, host

    def write(self, data: bytes) -> None:
        # The payload was written once for all. What follows are commands for a long-lived
        # probe (its INBOX lines, e.g. the fabric step's rounds): srun broadcasts stdin
        # (--input=all), so every node of the step sees every line, and each line names
        # the node it is for.
        self._step.send(self._host, data)

    def write_eof(self) -> None:
        self._step.release(self._host)

    def close(self) -> None:
        self._step.release(self._host)


@dataclass
class NodeIO:
    host: str
    stdout: _Lines = field(default_factory=_Lines)
    stderr: _Lines = field(default_factory=_Lines)
    exit: asyncio.Future[int | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    released: bool = False


class SrunStep:
    """One srun process: one probe on several nodes of the job."""

    def __init__(
        self,
        group: StepOwner,
        probe: str,
        python: str,
        hosts: list[str],
        io: dict[str, NodeIO] | None = None,
        retry: bool = True,
    ) -> None:
        self.group, self.probe, self.python, self.hosts = group, probe, python, hosts
        self.io = io if io is not None else {h: NodeIO(h) for h in hosts}
        self.retry = retry  # may this step be started again without a node srun lost?
        self.moved: dict[str, SrunStep] = {}  # host -> the step that runs it now
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

    def send(self, host: str, data: bytes) -> None:
        """Command lines for `host`'s probe, through the step that runs it now."""
        step = self.moved.get(host, self)
        if step.proc is None or step.proc.stdin is None or step._closed_stdin:
            return
        with contextlib.suppress(OSError, RuntimeError):
            step.proc.stdin.write(data)

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
        step = SrunStep(
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
