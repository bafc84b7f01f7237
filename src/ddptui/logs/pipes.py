"""Spooled files the diagnosis reads while the nodes still send them: the reading thread
writes each file's lines as they arrive, the diagnosis reads them as they grow, so the
nodes' reading and the login node's classifying overlap.  Core layer, stdlib only."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import BinaryIO, TextIO, cast


class Pipe:
    """One spooled file: written by the reading thread, read by the diagnosis."""

    def __init__(self, path: Path, cond: threading.Condition) -> None:
        self.path = path
        self._cond = cond
        self._out: TextIO | None = None
        self.opened = False  # the node opened the file and sends it
        self.done = False  # nothing more will come

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

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
        with self._cond:
            self.done = True
            self._cond.notify_all()

    def reader(self) -> BinaryIO:
        """A binary stream of the file that blocks while it may still grow."""
        return cast(BinaryIO, io.BufferedReader(_Growing(self, self._cond), 1 << 20))


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
