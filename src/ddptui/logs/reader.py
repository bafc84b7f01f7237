"""Opening log inputs: local files (plain or gzip), standard input, byte streams from a
node.  Core layer, stdlib only.

Everything is read in CHUNK-sized pieces, so memory stays bounded whatever the size.
The head of each input is sniffed once: gzip by its magic, UTF-16 by its BOM, binary
data by its share of NUL bytes (a clear message instead of garbage findings), and the
encoding (UTF-8, undecodable bytes replaced; Latin-1 when the head is not UTF-8 at all).
"""

from __future__ import annotations

import codecs
import gzip
import io
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Final, cast

CHUNK: Final = 1 << 20
SNIFF: Final = 64 * 1024
NUL_SHARE: Final = 0.01  # more NUL bytes than this in the head: not a text log
# Bytes no text log holds (tab, newline, CR, FF, VT and ESC for colours are text).
CONTROL_BYTES: Final = bytes([*range(0, 9), *range(14, 27), *range(28, 32)])
CONTROL_SHARE: Final = 0.05
BAD_UTF8_SHARE: Final = 0.02  # more replaced characters than this: read as Latin-1


class InputError(Exception):
    """An input cannot be read as a log; the message says which and why."""


@dataclass
class ReadStats:
    """Bytes and problems of one input, filled while it is read."""

    label: str
    encoding: str = "utf-8"
    bytes_read: int = 0
    lines: int = 0
    problems: list[str] = field(default_factory=list)


def sniff(head: bytes, label: str) -> str:
    """The encoding to read `head`'s input with; InputError for binary data."""
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    if not head:
        return "utf-8"
    nuls = head.count(0)
    control = len(head) - len(head.translate(None, CONTROL_BYTES))
    if nuls / len(head) > NUL_SHARE or control / len(head) > CONTROL_SHARE:
        raise InputError(
            f"{label}: binary data, not a text log ({control} control bytes, {nuls} of them "
            f"NUL, in the first {len(head)}); give the log file itself (a core dump, a pickle "
            "or a checkpoint cannot be read)"
        )
    text = head.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") - head.decode("utf-8", errors="ignore").count("\ufffd")
    if bad and bad / max(len(text), 1) > BAD_UTF8_SHARE:
        return "latin-1"
    return "utf-8"


def _chunks(stream: BinaryIO, first: bytes, stats: ReadStats) -> Iterator[bytes]:
    """`first`, then the rest of the stream; a read error ends the input with a problem
    noted (what was read so far still counts)."""
    if first:
        stats.bytes_read += len(first)
        stats.lines += first.count(b"\n")
        yield first
    while True:
        try:
            chunk = stream.read(CHUNK)
        except (OSError, EOFError, zlib.error) as exc:
            stats.problems.append(f"{stats.label}: read stopped after {stats.bytes_read} bytes: {exc}")
            return
        if not chunk:
            return
        stats.bytes_read += len(chunk)
        stats.lines += chunk.count(b"\n")
        yield chunk


def _utf16_chunks(stream: BinaryIO, first: bytes, stats: ReadStats) -> Iterator[bytes]:
    text = io.TextIOWrapper(io.BufferedReader(_Prepend(first, stream)), "utf-16", errors="replace")
    while True:
        try:
            piece = text.read(CHUNK // 2)
        except (OSError, EOFError, zlib.error) as exc:
            stats.problems.append(f"{stats.label}: read stopped: {exc}")
            return
        if not piece:
            return
        data = piece.encode("utf-8")
        stats.bytes_read += len(data)
        stats.lines += data.count(b"\n")
        yield data


class _Prepend(io.RawIOBase):
    """A raw stream that yields `first` and then what `rest` yields."""

    def __init__(self, first: bytes, rest: BinaryIO) -> None:
        self._first = first
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buf: bytearray | memoryview) -> int:  # type: ignore[override]
        if self._first:
            n = min(len(buf), len(self._first))
            buf[:n] = self._first[:n]
            self._first = self._first[n:]
            return n
        data = self._rest.read(len(buf))
        buf[: len(data)] = data
        return len(data)


def open_stream(stream: BinaryIO, label: str, closer: Callable[[], None] | None = None) -> tuple[
    Iterator[bytes], ReadStats
]:
    """Sniff an open binary stream; (chunks, stats).  InputError for binary data."""
    stats = ReadStats(label)
    try:
        head = stream.read(SNIFF)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{label}: cannot read: {exc}") from exc
    if head[:2] == b"\x1f\x8b":
        stream = cast(BinaryIO, gzip.GzipFile(fileobj=_Prepend(head, stream), mode="rb"))
        try:
            head = stream.read(SNIFF)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(f"{label}: not a readable gzip file: {exc}") from exc
    stats.encoding = sniff(head, label)
    inner = (
        _utf16_chunks(stream, head, stats)
        if stats.encoding == "utf-16"
        else _chunks(stream, head, stats)
    )
    if stats.encoding == "utf-16":
        stats.encoding = "utf-8"  # re-encoded on the way

    def chunks() -> Iterator[bytes]:
        try:
            yield from inner
        finally:
            if closer is not None:
                closer()

    return chunks(), stats


def open_path(path: str) -> tuple[Iterator[bytes], ReadStats]:
    """A local file, plain or gzip; InputError says plainly what is wrong."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{path}: is a directory; give the log files in it (e.g. {path}/*.log)")
    try:
        f = p.open("rb")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied (run as a user who may read it)") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot open: {exc.strerror or exc}") from None
    try:
        return open_stream(f, path, f.close)
    except InputError:
        f.close()
        raise
