"""/proc readings for the benchmarks: a process's parent, state, CPU ticks and start
time; its command line; the machine's busy ticks. Linux only, stdlib only."""

from __future__ import annotations

import os
from pathlib import Path


def stat(pid: int) -> tuple[int, str, str, int, int] | None:
    """(ppid, comm, state, utime+stime ticks, starttime) or None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    comm = raw[raw.index("(") + 1 : raw.rindex(")")]
    f = raw[raw.rindex(")") + 2 :].split()
    # f[0] is field 3 (state): utime=14, stime=15, starttime=22 -> f[11], f[12], f[19]
    return int(f[1]), comm, f[0], int(f[11]) + int(f[12]), int(f[19])


def all_procs() -> dict[int, tuple[int, str, str, int, int]]:
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            st = stat(int(entry.name))
            if st is not None:
                out[int(entry.name)] = st
    return out


def alive(pid: int, start: int) -> bool:
    st = stat(pid)
    return st is not None and st[4] == start and st[2] != "Z"


def python_descendants(root: int) -> dict[int, tuple[int, str, str, int, int]]:
    procs = all_procs()
    children: dict[int, list[int]] = {}
    for pid, st in procs.items():
        children.setdefault(st[0], []).append(pid)
    found, todo = {}, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        st = procs[pid]
        if st[1].startswith("python") and st[2] != "Z":
            found[pid] = st
        todo.extend(children.get(pid, []))
    return found


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []


def system_busy_ticks() -> int:
    """Busy (non-idle, non-iowait) ticks of all cores together, from /proc/stat."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return sum(f[:8]) - f[3] - f[4]  # user nice system idle iowait irq softirq steal


def own_cpu_s() -> float:
    """CPU of this script and its (reaped) tmux client subprocesses."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def cpu_ticks(pid: int) -> int:
    st = stat(pid)
    if st is None:
        raise RuntimeError(f"pid {pid} exited during the CPU window")
    return st[3]
