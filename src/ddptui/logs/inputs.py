"""Diagnose many inputs at once: each becomes a stream of candidate lines, the streams
are merged in time order (k-way, one pending line per input) and classified.  Core layer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import BinaryIO, Final

from ddptui.logs.diagnose import Diagnoser, LogDiagnosis, merged
from ddptui.logs.reader import InputError, ReadStats, open_path, open_stream
from ddptui.logs.scan import from_blocks, from_chunks

MAX_INPUTS: Final = 1024  # open files at once during the merge
STDIN: Final = "-"


class Inputs:
    """The inputs of one diagnosis: opened lazily, problems collected, not raised."""

    def __init__(self) -> None:
        self.streams: list[tuple[Iterator[bytes], ReadStats]] = []
        # Lines a node filtered (logs/pipes.py): (lines above, lines) blocks, UTF-8.
        self.blocks: list[tuple[Iterator[tuple[int, list[bytes]]], ReadStats]] = []
        self.problems: list[str] = []

    def all_stats(self) -> list[ReadStats]:
        return [s for _, s in self.streams] + [s for _, s in self.blocks]

    def add_blocks(self, blocks: Iterator[tuple[int, list[bytes]]], stats: ReadStats) -> None:
        """A file a node read and filtered: the blocks of lines the diagnosis looks at;
        `stats` is filled with the node's count of the whole file by the last block."""
        self.blocks.append((blocks, stats))

    def add_path(self, path: str, stdin: BinaryIO | None = None) -> None:
        try:
            if path == STDIN:
                if stdin is None:
                    raise InputError("-: no standard input to read")
                self.streams.append(open_stream(stdin, "<stdin>"))
            else:
                self.streams.append(open_path(path))
        except InputError as exc:
            self.problems.append(str(exc))

    def add_stream(
        self, stream: BinaryIO, label: str, closer: Callable[[], None] | None = None
    ) -> None:
        try:
            self.streams.append(open_stream(stream, label, closer))
        except InputError as exc:
            if closer is not None:
                closer()
            self.problems.append(str(exc))

    def add_chunks(self, chunks: Iterable[bytes], label: str) -> ReadStats:
        """Chunks already decoded to UTF-8 text elsewhere (read on a node)."""
        stats = ReadStats(label)

        def counted() -> Iterator[bytes]:
            for c in chunks:
                stats.bytes_read += len(c)
                stats.lines += c.count(b"\n")
                yield c

        self.streams.append((counted(), stats))
        return stats


def diagnose_inputs(inputs: Inputs, label: str) -> LogDiagnosis:
    """Merge and classify every opened input."""
    count = len(inputs.streams) + len(inputs.blocks)
    if count > MAX_INPUTS:
        raise InputError(
            f"{count} inputs: at most {MAX_INPUTS} at once; diagnose fewer files"
        )
    d = Diagnoser(label)
    streams = [from_chunks(chunks, stats.label, stats.encoding) for chunks, stats in inputs.streams]
    streams += [from_blocks(blocks, stats.label, "utf-8") for blocks, stats in inputs.blocks]
    for cand in merged(streams):
        d.feed(cand)
    every = inputs.all_stats()
    d.bytes_read = sum(stats.bytes_read for stats in every)
    d.lines_read = sum(stats.lines for stats in every)
    d.problems = [*inputs.problems, *(p for s in every for p in s.problems)]
    return d.result()


def diagnose_paths(paths: Sequence[str], stdin: BinaryIO | None = None) -> LogDiagnosis:
    """Local files (plain or gzip) and "-" for standard input."""
    inputs = Inputs()
    for p in paths:
        inputs.add_path(p, stdin)
    return diagnose_inputs(inputs, ", ".join(paths) if len(paths) <= 3 else f"{len(paths)} files")
