"""`NODE:GLOB` inputs: the logread probe reads the files on the node (read-only, the last
max_bytes of each, every line redacted there), runs the diagnosis' own prefilter on them
there and sends back only the blocks of lines the diagnosis looks at, with their line
numbers and each file's counts (probes/_linescan.py); they are spooled to a private
temporary folder and diagnosed as the whole files would be.  Core layer: the
transport is ddptui's own (SSH or local), reached through its interface."""

from __future__ import annotations

import asyncio
import secrets
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ddptui.logs.inputs import Inputs
from ddptui.logs.pipes import Pipe, spooled_blocks
from ddptui.logs.reader import ReadStats
from ddptui.logs.scan import node_filter
from ddptui.logs.sharedfs import Plan, SharedFile, Sighting, plan

PROBE: Final = "logread"
SLACK_S: Final = 120.0  # reading and redacting 64 MiB on a slow node


def load_config_nodes(path: str) -> list[str]:
    """The configured nodes' names (ConfigError when the config is not valid)."""
    from ddptui.cluster import config_for

    return [n.display for n in config_for(path).nodes]


def is_remote_spec(spec: str, names: Sequence[str]) -> bool:
    node, sep, rest = spec.partition(":")
    return bool(sep and rest) and (node == "*" or node in names)


def split_specs(specs: Sequence[str], names: Sequence[str]) -> dict[str, list[str]]:
    """{node: [globs]} for NODE:GLOB and *:GLOB specs, in config order."""
    out: dict[str, list[str]] = {}
    for spec in specs:
        node, _, pattern = spec.partition(":")
        for name in names if node == "*" else [node]:
            out.setdefault(name, []).append(pattern)
    return {n: out[n] for n in names if n in out}


