"""NCCL RAS answers (NCCL >= 2.24, `CLIENT PROTOCOL 2` + `STATUS` / `VERBOSE STATUS`,
text or `SET FORMAT json`): the communicators, their ranks, which are missing or in
error. Pure core.

Its collective counts are of launched collectives and read 0 in the H100 capture even
after allreduces ran (NCCL 2.28.9): they are kept as facts, never read as progress."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_VERSION = re.compile(r"NCCL version (?P<v>\d+\.\d+\.\d+)")
# "    0         1         1         1         1         1   RUNNING      OK"
_COMM_ROW = re.compile(
    r"^\s*(?P<group>\d+)\s+(?P<comms>\d+)\s+(?P<nodes>\d+)\s+(?P<rpn>\d+)\s+(?P<rpc>\d+)\s+"
    r"(?P<rig>\d+)\s+(?P<status>[A-Z_]+)\s+(?P<errors>\S.*?)\s*$"
)


@dataclass(frozen=True)
class RasComm:
    name: str  # hash, or "group N" in the text form
    size: int | None
    ranks: int | None
    missing: tuple[int, ...]
    status: str  # RUNNING, INIT, ... / "ok", "error" in JSON
    errors: tuple[str, ...]


@dataclass(frozen=True)
class RasStatus:
    version: str | None
    comms: tuple[RasComm, ...]
    form: str  # "json" or "text"
    errors_section: tuple[str, ...] = ()
    warnings_section: tuple[str, ...] = ()
    collective_counts: dict[str, int] | None = None

    @property
    def problems(self) -> list[str]:
        """What deserves a finding: missing ranks, communicators in error, reported errors."""
        out = []
        for c in self.comms:
            if c.missing:
                out.append(f"communicator {c.name} misses rank(s) {', '.join(map(str, c.missing))}")
            if c.errors:
                out.append(f"communicator {c.name}: {'; '.join(c.errors)}")
        out += [f"RAS error: {e}" for e in self.errors_section]
        return out


def parse_ras(text: str) -> RasStatus | None:
    """One RAS reply, JSON or text; None when it holds neither (an error line, nothing)."""
    start = text.find("{")
    if start >= 0:
        try:
            doc = json.loads(text[start : text.rfind("}") + 1])
        except json.JSONDecodeError:
            doc = None
        if isinstance(doc, dict):
            return _from_json(doc)
    return _from_text(text)


def _ints(values: Iterable[Any]) -> tuple[int, ...]:
    out = []
    for v in values:
        if isinstance(v, int):
            out.append(v)
        elif isinstance(v, Mapping) and isinstance(v.get("rank"), int):
            out.append(int(v["rank"]))
    return tuple(out)


def _from_json(doc: Mapping[str, Any]) -> RasStatus:
    comms = []
    counts: dict[str, int] = {}
    for c in doc.get("communicators") or ():
        if not isinstance(c, Mapping):
            continue
        errors = []
        for r in c.get("ranks") or ():
            if not isinstance(r, Mapping):
                continue
            st = r.get("status") or {}
            if isinstance(st, Mapping):
                if st.get("async_error"):
                    errors.append(f"rank {r.get('rank')} async error {st.get('async_error')}")
                if st.get("abort_flag"):
                    errors.append(f"rank {r.get('rank')} aborted")
            for op, n in (r.get("collective_counts") or {}).items():
                if isinstance(n, int):
                    counts[op] = counts.get(op, 0) + n
        comms.append(
            RasComm(
                str(c.get("hash") or "?"),
                c.get("size") if isinstance(c.get("size"), int) else None,
                c.get("ranks_count") if isinstance(c.get("ranks_count"), int) else None,
                _ints(c.get("missing_ranks") or ()),
                "error" if errors else "ok",
                tuple(errors),
            )
        )
    return RasStatus(
        str(doc.get("nccl_version")) if doc.get("nccl_version") else None,
        tuple(comms),
        "json",
        collective_counts=counts or None,
    )


def _section(lines: list[str], title: str) -> tuple[str, ...]:
    """The non-empty lines under a "Title\\n=====" heading, up to the next heading."""
    for i, line in enumerate(lines):
        if line.strip() == title and i + 1 < len(lines) and lines[i + 1].startswith("="):
            out = []
            for nxt in lines[i + 2 :]:
                if nxt.startswith("=") or (nxt.strip() and _is_heading(lines, nxt)):
                    break
                if nxt.strip():
                    out.append(nxt.strip())
            return tuple(out)
    return ()


def _is_heading(lines: list[str], line: str) -> bool:
    i = lines.index(line)
    return i + 1 < len(lines) and lines[i + 1].startswith("===")


def _from_text(text: str) -> RasStatus | None:
    lines = text.splitlines()
    version = m["v"] if (m := _VERSION.search(text)) else None
    comms = []
    for line in lines:
        if m := _COMM_ROW.match(line):
            errors = () if m["errors"] == "OK" else (m["errors"],)
            comms.append(
                RasComm(
                    f"group {m['group']}", int(m["rpc"]), int(m["rpc"]), (), m["status"], errors
                )
            )
    if version is None and not comms:
        return None
    return RasStatus(
        version, tuple(comms), "text", _section(lines, "Errors"), _section(lines, "Warnings")
    )


def split_capture(text: str) -> list[tuple[str, str]]:
    """The `#### send: [...]` blocks of a ras.py capture (the shared fixtures):
    [(commands, reply)]."""
    blocks: list[tuple[str, str]] = []
    for part in text.split("#### send: ")[1:]:
        head, _, body = part.partition("\n")
        blocks.append((head.strip(), body))
    return blocks
