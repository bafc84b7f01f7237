"""Spooled files the diagnosis reads while the nodes still send them: the reading thread
writes each file's lines as they arrive, the diagnosis reads them as they grow, so the
nodes' reading and the login node's classifying overlap.  Core layer, stdlib only.

A filtered read (the node sends only the blocks of lines the diagnosis looks at, see
probes/_linescan.py) is spooled as records, one per line, each followed by its lines:
    @FIRST COUNT    a block: COUNT lines, the first of them line FIRST + 1 of the file
    +COUNT          COUNT more lines of the block before (a block sent in pieces)
    =BYTES LINES LAST  what the node read of the file, as the local reader counts it,
                    and the number of its last line (where the file ends)
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, TextIO, cast

from ddptui.logs.reader import ReadStats

Block = tuple[int, list[bytes]]  # (lines above it in the file, its lines)


class Pipe:
    """One spooled file: written by the reading thread, read by the diagnosis."""

    def __init__(self, path: Path, cond: threading.Condition) -> None:
        self.path = path
        self._cond = cond
        self._out: TextIO | None = None
        self.opened = False  # the node opened the file and sends it
        self.done = False  # nothing more will come
        self._more = False  # the last segment continues in the next one

    def open(self) -> None:
        self._out = self.path.open("w", encoding="utf-8")
        with self._cond:
            self.opened = True
            self._cond.notify_all()

    def write(self, text: str) -> None:
        if self._out is None or self.done:
            return
        self._out.write(text)
        self._out.flush()
        with self._cond:
            self._cond.notify_all()

    def segment(self, first: int, text: str, more_follows: bool) -> None:
        """One `seg` record of the node: its lines, a block of their own unless the
        record before said more would follow."""
        count = text.count("\n") + 1
        head = f"+{count}" if self._more else f"@{first} {count}"
        self._more = more_follows
        self.write(f"{head}\n{text}\n")

    def counted(self, nbytes: int, lines: int, last: int) -> None:
        self.write(f"={nbytes} {lines} {last}\n")

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
        with self._cond:
            self.done = True
            self._cond.notify_all()

    def reader(self) -> BinaryIO:
        """A binary stream of the file that blocks while it may still grow."""
        return cast(BinaryIO, io.BufferedReader(_Growing(self, self._cond), 64 * 1024))


class _Growing(io.RawIOBase):
    def __init__(self, pipe: Pipe, cond: threading.Condition) -> None:
        self._pipe = pipe
        self._cond = cond
        self._fh: BinaryIO | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buf: bytearray | memoryview) -> int:  # type: ignore[override]
        while True:
            if self._fh is None and self._pipe.opened:
                self._fh = cast(BinaryIO, self._pipe.path.open("rb"))
            if self._fh is not None:
                n = self._fh.readinto(buf)  # type: ignore[attr-defined]
                if n:
                    return int(n)
            with self._cond:
                if self._pipe.done:
                    break
                self._cond.wait(0.25)
        if self._fh is None:
            return 0
        return int(self._fh.readinto(buf) or 0)  # type: ignore[attr-defined]

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        super().close()


def spooled_blocks(stream: BinaryIO, stats: ReadStats) -> Iterator[Block]:
    """The blocks of a filtered read's spool (blocking while it grows), then an empty
    block after the file's last line (where it ends); `stats` gets the node's count of
    the file's bytes and lines from its last record."""
    block: Block | None = None
    last: int | None = None
    try:
        while True:
            head = stream.readline()
            if not head:
                break
            tag, fields = head[:1], head[1:].split()
            if tag == b"=":
                stats.bytes_read, stats.lines, last = (int(x) for x in fields[:3])
                continue
            lines = [stream.readline()[:-1] for _ in range(int(fields[-1]))]
            if tag == b"+" and block is not None:
                block[1].extend(lines)
                continue
            if block is not None:
                yield block
            block = (int(fields[0]), lines)
        if block is not None:
            yield block
        if last is not None:
            yield (last, [])
    finally:
        stream.close()