class Spool:
    """The spooled files of one run, removed by cleanup()."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="ddptui-logs-")
        self.root = Path(self._dir.name)
        self._count = 0

    def new_file(self) -> Path:
        self._count += 1
        return self.root / f"{self._count}.log"

    def cleanup(self) -> None:
        self._dir.cleanup()


@dataclass
class RemoteRead:
    """What reading NODE:GLOB specs did: the spool to clean up, where each input was read,
    the plan (which files were one file seen from several nodes), notes per file, and
    the nodes' host names (for naming the node a log's host name points at)."""

    spool: Spool
    hosts: dict[str, str] = field(default_factory=dict)  # label -> node that read it
    plan: Plan = field(default_factory=Plan)
    notes: list[str] = field(default_factory=list)
    hostnames: dict[str, str] = field(default_factory=dict)  # node -> its hostname
    order: list[str] = field(default_factory=list)  # the config's node order
    nproc_per_node: int | None = 1
    files: dict[str, SharedFile] = field(default_factory=dict)  # label -> file
    node_bytes: dict[str, int] = field(default_factory=dict)  # bytes the probes read, per node
    node_cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds of each read
    node_sent: dict[str, int] = field(default_factory=dict)  # bytes each read sent back
    opened: set[str] = field(default_factory=set)  # labels the nodes could open and send
    finish: Callable[[], None] = lambda: None  # wait for the reads (after the diagnosis)
    cancel: Callable[[], None] = lambda: None  # stop the reads (an error, Ctrl-C)


def _take(
    rec: dict[str, Any], node: str, pipes: Mapping[str, Pipe], problems: list[str],
    labels: Mapping[str, str], notes: list[str],
) -> None:
    """One record of the logread probe; `pipes` by the path on the node."""
    kind, path = rec.get("kind"), str(rec.get("path", ""))
    label = labels.get(path, f"{node}:{path}")
    pipe = pipes.get(path)
    if kind == "file" and pipe is not None:
        pipe.open()
    elif kind == "seg" and pipe is not None and isinstance(rec.get("first"), int):
        pipe.segment(rec["first"], str(rec.get("text", "")), bool(rec.get("more")))
    elif kind == "file_end":
        if rec.get("replaced"):
            notes.append(f"{label}: replaced between the look and the read (rotated?); read the new file")
        elif isinstance(rec.get("grew"), int) and rec["grew"] > 0:
            notes.append(
                f"{label}: grew by {rec['grew']:,} bytes while it was read (a live log); "
                "read up to where it was when reading began, counted once"
            )
        if pipe is not None:
            counts = [rec.get("bytes"), rec.get("lines"), rec.get("last")]
            if all(isinstance(x, int) for x in counts):
                pipe.counted(*(int(x) for x in counts if x is not None))
            pipe.close()
    elif kind == "file_error":
        problems.append(f"{label}: {rec.get('error')}")
    elif kind == "error":
        problems.append(f"{node}: log reader failed: {rec.get('message')}")
    elif kind == "nomatch":
        problems.append(f"{node}: no file matches {rec.get('glob')!r}")


async def _records(
    run: Any, node: str, what: str, deadline: float, problems: list[str]
) -> AsyncIterator[dict[str, Any]]:
    loop = asyncio.get_running_loop()
    while True:
        left = deadline - loop.time()
        if left <= 0:
            problems.append(f"{node}: {what} took too long; stopped")
            return
        try:
            rec = await run.next_record(timeout=left)
        except asyncio.TimeoutError:
            continue
        if rec is None:
            return
        run.records.clear()  # records are spooled or kept small: memory stays bounded
        yield rec


async def _finish(run: Any, node: str, problems: list[str]) -> None:
    out = await run.wait(5.0)
    problem = out.problem()
    if problem and not any(p.startswith(f"{node}: ") for p in problems):
        problems.append(f"{node}: log reader failed: {problem}")


@dataclass
class Survey:
    """What the nodes said they would read (before anything is read)."""

    sightings: list[Sighting] = field(default_factory=list)
    hostnames: dict[str, str] = field(default_factory=dict)  # node -> its host name
    odd: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # (path, why) -> nodes
    nomatch: dict[str, list[str]] = field(default_factory=dict)  # glob -> the nodes
    problems: list[str] = field(default_factory=list)
    unreachable: set[str] = field(default_factory=set)
    node_bytes: dict[str, int] = field(default_factory=dict)

    def odd_problems(self, order: Sequence[str]) -> list[str]:
        """One note per odd file, however many nodes see it (a loop in a shared folder)."""
        rank = {n: i for i, n in enumerate(order)}

        def on(nodes: list[str]) -> str:
            return ", ".join(sorted(nodes, key=lambda n: rank.get(n, 0)))

        return [
            f"{path}: {why} (on {on(nodes)})" if len(nodes) > 1 else f"{nodes[0]}:{path}: {why}"
            for (path, why), nodes in self.odd.items()
        ] + [
            f"no file matches {glob!r} (on {on(nodes)})"
            if len(nodes) > 1
            else f"{nodes[0]}: no file matches {glob!r}"
            for glob, nodes in self.nomatch.items()
        ]


async def survey_node(
    transport: Any, node: str, globs: list[str], timeout: float, out: Survey,
    max_files: int = 256,
) -> None:
    """Ask one node what its globs match and what identifies each file (logread's survey
    mode: nothing is read but the first and last 4 KiB, hashed)."""
    from ddptui.transport.base import ConnectFailure

    try:
        await transport.connect()
        params = {"mode": "survey", "globs": globs, "max_files": max_files,
                  "deadline_s": max(5.0, timeout - 10)}
        res = await transport.run_probe(PROBE, params, timeout=timeout)
    except ConnectFailure as exc:
        out.problems.append(f"{node}: cannot connect: {exc}")
        out.unreachable.add(node)
        return
    for rec in res.records:
        kind = rec.get("kind")
        if kind == "seen":
            seen = Sighting.from_record(node, rec)
            if seen is not None:
                out.sightings.append(seen)
        elif kind == "host":
            out.hostnames[node] = str(rec.get("hostname") or "")
        elif kind == "done" and isinstance(rec.get("read_bytes"), int):
            out.node_bytes[node] = out.node_bytes.get(node, 0) + rec["read_bytes"]
        elif kind == "file_error":
            out.odd.setdefault((str(rec.get("path")), str(rec.get("error"))), []).append(node)
        elif kind == "nomatch":
            out.nomatch.setdefault(str(rec.get("glob")), []).append(node)
        else:
            _take(rec, node, {}, out.problems, {}, [])
    problem = res.problem()
    if problem and not any(p.startswith(f"{node}: ") for p in out.problems):
        out.problems.append(f"{node}: log reader failed: {problem}")


async def survey_all(
    transports: Mapping[str, Any], globs: Mapping[str, list[str]], timeout: float,
    max_files: int = 256,
) -> Survey:
    out = Survey()
    await asyncio.gather(
        *(survey_node(transports[n], n, g, timeout, out, max_files) for n, g in globs.items() if g)
    )
    return out


async def _read_node(
    transport: Any, node: str, mine: list[SharedFile], params: dict[str, Any],
    pipes: Mapping[str, Pipe], problems: list[str], deadline: float, notes: list[str],
    node_bytes: dict[str, int], node_cpu: dict[str, float], node_sent: dict[str, int],
) -> None:
    paths = [f.on(node).path for f in mine]
    labels = {f.on(node).path: f.label for f in mine}
    expect = {f.on(node).path: f.on(node).ino for f in mine}
    mypipes = {f.on(node).path: pipes[f.label] for f in mine}
    try:
        run = await transport.start_probe(
            PROBE, {**params, "mode": "read", "paths": paths, "expect": expect}
        )
        try:
            async for rec in _records(run, node, "reading the logs", deadline, problems):
                if rec.get("kind") == "done" and isinstance(rec.get("read_bytes"), int):
                    node_bytes[node] = node_bytes.get(node, 0) + rec["read_bytes"]
                if rec.get("kind") == "done" and isinstance(rec.get("cpu_s"), int | float):
                    node_cpu[node] = float(rec["cpu_s"])
                _take(rec, node, mypipes, problems, labels, notes)
            await _finish(run, node, problems)
        finally:
            await run.stop()
            node_sent[node] = node_sent.get(node, 0) + int(getattr(run, "stdout_bytes", 0))
    finally:
        for pipe in mypipes.values():  # after the node's last word: its problems are in
            pipe.close()


def _visibility_notes(plan: Plan, asked: Mapping[str, set[str]]) -> list[str]:
    """Shared files, and files on a shared filesystem that some asked nodes do not see."""
    notes = []
    for f in plan.files:
        if f.shared:
            notes.append(f"{f.label}: shared ({f.where()})")
        if not (f.shared or f.network):
            continue
        wanted = set().union(*(asked.get(s.node, set()) for s in f.sightings))
        missing = sorted(n for n, g in asked.items() if g & wanted and n not in f.nodes)
        if missing:
            notes.append(
                f"{f.label}: not seen on {', '.join(missing)} (a different mount there, "
                "or not visible yet); read where it was seen"
            )
        if f.changing:
            notes.append(f"{f.label}: the nodes saw different sizes (written to meanwhile)")
    return notes


class _Reading:
    """The nodes' survey and reads, in a thread of their own, so that the diagnosis reads
    each file while it still arrives."""

    def __init__(
        self, config: Any, specs: Sequence[str], spool: Spool, max_bytes: int,
        problems: list[str],
    ) -> None:
        from ddptui.checklist.runner import targets_from

        self.config = config
        self.targets = targets_from(config)
        order = [t.name for t in self.targets]
        self.per_node = split_specs(specs, order)
        self.spool = spool
        self.max_bytes = max_bytes
        nproc = config.nproc_per_node if isinstance(config.nproc_per_node, int) else None
        self.out = RemoteRead(spool, order=order, nproc_per_node=nproc)
        self.problems = problems  # the inputs' own list: appended to from this thread
        self.cond = threading.Condition()
        self.pipes: dict[str, Pipe] = {}
        self.planned = threading.Event()
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self.thread = threading.Thread(target=self._run, name="ddptui-logread", daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, raised there
            self.error = exc
        finally:
            for pipe in self.pipes.values():
                pipe.close()
            self.planned.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        await self._read_all()

    def cancel(self) -> None:
        loop, task = self._loop, self._task
        if loop is not None and task is not None and not loop.is_closed():
            loop.call_soon_threadsafe(task.cancel)
        self.thread.join(15)

    async def _read_all(self) -> None:
        from ddptui.transport import close_transports, make_transports

        out, order = self.out, self.out.order
        chosen = [t for t in self.targets if t.name in self.per_node]
        transports = make_transports(self.config, chosen)
        params = {"max_bytes": self.max_bytes, "salt": secrets.token_hex(8), "filter": node_filter()}
        timeout = self.config.timeouts.step + SLACK_S
        loop = asyncio.get_running_loop()
        try:
            found = await survey_all(transports, self.per_node, timeout)
            self.problems += found.problems + found.odd_problems(order)
            out.hostnames, out.node_bytes = found.hostnames, found.node_bytes
            out.plan = plan(found.sightings, order)
            asked = {n: set(g) for n, g in self.per_node.items()}
            out.notes[:0] = _visibility_notes(out.plan, asked)
            out.files = {f.label: f for f in out.plan.files}
            out.hosts = {f.label: f.reader for f in out.plan.files}
            by_reader = {n: out.plan.assigned(n) for n in order}
            for n in order:
                for f in by_reader[n]:
                    self.pipes[f.label] = Pipe(self.spool.new_file(), self.cond)
            self.planned.set()
            deadline = loop.time() + timeout
            await asyncio.gather(
                *(
                    _read_node(
                        transports[t.name], t.name, by_reader[t.name], params, self.pipes,
                        self.problems, deadline, out.notes, out.node_bytes, out.node_cpu,
                        out.node_sent,
                    )
                    for t in chosen
                    if by_reader[t.name]
                )
            )
        finally:
            await close_transports(transports)


def read_remote(
    config_path: str, specs: Sequence[str], inputs: Inputs, *, max_bytes: int
) -> RemoteRead:
    """Read NODE:GLOB specs on the nodes into `inputs`, each file once: every node first
    says what it would read, files seen from several nodes are read on one of them.  The
    reads go on in a thread while the caller diagnoses `inputs` (each stream blocks until
    its file has arrived); the caller then calls `.finish()`, and cleans up `.spool`."""
    from ddptui.cluster import config_for

    config = config_for(config_path)  # a cluster.yaml, or --slurm/--hostfile's cluster
    spool = Spool()
    reading = _Reading(config, specs, spool, max_bytes, inputs.problems)
    reading.out.finish = lambda: _finish_reading(reading)
    reading.out.cancel = reading.cancel
    try:
        reading.thread.start()
        while not reading.planned.wait(0.25):
            pass
        if reading.error is not None:
            raise reading.error
        for label in _in_order(reading.pipes, reading.out):
            stats = ReadStats(label)
            inputs.add_blocks(spooled_blocks(reading.pipes[label].reader(), stats), stats)
    except BaseException:
        reading.cancel()
        spool.cleanup()
        raise
    return reading.out


def _in_order(labels: Iterable[str], out: RemoteRead) -> list[str]:
    """The inputs by path, then by the config's order of the nodes that saw them: as a
    sorted glob lists them, whichever node answered first (lines with one time stamp, or
    none, keep this order in the diagnosis' merge)."""
    rank = {n: i for i, n in enumerate(out.order)}

    def key(label: str) -> tuple[str, int, str]:
        f = out.files.get(label)
        if f is None:
            return (label, 0, label)
        return (f.path, min((rank.get(n, len(rank)) for n in f.nodes), default=0), label)

    return sorted(labels, key=key)


def _finish_reading(reading: _Reading) -> None:
    """Wait for the reading thread (the diagnosis has read every stream to its end)."""
    reading.thread.join()
    reading.out.opened = {label for label, pipe in reading.pipes.items() if pipe.opened}
    if reading.error is not None and not isinstance(reading.error, asyncio.CancelledError):
        raise reading.error
