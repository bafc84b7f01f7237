"""A log that stops where a job waits: the start of a step (NCCL's communicator init,
Lightning's process registration, torchrun's rendezvous, c10d's store barrier, a
benchmark's first size, a progress bar at 0) among the last lines of its file, never
followed by the line that says the step finished.  Core layer, stdlib only.

The steps are data (factrules.yaml `stalls`).  A whole log that ends there is a job that
hung there, or was killed there; a pasted excerpt may only be cut there, so the finding
is a warning and says both.  It leads only when nothing else in the log does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from ddptui.diagnosis.factmodel import Stall

TAIL: Final = 12  # a step started within this many lines of the end of its file


@dataclass(frozen=True)
class Stopped:
    """A step a source started near its end and never finished."""

    stall: Stall
    source: str
    lineno: int
    where: str  # "file:line: text"


class StallWatch:
    """Fed every candidate line (in its source's order) and each source's end."""

    def __init__(self, stalls: Sequence[Stall]) -> None:
        self.stalls = tuple(stalls)
        # every start in one pattern, a named group per step: one search per line
        self.starts = re.compile(
            "|".join(f"(?P<s{i}>{st.start.pattern})" for i, st in enumerate(self.stalls))
        ) if self.stalls else None
        self.open: dict[str, tuple[Stall, int, str]] = {}  # source -> its last start
        self.stopped: list[Stopped] = []
        # logs17: (source, process) that printed a step's `precedes` line and not its start
        self.pending: set[tuple[str, str]] = set()
        self._precedes = [st.precedes for st in self.stalls if st.precedes is not None]

    def feed(self, source: str, lineno: int, text: str) -> None:
        for rx in self._precedes:
            if (p := rx.search(text)) is not None and len(self.pending) < 4096:
                self.pending.add((source, p["proc"]))
        now = self.open.get(source)
        if now is not None and now[0].done is not None and now[0].done.search(text):
            del self.open[source]
            return
        m = self.starts.search(text) if self.starts is not None else None
        if m is not None and m.lastgroup is not None:
            st = self.stalls[int(m.lastgroup[1:])]
            if st.precedes is not None:  # this process printed its start
                head = text[: m.start()]
                self.pending -= {(s, p) for s, p in self.pending if s == source and p + ":" in head}
            self.open[source] = (st, lineno, f"{source}:{lineno}: {text.strip()[:300]}")

    def end(self, source: str, lineno: int) -> None:
        now = self.open.pop(source, None)
        # a step with a header of its own (nccl-tests' three table lines) went on when
        # the file holds more lines after its start than that header
        went_on = now is not None and now[0].done is None and 0 < now[0].header < lineno - now[1]
        # logs17: another process's line that comes right before the start, never followed
        # by its start: the log holds none of that process's next lines (cut or filtered)
        cut = now is not None and now[0].precedes is not None and any(s == source for s, _ in self.pending)
        if now is not None and not went_on and not cut and lineno - now[1] < TAIL and len(self.stopped) < 64:
            self.stopped.append(Stopped(now[0], source, now[1], now[2]))
