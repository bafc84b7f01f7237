"""`NODE:GLOB` inputs: the logread probe reads the files on the node (read-only, the last
max_bytes of each, every line redacted there) and streams them back as records; they are
spooled to a private temporary folder and diagnosed like local files.  Core layer: the
transport is ddptui's own (SSH or local), reached through its interface."""

from __future__ import annotations

import asyncio
import secrets
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from ddptui.logs.inputs import Inputs

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


def _take(
    rec: dict[str, Any], node: str, spool: Spool, spooled: dict[str, Any],
    files: list[tuple[str, Path]], problems: list[str],
) -> None:
    """One record of the logread probe."""
    kind, path = rec.get("kind"), str(rec.get("path", ""))
    if kind == "file":
        target = spool.new_file()
        spooled[path] = target.open("w", encoding="utf-8")
        files.append((f"{node}:{path}", target))
    elif kind == "lines" and path in spooled:
        spooled[path].write(str(rec.get("text", "")) + "\n")
    elif kind == "file_error":
        problems.append(f"{node}:{path}: {rec.get('error')}")
    elif kind == "error":
        problems.append(f"{node}: log reader failed: {rec.get('message')}")
    elif kind == "nomatch":
        problems.append(f"{node}: no file matches {rec.get('glob')!r}")


async def _read_node(
    transport: Any, node: str, globs: list[str], params: dict[str, Any], spool: Spool,
    inputs: Inputs, files: list[tuple[str, Path]], timeout: float,
) -> None:
    from ddptui.transport.base import ConnectFailure

    try:
        await transport.connect()
        run = await transport.start_probe(PROBE, {**params, "globs": globs})
    except ConnectFailure as exc:
        inputs.problems.append(f"{node}: cannot connect: {exc}")
        return
    spooled: dict[str, Any] = {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        while True:
            left = deadline - loop.time()
            if left <= 0:
                inputs.problems.append(f"{node}: reading the logs took over {timeout:.0f} s; stopped")
                break
            try:
                rec = await run.next_record(timeout=left)
            except asyncio.TimeoutError:
                continue
            if rec is None:
                break
            run.records.clear()  # records are spooled to disk: memory stays bounded
            _take(rec, node, spool, spooled, files, inputs.problems)
        out = await run.wait(5.0)
        problem = out.problem()
        if problem and not any(p.startswith(f"{node}: ") for p in inputs.problems):
            inputs.problems.append(f"{node}: log reader failed: {problem}")
    finally:
        for fh in spooled.values():
            fh.close()
        await run.stop()


async def _read_all(
    config_path: str, specs: Sequence[str], inputs: Inputs, spool: Spool, max_bytes: int
) -> tuple[list[tuple[str, Path]], dict[str, str]]:
    from ddptui.checklist.runner import targets_from
    from ddptui.cluster import config_for
    from ddptui.transport import close_transports, make_transports

    config = config_for(config_path)  # a cluster.yaml, or --slurm/--hostfile's cluster
    targets = targets_from(config)
    per_node = split_specs(specs, [t.name for t in targets])
    chosen = [t for t in targets if t.name in per_node]
    transports = make_transports(config, chosen)
    params = {"max_bytes": max_bytes, "salt": secrets.token_hex(8)}
    timeout = config.timeouts.step + SLACK_S
    files: dict[str, list[tuple[str, Path]]] = {t.name: [] for t in chosen}
    try:
        await asyncio.gather(
            *(
                _read_node(
                    transports[t.name], t.name, per_node[t.name], params, spool, inputs,
                    files[t.name], timeout,
                )
                for t in chosen
            )
        )
    finally:
        await close_transports(transports)
    hosts = {label: t.name for t in chosen for label, _ in files[t.name]}
    return [f for t in chosen for f in files[t.name]], hosts


def read_remote(
    config_path: str, specs: Sequence[str], inputs: Inputs, *, max_bytes: int
) -> tuple[Spool, dict[str, str]]:
    """Read NODE:GLOB specs on the nodes into `inputs`; (spool to clean up, {label: node})."""
    spool = Spool()
    try:
        files, hosts = asyncio.run(_read_all(config_path, specs, inputs, spool, max_bytes))
        for label, path in files:
            fh = path.open("rb")
            inputs.add_stream(fh, label, fh.close)
    except BaseException:
        spool.cleanup()
        raise
    return spool, hosts
