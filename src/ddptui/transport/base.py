"""The transport protocol: connect to a node, ship a probe over stdin, stream its JSON lines.

No asyncssh here: core code (steps, runner) imports this module only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ddptui.probeset import bootstrap_source, probe_source
from ddptui.transport.redact import scrub

PROTOCOL_VERSION = 1
STDERR_KEEP = 64 * 1024
MAX_RECORDS = 10_000

# Stage 0 is all that travels on the command line: it reads the bootstrap from
# stdin and runs it. No value from a config or node is ever part of it; the
# interpreter path is shlex-quoted (see remote_command).
STAGE0 = "import sys;exec(sys.stdin.buffer.read(int(sys.stdin.buffer.readline())))"


PID_MARK = "ddptui-pid "


def remote_command(python: str) -> str:
    """The one shell command sent to a node; every part is quoted. It first prints the
    session's pid (sshd makes it a process-group leader, and exec keeps the pid), so a
    probe whose interpreter never reaches the bootstrap can still be killed by its own
    group id: the last resort behind the stdin lifeline."""
    return f"echo {PID_MARK}$$; exec {shlex.quote(python)} -u -c {shlex.quote(STAGE0)}"


def frame_payload(name: str, params: dict[str, Any]) -> bytes:
    """Bootstrap then payload, each as '<length>\\n<bytes>'."""
    boot = bootstrap_source().encode("utf-8")
    payload = json.dumps(
        {"name": name, "source": probe_source(name), "params": params}, separators=(",", ":")
    ).encode("utf-8")
    return b"%d\n%s%d\n%s" % (len(boot), boot, len(payload), payload)


@dataclass(frozen=True)
class NodeTarget:
    """One node as the transports and steps see it."""

    name: str
    host: str
    rank: int
    python: str
    user: str | None = None
    port: int | None = None


class ConnectFailure(Exception):
    """A node could not be reached or logged into; `kind` says why."""

    KINDS = (
        "auth",
        "hostkey-unknown",
        "hostkey-changed",
        "timeout",
        "refused",
        "noroute",
        "dns",
        "disconnect",
        "lost",
        "slurm",
        "other",
    )

    def __init__(self, kind: str, message: str, evidence: str = "") -> None:
        super().__init__(message)
        assert kind in self.KINDS, kind
        self.kind = kind
        self.message = message
        self.evidence = evidence


@dataclass(frozen=True)
class ProbeOutput:
    """Everything one probe run produced on one node."""

    node: str
    probe: str
    records: tuple[dict[str, Any], ...]
    stderr: str
    exit_status: int | None
    duration_s: float
    timed_out: bool = False
    lost: bool = False
    garbage: tuple[str, ...] = ()

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("kind") == kind]

    def first(self, kind: str) -> dict[str, Any] | None:
        for r in self.records:
            if r.get("kind") == kind:
                return r
        return None

    @property
    def ok(self) -> bool:
        return self.exit_status == 0 and not self.timed_out and not self.lost

    def problem(self) -> str | None:
        """Why this run is unusable, in words; None when it ran fine."""
        if self.lost:
            return "the connection to the node was lost while the probe ran"
        if self.timed_out:
            return f"the probe did not finish within {self.duration_s:.0f} s"
        err = self.first("error")
        if err is not None:
            return scrub(str(err.get("message", "probe reported an error")))
        if self.exit_status == 127:
            return "the node's python was not found (check `python:` in the config)"
        if self.exit_status != 0:
            tail = self.stderr.strip().splitlines()[-1:] or ["no output"]
            return f"the probe exited with status {self.exit_status}: {tail[0]}"
        return None


class _Reader(Protocol):
    async def readline(self) -> bytes: ...


class _Writer(Protocol):
    def write(self, data: bytes) -> None: ...
    def write_eof(self) -> None: ...
    def close(self) -> None: ...


@dataclass
class ProbeRun:
    """A probe running on a node: records stream in; stop() closes the lifeline."""

    node: str
    probe: str
    stdin: _Writer
    stdout: _Reader
    stderr_stream: _Reader
    wait_exit: Callable[[], Awaitable[int | None]]
    force_close: Callable[[], None]
    kill_group: Callable[[int], Awaitable[None]] | None = None
    on_stderr: Callable[[str], None] | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    garbage: list[str] = field(default_factory=list)
    stderr_tail: bytearray = field(default_factory=bytearray)
    started: float = field(default_factory=time.monotonic)
    _queue: asyncio.Queue[dict[str, Any] | None] = field(default_factory=asyncio.Queue)
    _pumps: list[asyncio.Task[None]] = field(default_factory=list)
    _timed_out: bool = False
    remote_pid: int | None = None
    stdout_bytes: int = 0  # what the node sent, as it came over the wire
    _result: ProbeOutput | None = None

    def start_pumps(self) -> None:
        self._pumps = [
            asyncio.ensure_future(self._pump_stdout()),
            asyncio.ensure_future(self._pump_stderr()),
        ]

    async def _pump_stdout(self) -> None:
        try:
            while True:
                line = await self.stdout.readline()
                if not line:
                    break
                self.stdout_bytes += len(line)
                text = line.decode("utf-8", "replace").strip()
                if not text:
                    continue
                if self.remote_pid is None and text.startswith(PID_MARK):
                    pid = text[len(PID_MARK) :]
                    self.remote_pid = int(pid) if pid.isdigit() else None
                    continue
                record = _parse_record(text)
                if record is None:
                    if len(self.garbage) < 200:
                        # Raw node text: scrubbed (before the cut, so no half secret stays).
                        self.garbage.append(scrub(text)[:500])
                    continue
                if len(self.records) < MAX_RECORDS:
                    self.records.append(record)
                self._queue.put_nowait(record)
        except (OSError, EOFError, ConnectionError):
            pass  # the stream ended with the connection; wait_exit reports it
        finally:
            self._queue.put_nowait(None)

    async def _pump_stderr(self) -> None:
        with contextlib.suppress(OSError, EOFError, ConnectionError):
            while True:
                line = await self.stderr_stream.readline()
                if not line:
                    break
                self.stderr_tail += line
                if len(self.stderr_tail) > STDERR_KEEP:
                    del self.stderr_tail[: len(self.stderr_tail) - STDERR_KEEP]
                    cut = self.stderr_tail.find(b"\n")  # no half line (half a secret) first
                    del self.stderr_tail[: cut + 1]
                if self.on_stderr is not None:
                    self.on_stderr(scrub(line.decode("utf-8", "replace").rstrip("\n")))

    def send(self, command: dict[str, Any]) -> bool:
        """One command line to the probe (the bootstrap queues it in the probe's INBOX).
        False when the node's side is gone."""
        line = json.dumps(command, separators=(",", ":")).encode("utf-8") + b"\n"
        try:
            self.stdin.write(line)
        except (OSError, ConnectionError, BrokenPipeError, RuntimeError):
            return False
        return True

    async def next_record(
        self, kind: str | None = None, timeout: float | None = None
    ) -> dict[str, Any] | None:
        """The next record (of `kind` when given); None when the probe ended first."""

        async def _next() -> dict[str, Any] | None:
            while True:
                rec = await self._queue.get()
                if rec is None:
                    self._queue.put_nowait(None)  # keep the end visible to later callers
                    return None
                if kind is None or rec.get("kind") == kind:
                    return rec

        return await asyncio.wait_for(_next(), timeout)

    async def wait(self, timeout: float | None = None) -> ProbeOutput:
        """Wait for the probe to finish; on timeout it is stopped and marked timed out."""
        if self._result is not None:
            return self._result
        try:
            status = await asyncio.wait_for(self._finish(), timeout)
        except asyncio.TimeoutError:
            self._timed_out = True
            return await self.stop()
        return self._output(status)

    async def _finish(self) -> int | None:
        status = await self.wait_exit()
        await asyncio.gather(*self._pumps, return_exceptions=True)
        return status

    async def stop(self, grace: float = 4.0) -> ProbeOutput:
        """Close the lifeline: the bootstrap kills the probe's process tree, then exits."""
        if self._result is not None:
            return self._result
        with contextlib.suppress(OSError, ConnectionError, BrokenPipeError, RuntimeError):
            self.stdin.write_eof()
        try:
            status = await asyncio.wait_for(asyncio.shield(self._finish()), grace)
        except asyncio.TimeoutError:
            # The bootstrap did not react (the interpreter hangs before reading stdin):
            # kill the session's process group by the pid it announced, then drop it.
            if self.kill_group is not None and self.remote_pid:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.kill_group(self.remote_pid), 5)
            self.force_close()
            try:
                status = await asyncio.wait_for(self._finish(), 2.0)
            except asyncio.TimeoutError:
                status = None
                for task in self._pumps:
                    task.cancel()
        return self._output(status)

    def _output(self, status: int | None) -> ProbeOutput:
        if self._result is None:
            self._result = ProbeOutput(
                node=self.node,
                probe=self.probe,
                records=tuple(self.records),
                # Raw node text, never seen by the probes' redaction: scrubbed here.
                stderr=scrub(self.stderr_tail.decode("utf-8", "replace")),
                exit_status=status,
                duration_s=time.monotonic() - self.started,
                timed_out=self._timed_out,
                lost=status is None and not self._timed_out,
                garbage=tuple(self.garbage),
            )
        return self._result


