"""Files a user already has: flight recorder dumps and NCCL RAS answers saved from a job,
read on this machine (`ddptui job --fr-dump P --ras-reply P`), with the same parsers and
findings as a live look. A dump is never unpickled with plain pickle."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.kb import kb_finding
from ddptui.job.flight import RankDump, UnsafeDump, load_dump, parse_dump
from ddptui.job.ras import RasStatus, parse_ras, split_capture
from ddptui.job.readings import flight_findings, ras_findings

_RANK_IN_NAME = re.compile(r"(\d+)(?:\.\w+)?$")


class OfflineInputError(ValueError):
    """A file given on the command line cannot be read (what and why)."""


def rank_from_name(path: str, default: int) -> int:
    """`comm_lib_trace_rank_3`, `rank_0.pickle` -> 3, 0; else the position given."""
    m = _RANK_IN_NAME.search(Path(path).name)
    return int(m.group(1)) if m else default


def read_dumps(paths: Sequence[str]) -> tuple[list[RankDump], list[Finding]]:
    dumps, bad = [], []
    for i, path in enumerate(paths):
        try:
            data = Path(path).expanduser().read_bytes()
        except OSError as exc:
            raise OfflineInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
        try:
            # No dump time travels with a copied file: judged against the entries' own
            # timeouts only where the dump says when it was written (a live look does).
            dumps.append(parse_dump(rank_from_name(path, i), load_dump(data)))
        except UnsafeDump as exc:
            bad.append(
                kb_finding("JOB-FR-UNREADABLE", [], f"{path} not read: {exc}", path=path, why=exc)
            )
    return dumps, bad


def read_ras(paths: Sequence[str]) -> list[tuple[str, RasStatus]]:
    out = []
    for path in paths:
        try:
            text = Path(path).expanduser().read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise OfflineInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
        blocks = split_capture(text) or [("", text)]
        for sent, body in blocks:
            status = parse_ras(body)
            if status is not None:
                out.append((f"{path}{' (' + sent + ')' if sent else ''}", status))
        if not any(p.startswith(path) for p, _ in out):
            raise OfflineInputError(
                f"{path}: not an NCCL RAS answer (no version, no communicators)"
            )
    return out


def offline_findings(fr_paths: Sequence[str], ras_paths: Sequence[str]) -> list[Finding]:
    dumps, bad = read_dumps(fr_paths)
    return [*bad, *flight_findings(dumps, []), *ras_findings(read_ras(ras_paths))]
