"""Readings added in round logs32 (issue 15, blind batch X: inference-serving and NVIDIA
stacks' troubleshooting pages, published run logs).

SplicedSlurm: srun's and slurmstepd's own words ("srun: Force Terminated job 5480",
"slurmstepd: error: *** STEP 5480.0 ... CANCELLED AT ...") always start their line.  Found
in the middle of another program's timestamped log message ("[2022-07-31 01:59:32,811][
INFO] Iters: 284, phoenix-srun: Force Terminated job 5480"), they were written into the
file by a second writer: two jobs' output interleaved in one file (a rerun appending to the
log of a cancelled run, UniMatch's published training log).  Where the run whose line they
cut goes on after them (more lines of the file, none of them a failure line), the
cancellation ended the OTHER job: not this run's failure.  The same Slurm lines at the
start of their line, or followed by any failure line, or at the end of the file, stay
what they are (SLURM-CANCELLED, SLURM-TASK-EXIT, an honest unknown).

Core layer, stdlib only."""

from __future__ import annotations

import re
from typing import Final

# Slurm's programs as they name themselves (a site may wrap srun: "phoenix-srun:")
SLURM_WORD: Final = re.compile(r"(?:\b[\w.-]*srun|\bslurmstepd|\bsalloc|\bsbatch): ")
# a log message's own head before Slurm's word: a time of day, then at least two words
_SPLICED_INTO: Final = re.compile(r"\d{1,2}:\d{2}:\d{2}\S*(?:\W+[A-Za-z]\w*){2,}")
# Slurm's block: its lines follow each other within this many lines (a URL line between)
BLOCK_GAP: Final = 3
# the run went on: at least this many lines of the file after Slurm's block
GOES_ON: Final = 3
MAX_SOURCES: Final = 4096


class SplicedSlurm:
    """Per source: a block of Slurm's lines that starts inside another program's line,
    whether any failure line came after it, and (at the source's end) whether the file
    went on after it."""

    def __init__(self) -> None:
        # source -> [order of its first line, first lineno, last lineno]
        self._block: dict[str, list[int]] = {}
        self._after: set[str] = set()  # a failure line came after the block
        self.foreign: dict[str, tuple[int, int, int]] = {}  # source -> (order, first, last)

    def slurm(self, source: str, order: int, lineno: int, text: str) -> bool:
        """Feed a failure line; True when it is part of a spliced Slurm block."""
        block = self._block.get(source)
        m = SLURM_WORD.search(text)
        if m is None:
            if block is not None:
                self._after.add(source)
            return False
        if block is None:
            if m.start() > 0 and _SPLICED_INTO.search(text[: m.start()]) and len(self._block) < MAX_SOURCES:
                self._block[source] = [order, lineno, lineno]
                return True
            return False
        if source not in self._after and 0 < lineno - block[2] <= BLOCK_GAP:
            block[2] = lineno
            return True
        self._after.add(source)
        return False

    def end(self, source: str, lineno: int) -> None:
        block = self._block.get(source)
        if block is not None and source not in self._after and lineno - block[2] >= GOES_ON:
            self.foreign[source] = (block[0], block[1], block[2])

    def inside(self, source: str, lineno: int) -> bool:
        """The line is part of another job's Slurm block spliced into this run's log."""
        b = self.foreign.get(source)
        return b is not None and b[1] <= lineno <= b[2]
