"""The job's own output (stdout/stderr files read on the nodes): per-rank timelines, the
exception each rank died of, torchrun's "Root Cause" summary, and the knowledge base's
reading of the lines (the same classification as `ddptui diagnose`). Pure core."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ddptui.diagnosis.finding import Finding
from ddptui.job.model import LogFile

# "[rank3]:", "[default3]:" (torchrun --tee / log prefixes), "[rank3]:[E1123 ...".
_PREFIX = re.compile(r"^\[(?:rank|default)(?P<n>\d+)\]:\s?")
_DEFAULT = re.compile(r"^\[default(?P<n>\d+)\]:")
_TRACEBACK = "Traceback (most recent call last):"
_FILE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_EXC = re.compile(
    r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure))(?::\s*(?P<msg>.*))?$"
)
_ROOT_CAUSE = "Root Cause (first observed failure):"
LAUNCHER_EXCEPTIONS = ("ChildFailedError",)
# Exceptions a rank raises because ANOTHER rank failed: never the first failure.
SECONDARY = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|DistBackendError|"
    r"DistNetworkError|DistStoreError|timed out|Timeout|SignalException|"
    r"communicator was aborted|Watchdog|KeyboardInterrupt|SIGTERM",
    re.IGNORECASE,
)
_RC_FIELD = re.compile(r"^\s*(?P<k>time|host|rank|exitcode|error_file|traceback)\s*:\s*(?P<v>.*)$")
_RC_RANK = re.compile(r"(?P<rank>\d+) \(local_rank: (?P<local>\d+)\)")
_RC_EXIT = re.compile(r"(?P<code>-?\d+) \(pid: (?P<pid>\d+)\)")
# torch's watchdog: "Stack trace of the failed collective:" then "#2 <module> from /x/hang.py:12"
_FAILED_COLLECTIVE = "Stack trace of the failed collective"
_FR_FRAME = re.compile(r"^#\d+ (?P<func>\S+) from (?P<file>\S+):(?P<line>\d+)$")


@dataclass(frozen=True)
class Exit:
    """How one rank ended, as its output tells it."""

    node: str
    rank: int | None
    exc_type: str
    message: str
    where: str | None  # "train.py:12 in step": the innermost frame of the traceback
    line: str  # the exception line as printed


@dataclass(frozen=True)
class RootCause:
    """torchrun's summary of the first failed worker."""

    node: str
    rank: int | None
    local_rank: int | None
    exitcode: int | None
    pid: int | None
    host: str | None
    traceback: str | None


def strip_prefix(line: str) -> tuple[int | None, str, bool]:
    """(number in the [rankN]/[defaultN] prefix, the line without it, whether it was a
    local [defaultN] number)."""
    m = _PREFIX.match(line)
    if not m:
        return None, line, False
    return int(m["n"]), line[m.end() :], _DEFAULT.match(line) is not None


def exits(log: LogFile, ranks_here: Sequence[int], local_to_global: dict[int, int]) -> list[Exit]:
    """The exception of every traceback in a file, attributed to a rank by its line prefix,
    else to the node's only rank; per rank the first one that is not a consequence of
    another rank's failure (SECONDARY), else its first. torchrun's own traceback
    (ChildFailedError) is the launcher reporting, not a rank."""
    per_rank: dict[int | None, list[Exit]] = {}
    frames: dict[int | None, str | None] = {}
    in_tb: set[int | None] = set()
    only = ranks_here[0] if len(ranks_here) == 1 else None
    for raw in log.lines:
        n, line, local = strip_prefix(raw)
        rank = (local_to_global.get(n) if local else n) if n is not None else only
        text = line.rstrip()
        if text.startswith(_TRACEBACK):
            in_tb.add(rank)
            frames[rank] = None
            continue
        if rank not in in_tb:
            continue
        if m := _FILE.match(text):
            frames[rank] = f"{m['file'].rsplit('/', 1)[-1]}:{m['line']} in {m['func']}"
            continue
        if (m := _EXC.match(text.strip())) and not text.startswith(" "):
            in_tb.discard(rank)
            if m["type"].endswith(LAUNCHER_EXCEPTIONS):
                continue
            per_rank.setdefault(rank, []).append(
                Exit(
                    log.node,
                    rank,
                    m["type"],
                    (m["msg"] or "").strip(),
                    frames.get(rank),
                    text.strip(),
                )
            )
    out = []
    for found in per_rank.values():
        primary = [e for e in found if not is_secondary(e)]
        out.append((primary or found)[0])
    return out


def is_secondary(e: Exit) -> bool:
    """Raised because ANOTHER rank failed (closed connections, timeouts, signals)."""
    return SECONDARY.search(f"{e.exc_type}: {e.message}") is not None


def root_causes(log: LogFile) -> list[RootCause]:
    """Every `Root Cause (first observed failure)` block torchrun printed in the file."""
    out = []
    lines = list(log.lines)
    for i, line in enumerate(lines):
        if _ROOT_CAUSE not in line:
            continue
        fields: dict[str, str] = {}
        for nxt in lines[i + 1 : i + 12]:
            if m := _RC_FIELD.match(nxt):
                fields[m["k"]] = m["v"].strip()
            elif nxt.startswith("====="):
                break
        rm = _RC_RANK.search(fields.get("rank", ""))
        em = _RC_EXIT.search(fields.get("exitcode", ""))
        out.append(
            RootCause(
                log.node,
                int(rm["rank"]) if rm else None,
                int(rm["local"]) if rm else None,
                int(em["code"]) if em else None,
                int(em["pid"]) if em else None,
                fields.get("host"),
                fields.get("traceback"),
            )
        )
    return out


def failed_collective_where(log: LogFile) -> str | None:
    """Where the collective the watchdog timed out was called: the first frame of its
    stack trace outside torch ("hang.py:12 in <module>")."""
    lines = list(log.lines)
    for i, line in enumerate(lines):
        if _FAILED_COLLECTIVE not in line:
            continue
        for nxt in lines[i + 1 : i + 40]:
            m = _FR_FRAME.match(strip_prefix(nxt)[1].strip())
            if m is None:
                break
            if "/torch/" not in m["file"] and "site-packages" not in m["file"]:
                return f"{m['file'].rsplit('/', 1)[-1]}:{m['line']} in {m['func']}"
    return None


def classify(lines: Iterable[str], source: str) -> tuple[Finding | None, tuple[Finding, ...]]:
    """The knowledge base's reading of these lines: (root cause, every finding)."""
    from ddptui.logs.diagnose import diagnose_lines  # the diagnose command's machinery

    # the job may be running (no stalls); the job view knows its ranks and judges who
    # waited itself, so one rank's timeout is not read as the others being elsewhere
    result = diagnose_lines(lines, source=source, stalls=False, lone=False)
    return result.first, tuple(result.findings)


def rank_lines(
    log: LogFile, rank: int, ranks_here: Sequence[int], local_to_global: dict[int, int]
) -> list[str]:
    """The lines of this file that belong to `rank` (its prefix; unprefixed lines belong
    to every rank writing there, i.e. to the node's ranks)."""
    out = []
    for raw in log.lines:
        n, line, local = strip_prefix(raw)
        owner = (local_to_global.get(n) if local else n) if n is not None else None
        if owner is None or owner == rank:
            out.append(line)
    return out if rank in ranks_here or not ranks_here else []
