"""What the head of one log line says: its time, the rank that printed it, NCCL's pid.
Core layer, stdlib only.

Formats (all seen in real output, see tests/fixtures/gpu-h100/):
  [2026-11-23 07:38:35] vm:846:846 [0] bootstrap.cc:114 NCCL WARN ...   NCCL 2.26+
  vm:846:846 [0] NCCL INFO ...                                           NCCL (pid 846)
  [I1123 07:38:31.551532465 TCPStore.cpp:271] ...                         glog (c10d)
  E1123 07:38:35.816000 821 torch/distributed/elastic/...                 torch's Python glog
  [2026-11-23 08:06:32,981] torch.distributed.run: [WARNING] ...          torchrun logging
  2026-11-23 08:06:32,981 - INFO - ...  /  2026-11-23T08:06:32.981Z ...   Python logging, ISO
and launcher prefixes before any of them: [rank3]: (global rank; Lightning's rank_prefixed_message
writes [rank: 3]), [default0]: (torchrun's
role + local rank), [r3] / [l1] (ddptui's own tags), and at the very start of the line:
  12: ...                 srun --label (the task id, SLURM_PROCID: read as the global rank)
  worker-1: ...           DeepSpeed / pdsh (the host name; IPv4 addresses too)
  [pod/trainer-0/main] .. kubectl logs --prefix (the pod, read as the host)
  slurmstepd-gpu1: ...    Slurm's step daemon (gpu1 is the host; the line is kept whole)
  [1,3]<stderr>: ...      mpirun --tag-output (horovodrun's too): [jobid,rank], the MPI rank
  (RayTrainWorker pid=83501, ip=10.0.0.7) ...   Ray's worker prefix (the ip, read as the host)

API (stable; the shared-files helper attributes files through it):
  parse_head(text, year) -> (LineHead, stated year or None)
  LineHead.rank / .local_rank / .host / .pid / .t / .body: None where the line does not say.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Final

# Launcher prefixes, possibly stacked ("[default1]:[rank1]: Traceback ...").
_PREFIX: Final = re.compile(
    r"\s*\[(?:rank(?::\s?)?(?P<rank>\d+)|r(?P<r>\d+)|l(?P<l>\d+)|(?P<role>[A-Za-z_][\w-]*?)(?P<local>\d+))\]:?\s?"
)
_ISO: Final = re.compile(
    r"\[?(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)[ T_](?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"
    r"(?:[.,](?P<frac>\d{1,9}))?(?P<tz>Z|[+-]\d\d:?\d\d)?\]?"
)
_GLOG: Final = re.compile(
    r"\[?(?P<lvl>[IWEF])(?P<mo>\d\d)(?P<d>\d\d) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"
    r"(?:\.(?P<frac>\d{1,9}))?\s"
)
_NCCL_PID: Final = re.compile(r"(?:^|\s)(?P<host>[A-Za-z0-9_.-]+):(?P<pid>\d+):\d+\s+\[\d+\]\s")
# Lines that tell a pid's rank: NCCL's Init lines, torchrun's per-worker failure line.
NCCL_INIT_RANK: Final = re.compile(
    r"[A-Za-z0-9_.-]+:(?P<pid>\d+):\d+\s+\[\d+\].*?\bcomm 0x[0-9a-f]+ rank (?P<rank>\d+) nranks"
)
ELASTIC_LOCAL: Final = re.compile(r"local_rank: (?P<local>\d+) \(pid: (?P<pid>\d+)\)")
# torch elastic's failure summary (errors/__init__.py _format_failure), one per failed
# worker: "  rank      : 1 (local_rank: 0)" (gpu7)
ELASTIC_SUMMARY_RANK: Final = re.compile(r"\s*rank\s+: (?P<rank>\d+) \(local_rank: (?P<local>\d+)\)\s*$")
# Launcher prefixes that only stand at the start of a line.
_SRUN_LABEL: Final = re.compile(r"\s{0,4}(?P<task>\d{1,6}): ")
_KUBE_PREFIX: Final = re.compile(r"\[pod/(?P<pod>[\w.-]+)/[\w.-]+\] ")
# Ray's worker prefix: "(RayTrainWorker pid=83501, ip=192.168.0.107) ..." (the ip is the host)
_RAY_PREFIX: Final = re.compile(r"\((?:[A-Za-z_][\w.]*\s)?pid=\d+, ip=(?P<pod>[0-9A-Fa-f.:]+)\)\s")
_MPI_TAG: Final = re.compile(r"\[\d+,(?P<task>\d+)\]<(?:stdout|stderr|stddiag)>:")
_HOST_PREFIX: Final = re.compile(r"(?P<host>[A-Za-z0-9][\w.-]{0,62}): (?=\S)")
# Words before ": " that are not host names (exception classes, tools, levels).
_NOT_HOST_SUFFIXES: Final = ("Error", "Exception", "Warning", "Exit", "Interrupt", "Fault")


@dataclass(frozen=True)
class LineHead:
    """What a line's head says; None where it does not say."""

    t: float | None  # seconds since the epoch (naive times read as UTC)
    rank: int | None  # global rank ([rankN]:, [rN])
    local_rank: int | None  # [default0]:, [l1]
    pid: int | None  # the NCCL prefix's pid
    body: str  # the line after the launcher prefixes
    host: str | None = None  # the launcher's host prefix (pdsh, kubectl) or NCCL's host


