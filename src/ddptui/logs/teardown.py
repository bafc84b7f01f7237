"""gpu8: what a process prints while it tears NCCL down is no failure of its own.

NCCL's commAbort (init.cc, at INFO) brackets its work with "comm %p rank %d nRanks %d
cudaDev %d busId %lx - Abort START" and "... - Abort COMPLETE".  A process that exits without
destroy_process_group() aborts its communicators at exit, and NCCL's error trace of the
sockets it closes ("misc/socket.cc:64 -> 3") comes in between: a healthy two-node HF Trainer
run prints it (tests/fixtures/gpu-h200/fail8/hf-ok-n0.log).  Soft failure lines of that
process inside the window are teardown, not an unknown failure.  Core layer.
"""

from __future__ import annotations

import re
from typing import Final

ABORT_START: Final = re.compile(r"\bcomm 0x[0-9a-f]+ rank \d+ n[Rr]anks \d+ .*- Abort START\b")
ABORT_DONE: Final = re.compile(r"- Abort COMPLETE\b")
MAX_OPEN: Final = 4096


class AbortWindows:
    """(source, pid) of the processes between NCCL's Abort START and Abort COMPLETE."""

    def __init__(self) -> None:
        self._open: set[tuple[str, int]] = set()

    def feed(self, source: str, pid: int | None, text: str) -> None:
        if pid is None or "- Abort " not in text:
            return
        key = (source, pid)
        if ABORT_START.search(text) is not None and len(self._open) < MAX_OPEN:
            self._open.add(key)
        elif ABORT_DONE.search(text) is not None:
            self._open.discard(key)

    def inside(self, source: str, pid: int | None) -> bool:
        return pid is not None and (source, pid) in self._open