def _parse_record(text: str) -> dict[str, Any] | None:
    if not text.startswith("{"):
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict) or obj.get("v") != PROTOCOL_VERSION or "kind" not in obj:
        return None
    return obj


class Transport(ABC):
    """One node. Steps use only this interface."""

    kind: str = "abstract"

    def __init__(self, target: NodeTarget) -> None:
        self.target = target
        self._runs: list[ProbeRun] = []

    def _track(self, run: ProbeRun) -> ProbeRun:
        """Start streaming a new probe and remember it, so close() can stop it."""
        run.start_pumps()
        self._runs = [r for r in self._runs if r._result is None] + [run]
        return run

    async def _stop_probes(self) -> None:
        runs, self._runs = self._runs, []
        await asyncio.gather(*(r.stop() for r in runs), return_exceptions=True)

    @abstractmethod
    async def connect(self) -> str:
        """Open (or reuse) the connection; returns a one-line summary. Raises ConnectFailure."""

    @abstractmethod
    async def start_probe(
        self, name: str, params: dict[str, Any], *, on_stderr: Callable[[str], None] | None = None
    ) -> ProbeRun:
        """Start probe `name` with `params` (sent as JSON on stdin)."""

    @abstractmethod
    async def close(self) -> None:
        """Stop every probe still running and drop the connection."""

    async def run_probe(self, name: str, params: dict[str, Any], *, timeout: float) -> ProbeOutput:
        run = await self.start_probe(name, params)
        return await run.wait(timeout)