def _is_host(word: str) -> bool:
    """A pdsh/DeepSpeed prefix names a host: letters with a digit, '-' or '.' in it
    (node-0, gpu12, 10.0.0.1, a.b.c), never an exception class or a tool's name."""
    if word.endswith(_NOT_HOST_SUFFIXES) or word.isdigit():
        return False
    return any(c.isdigit() or c in "-." for c in word) and word[0] != "."


def launcher_prefix(text: str) -> tuple[int | None, str | None, int]:
    """(srun task id, host, end of the prefix) of the prefix a launcher put at the very
    start of a line; (None, None, 0) when there is none."""
    # srun --label's task id, or mpirun --tag-output's MPI rank: the global rank
    m = (_MPI_TAG if text[:1] == "[" else _SRUN_LABEL).match(text)
    if m is not None:
        return int(m["task"]), None, m.end()
    if not text or (text[0] == "[" and not text.startswith("[pod/")):
        return None, None, 0
    m = _KUBE_PREFIX.match(text) or _RAY_PREFIX.match(text)
    if m is not None:  # kubectl logs --prefix's pod, Ray's worker ip: the host
        return None, m["pod"], m.end()
    m = _HOST_PREFIX.match(text)
    if m is not None and _is_host(m["host"]):
        host = m["host"]
        if host.startswith("slurmstepd-"):  # Slurm's step daemon names itself after the node
            return None, host[len("slurmstepd-") :], 0
        return None, host, m.end()
    return None, None, 0


def _epoch(y: int, mo: int, d: int, h: int, mi: int, s: int, frac: str | None) -> float | None:
    try:
        base = datetime(y, mo, d, h, mi, s, tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None
    return base + (int(frac) / 10 ** len(frac) if frac else 0.0)


def parse_time(text: str, year: int) -> tuple[float | None, int | None]:
    """(epoch seconds, the year the line states) of a timestamp at the start of `text`;
    glog lines carry no year, `year` stands in."""
    head = text[:64]
    m = _ISO.match(head)
    if m is not None:
        y = int(m["y"])
        t = _epoch(y, int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]), m["frac"])
        tz = m["tz"]
        if t is not None and tz and tz != "Z":
            sign = 1 if tz[0] == "+" else -1
            digits = tz[1:].replace(":", "")
            t -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
        return t, y
    m = _GLOG.match(head)
    if m is not None:
        t = _epoch(year, int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]), m["frac"])
        return t, None
    return None, None


def parse_head(text: str, year: int) -> tuple[LineHead, int | None]:
    """The line's head, and the year it states (for later glog lines of the same file)."""
    rank = local = None
    task, host, pos = launcher_prefix(text)
    for _ in range(3):
        m = _PREFIX.match(text, pos)
        if m is None or m.end() == pos:
            break
        if m["rank"] is not None or m["r"] is not None:
            rank = int(m["rank"] or m["r"])
        elif m["l"] is not None or m["local"] is not None:
            local = int(m["l"] or m["local"])
        pos = m.end()
    if rank is None and task is not None:
        rank = task  # srun --label: the task id (SLURM_PROCID)
    body = text[pos:] if pos else text
    t, stated_year = parse_time(body, year)
    pid = None
    if "NCCL" in body:
        pm = _NCCL_PID.search(body[:120])
        if pm is not None:
            pid = int(pm["pid"])
            host = host or pm["host"]
    return LineHead(t, rank, local, pid, body, host), stated_year


_FRAME: Final = re.compile(r'\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S.*?)\s*$')
_LIBRARY: Final = ("site-packages/", "dist-packages/", "/lib/python3", "<frozen")


def traceback_where(before: list[str]) -> str | None:
    """"file.py:123 in func" of the innermost frame of the user's own code in the Python
    traceback that ends right above a line (`before`: the lines above it, nearest first,
    launcher prefixes allowed); None when no traceback ends there or every frame is a
    library's."""
    frames: list[tuple[str, str, str]] = []
    for raw in before:
        body = parse_head(raw, 2000)[0].body
        m = _FRAME.match(body)
        if m is not None:
            frames.append((m["file"], m["line"], m["func"]))
            continue
        stripped = body.strip()
        if stripped.startswith("Traceback (most recent call last)"):
            break
        if body.startswith("    ") or (stripped and set(stripped) <= set("^~ ")):
            continue  # the code line under a frame, or its ^^^^ markers (3.11+)
        break
    for file, line, func in frames:  # nearest first = innermost first
        if not any(lib in file for lib in _LIBRARY):
            return f"{file.rsplit('/', 1)[-1]}:{line} in {func}"
    return None
# gpu8: torch elastic's error record of a worker a signal ended, "traceback : Signal 11
# (SIGSEGV) received by PID 899": the pid the agent's own line tied to a local rank
ELASTIC_SIGNAL_PID: Final = re.compile(r"\bSignal \d+ \(SIG[A-Z]+\) received by PID (?P<pid>\d+)\b")
