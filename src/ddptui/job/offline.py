"""Files a user already has: flight recorder dumps and NCCL RAS answers saved from a job,
read on this machine (`ddptui job --fr-dump P --ras-reply P`), with the same parsers and
findings as a live look. A dump is never unpickled with plain pickle."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ddptui.diagnosis.kb import kb_finding
from ddptui.diagnosis.model import Finding
from ddptui.job.flight import RankDump, UnsafeDump, load_dump, parse_dump
from ddptui.job.ras import RasStatus, parse_ras, split_capture
from ddptui.job.side import flight_findings

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


def ras_findings(
    answers: Sequence[tuple[str, RasStatus]], nodes: Sequence[str] = ()
) -> list[Finding]:
    """A problem finding per answer that reports one; else one status line for them all."""
    out = []
    for source, status in answers:
        if status.problems:
            out.append(
                kb_finding(
                    "JOB-RAS-PROBLEM",
                    nodes,
                    f"NCCL RAS ({source}): {status.problems[0]}",
                    status.problems[:6],
                    node=source,
                    what="; ".join(status.problems[:3]),
                )
            )
    if out or not answers:
        return out
    source, status = answers[-1]
    sizes = ", ".join(str(c.size) for c in status.comms)
    counts = status.collective_counts or {}
    return [
        kb_finding(
            "JOB-RAS-OK",
            nodes,
            f"NCCL RAS: NCCL {status.version or '?'}, {len(status.comms)} communicator(s) "
            f"(size {sizes or '?'}), no missing rank, no error",
            [f"{s}: {a.form} form" for s, a in answers]
            + ([f"collective counts (launched, not progress): {counts}"] if counts else []),
            version=status.version or "?",
        )
    ]


def offline_findings(fr_paths: Sequence[str], ras_paths: Sequence[str]) -> list[Finding]:
    dumps, bad = read_dumps(fr_paths)
    return [*bad, *flight_findings(dumps, []), *ras_findings(read_ras(ras_paths))]
