"""One diagnosis from the inputs a user names, as the CLI and the TUI run it: local
paths, "-", NODE:GLOB (with a config).  Core layer."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, BinaryIO

from ddptui.logs.diagnose import LogDiagnosis

if TYPE_CHECKING:
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
    from ddptui.logs.report import InputInfo, build_log_report

    started, t0 = utcnow(), time.monotonic()
    local, remote = split_specs(paths, config_path)
    inputs = Inputs()
    for p in local:
        inputs.add_path(p, stdin)
    hosts: dict[str, str] = {}
    spool = None
    if remote:
        from ddptui.logs.remote import read_remote

        spool, hosts = read_remote(config_path or "", remote, inputs, max_bytes=max_bytes)
    try:
        label = ", ".join(paths) if len(paths) <= 3 else f"{len(paths)} inputs"
        diag = diagnose_inputs(inputs, label)
        infos = [
            InputInfo(s.label, hosts.get(s.label, "local"), s.bytes_read, s.lines)
            for _, s in inputs.streams
        ]
    finally:
        if spool is not None:
            spool.cleanup()
    seconds = time.monotonic() - t0
    report = build_log_report(
        diag, infos, config=config_path, started_at=started, finished_at=utcnow(), seconds=seconds
    )
    return diag, report, seconds
