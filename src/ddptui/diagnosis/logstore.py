"""One bounded store for every log line a run sees, keyed by (node, sequence number,
global rank, local rank). Core layer.

A line gets its id when it arrives from the node (``node#seq``, the sequence counting
from 1 per node and never reused), and keeps it all the way to the report: a finding's
evidence cites line ids, so the log view and the report's excerpts mark the exact line
instead of searching for its text. Lines were redacted on the node before they travelled.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Final

LINES_PER_NODE: Final = 5000  # the one size limit: the log view, the analysis, the report


@dataclass(frozen=True)
class LogLine:
    """One line as it arrived, with where it came from."""

    node: str
    seq: int
    rank: int | None  # global rank of the process that printed it, when known
    local_rank: int | None
    stream: str  # "out" | "err"
    text: str
    t: float = 0.0  # arrival time (the run's monotonic clock)

    @property
    def id(self) -> str:
        return line_id(self.node, self.seq)

    def tagged(self) -> str:
        """The line as the log view shows it: "[rN] " before a rank's lines."""
        if self.rank is not None:
            return f"[r{self.rank}] {self.text}"
        if self.local_rank is not None:
            return f"[l{self.local_rank}] {self.text}"
        return self.text


def line_id(node: str, seq: int) -> str:
    return f"{node}#{seq}"


def parse_line_id(text: str) -> tuple[str, int] | None:
    """(node, seq) of a line id, or None when text is not one."""
    node, sep, seq = text.rpartition("#")
    if not sep or not node or not seq.isdigit():
        return None
    return node, int(seq)


LogListener = Callable[[LogLine], None]


class LogStore:
    """Every node's lines, the newest LINES_PER_NODE kept per node. Thread-safe for
    appends (the run core appends from the event loop; readers take snapshots)."""

    def __init__(self, nodes: Iterable[str] = (), limit: int = LINES_PER_NODE) -> None:
        self.limit = limit
        self._lines: dict[str, deque[LogLine]] = {n: deque(maxlen=limit) for n in nodes}
        self._seq: dict[str, int] = dict.fromkeys(self._lines, 0)
        self._lock = threading.Lock()
        self._listeners: list[LogListener] = []

    def subscribe(self, listener: LogListener) -> None:
        self._listeners.append(listener)

    def append(
        self,
        node: str,
        text: str,
        *,
        rank: int | None = None,
        local_rank: int | None = None,
        stream: str = "out",
        t: float = 0.0,
    ) -> LogLine:
        with self._lock:
            seq = self._seq.get(node, 0) + 1
            self._seq[node] = seq
            line = LogLine(node, seq, rank, local_rank, stream, text, t)
            self._lines.setdefault(node, deque(maxlen=self.limit)).append(line)
        for listener in self._listeners:
            listener(line)
        return line

    def nodes(self) -> list[str]:
        return list(self._lines)

    def lines(self, node: str) -> list[LogLine]:
        """A snapshot of the node's kept lines, oldest first."""
        with self._lock:
            return list(self._lines.get(node, ()))

    def texts(self, node: str) -> list[str]:
        return [ln.tagged() for ln in self.lines(node)]

    def total(self, node: str) -> int:
        """Lines the node sent in all (more than kept once the limit is reached)."""
        return self._seq.get(node, 0)

    def get(self, lid: str) -> LogLine | None:
        """The line with this id, while it is still kept."""
        parsed = parse_line_id(lid)
        if parsed is None:
            return None
        node, seq = parsed
        with self._lock:
            kept = self._lines.get(node)
            if not kept:
                return None
            first = kept[0].seq
            index = seq - first
            if 0 <= index < len(kept) and kept[index].seq == seq:
                return kept[index]
        return None

    def __iter__(self) -> Iterator[LogLine]:
        for node in self.nodes():
            yield from self.lines(node)
