"""gpu8: what a process prints while it tears NCCL down is no failure of its own.

NCCL's commAbort (init.cc, at INFO) brackets its work with "comm %p rank %d nRanks %d
cudaDev %d busId %lx - Abort START" and "... - Abort COMPLETE".  A process that exits without
destroy_process_group() aborts its communicators at exit, and NCCL's error trace of the
sockets it closes ("misc/socket.cc:64 -> 3") comes in between: a healthy two-node HF Trainer
run prints it (tests/fixtures/gpu-h200/fail8/hf-ok-n0.log).  Soft failure lines of that
process inside the window are teardown, not an unknown failure.  Core layer.

logs37: the window's START is not always in the log (a rank's log cut, or a proxy thread's
abort printed before it), but NCCL names the abort on the thread itself: socketProgressOpt
(misc/socket.cc) finds the communicator's abort flag set, says "socketProgressOpt: abort
called" and returns ncclInternalError (3), and each caller up that thread prints its
"file.cc:N -> 3" return trace.  Those traces, on the thread that said it, are the abort's
return path (an abort NCCL itself started: at teardown, or after a failure whose own line
leads), not a failure of their own.
"""

from __future__ import annotations

import re
from typing import Final

ABORT_START: Final = re.compile(r"\bcomm 0x[0-9a-f]+ rank \d+ n[Rr]anks \d+ .*- Abort START\b")
ABORT_DONE: Final = re.compile(r"- Abort COMPLETE\b")
ABORT_CALLED: Final = "socketProgressOpt: abort called"
ABORT_TRACE: Final = re.compile(r"\.cc:\d+ -> 3\b")  # ncclInternalError, what the abort returns
NCCL_THREAD: Final = re.compile(r"(?:^|\s)[A-Za-z0-9_.-]+:(\d+):(\d+)\s+\[\d+\]\s")
MAX_OPEN: Final = 4096


def nccl_thread(text: str) -> tuple[int, int] | None:
    """(pid, tid) of NCCL's "host:pid:tid [dev]" prefix."""
    m = NCCL_THREAD.search(text)
    return (int(m[1]), int(m[2])) if m is not None else None


class AbortWindows:
    """(source, pid) of the processes between NCCL's Abort START and Abort COMPLETE, and
    (source, pid, tid) of the threads that said NCCL's abort reached them (logs37)."""

    def __init__(self) -> None:
        self._open: set[tuple[str, int]] = set()
        self._threads: set[tuple[str, int, int]] = set()

    def feed(self, source: str, pid: int | None, text: str) -> None:
        if pid is None:
            return
        if ABORT_CALLED in text:
            th = nccl_thread(text)
            if th is not None and len(self._threads) < MAX_OPEN:
                self._threads.add((source, *th))
            return
        if "- Abort " not in text:
            return
        key = (source, pid)
        if ABORT_START.search(text) is not None and len(self._open) < MAX_OPEN:
            self._open.add(key)
        elif ABORT_DONE.search(text) is not None:
            self._open.discard(key)
            self._threads = {t for t in self._threads if t[:2] != key}

    def inside(self, source: str, pid: int | None, text: str = "") -> bool:
        """Is this soft line teardown: inside its process's abort window, or a return
        trace of an abort on the thread that said it (logs37)?"""
        if pid is None:
            return False
        if (source, pid) in self._open:
            return True
        if not self._threads or ABORT_TRACE.search(text) is None:
            return False
        th = nccl_thread(text)
        return th is not None and (source, *th) in self._threads
