"""One diagnosis from the inputs a user names, as the CLI and the TUI run it: local
paths, "-", NODE:GLOB (with a config).  Core layer."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, BinaryIO

from ddptui.logs.diagnose import LogDiagnosis

if TYPE_CHECKING:
    from ddptui.logs.remote import RemoteRead
    from ddptui.logs.report import InputInfo
    from ddptui.report.schema import ReportModel


def utcnow() -> str:
    """As the checklist stamps its reports (without importing the checklist's runner)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class SpecError(ValueError):
    """An input spec that cannot be used as given; the message says what to do."""


def split_specs(
    paths: Sequence[str], config_path: str | None, exists: Any = None
) -> tuple[list[str], list[str]]:
    """(local paths, NODE:GLOB specs).  Without a config everything is local, and a
    NODE:GLOB that is no local file is a SpecError with the hint.  ConfigError when the
    config is not valid."""
    from pathlib import Path

    exists = exists or (lambda p: Path(p).exists())
    if config_path is None:
        for p in paths:
            node, sep, rest = p.partition(":")
            if sep and node and rest and "/" not in node and not exists(p):
                raise SpecError(
                    f"{p}: no such file; to read {rest!r} on node {node!r} give --config CONFIG"
                )
        return list(paths), []
    from ddptui.logs.remote import is_remote_spec, load_config_nodes

    names = load_config_nodes(config_path)
    remote = [p for p in paths if is_remote_spec(p, names)]
    return [p for p in paths if p not in remote], remote


def run_diagnosis(
    paths: Sequence[str],
    *,
    config_path: str | None = None,
    stdin: BinaryIO | None = None,
    max_bytes: int = 64 << 20,
) -> tuple[LogDiagnosis, ReportModel, float]:
    """(diagnosis, the report model, seconds).  SpecError / ConfigError / InputError for
    what the user must change; unreadable inputs are in the diagnosis' problems."""
    from ddptui.logs.inputs import Inputs, diagnose_inputs
    from ddptui.logs.report import build_log_report

    started, t0 = utcnow(), time.monotonic()
    local, remote = split_specs(paths, config_path)
    inputs = Inputs()
    for p in local:
        inputs.add_path(p, stdin)
    read = None
    if remote:
        from ddptui.logs.remote import read_remote

        read = read_remote(config_path or "", remote, inputs, max_bytes=max_bytes)
    extra: dict[str, Any] = {}
    try:
        label = ", ".join(paths) if len(paths) <= 3 else f"{len(paths)} inputs"
        diag = diagnose_inputs(inputs, label)
        if read is not None:
            read.finish()
            diag = replace(diag, problems=tuple(dict.fromkeys([*inputs.problems, *diag.problems])))
            diag, extra = _attributed(diag, read)
        infos = [
            _info(s.label, s.bytes_read, s.lines, read)
            for s in inputs.all_stats()
            if read is None or s.label not in read.files or s.label in read.opened
        ]
    finally:
        if read is not None:
            read.cancel()  # a no-op once the reads are done
            read.spool.cleanup()
    seconds = time.monotonic() - t0
    report = build_log_report(
        diag, infos, config=config_path, started_at=started, finished_at=utcnow(),
        seconds=seconds, extra=extra,
    )
    return diag, report, seconds


def _info(label: str, nbytes: int, lines: int, read: RemoteRead | None) -> InputInfo:
    from ddptui.logs.report import InputInfo

    if read is None:
        return InputInfo(label, "local", nbytes, lines)
    f = read.files.get(label)
    fs = ""
    if f is not None:
        s = f.on(f.reader) if f.reader else f.sightings[0]
        fs = f"{s.fstype} {s.source}".strip()
    return InputInfo(
        label, read.hosts.get(label, "local"), nbytes, lines,
        tuple(f.nodes) if f is not None else (), fs,
    )


def _attributed(diag: LogDiagnosis, read: RemoteRead) -> tuple[LogDiagnosis, dict[str, Any]]:
    """Findings name the node that wrote their lines; the notes say which files were one
    file seen from several nodes and where each was read."""
    from ddptui.logs.writers import Layout, attribute

    layout = Layout(tuple(read.order), read.nproc_per_node, read.hostnames)
    diag, writers = attribute(diag, read.files, layout)
    diag = replace(diag, notes=(*diag.notes, *read.notes))
    plan = read.plan
    extra = {
        "writers": {fid: w.to_dict() for fid, w in writers.items()},
        "files": [
            {
                "label": f.label,
                "path": f.path,
                "shared": f.shared,
                "network": f.network,
                "seen_on": f.nodes,
                "read_on": f.reader,
                "bytes": f.size,
            }
            for f in plan.files
        ],
        "bytes_seen": plan.bytes_seen,
        "bytes_planned": plan.bytes_planned,
        "node_read_bytes": dict(read.node_bytes),
        "node_read_cpu_s": dict(read.node_cpu),
        "node_sent_bytes": dict(read.node_sent),
        "notes": list(diag.notes),
    }
    return diag, extra
