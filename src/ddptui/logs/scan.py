"""From raw lines to candidate lines: the ones a signature may match, with their time,
rank and the cause torch printed after ``Last error:``.  Core layer, stdlib only.

Two feeds share the logic: `from_lines` (an iterable of str, used by callers that hold a
few thousand lines) and `from_chunks` (bytes read in megabyte chunks from a file, the
path a 1 GB log takes).  The chunk feed skips a line that cannot match with one
dictionary look-up: its verdict is cached under the line with every digit replaced by 0
(timestamps, pids and step counters differ, the words do not); a trigger without digits
is in the line exactly when it is in that key, and a key that may hold one of the few
triggers with digits (a progress bar's "[00:00<?") sends its line to the full check
(prefilter.KeyScan), so every line gets its own exact verdict.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Final

from ddptui.diagnosis.signatures import MAX_LINE, Signature, classify_line
from ddptui.logs.lineinfo import LineHead, parse_head, parse_time, traceback_where
from ddptui.logs.prefilter import DIGITS_TO_ZERO, Prefilter, default_prefilter
from ddptui.logs.reader import CHUNK, SNIFF
from ddptui.logs.warnwrap import WARN_WRAP, continues, warn_cut

LAST_ERROR: Final = "Last error:"
# A gloo enforce that a terminal or a paste wrapped after its "[enforce fail at F:L]".
_ENFORCE_HEAD: Final = re.compile(r"\[enforce fail at [^\]]*\]\s*$")


def joins_next(text: str) -> bool:
    """Whether a line's message continues on the next line: torch's bare "Last error:",
    or a gloo enforce cut right after its place."""
    stripped = text.rstrip()
    return stripped.endswith(LAST_ERROR) or (
        stripped.endswith("]") and _ENFORCE_HEAD.search(stripped[-300:]) is not None
    )


# logs31: a message a terminal or a paste cut at its width keeps the one space it was cut at
# ("... waiting for clients. " / "1/16 clients joined."); the next line goes on in lower
# case or with a digit (a new message starts with its exception's name, a time, a prefix).
_GOES_ON: Final = re.compile(r"[a-z0-9`(]")


def cut_at_width(text: str) -> bool:
    """Whether a line ends in the single space a wrapped message was cut at."""
    return text[-1:] == " " and text[-2:-1] not in (" ", "") and len(text) > 40


def _goes_on(body: str) -> bool:
    return _GOES_ON.match(body) is not None


def _rejoin(first: str, body: str) -> str:
    """A wrapped message's two halves as one line (the second's launcher prefix dropped)."""
    return f"{first.rstrip()} {body.strip()}"


_DIGITS_TO_ZERO: Final = DIGITS_TO_ZERO
_UNSEEN: Final = object()
CACHE_LIMIT: Final = 50_000  # verdicts kept (~8 MB); cleared when full
LONG_LINE: Final = 1 << 20
LOOKBACK: Final = 40  # lines searched upwards for the time of a line without one
_TIME_CACHE: Final = 1024  # lines whose time _Cursor remembers (by text)
_MAY_START_WITH_TIME: Final = frozenset("[0123456789IWEF")


@dataclass(frozen=True)
class Candidate:
    """One line worth classifying, in its source's order."""

    source: str
    lineno: int
    text: str  # the line ("Last error: <cause>" when joined)
    head: LineHead
    t: float | None  # its own time, or the last one its source printed before it
    sigs: tuple[Signature, ...]  # the signatures it may match (empty: context only)
    where: str | None = None  # "train.py:88 in step": the user's frame of the traceback above
    end: bool = False  # no line: its source ended at `lineno` (the last line's number)
    # logs33, on the end marker: (line number, text) of the source's first and last SPAN
    # lines, read for failure words only when nothing else was found (logs/unknown.py)
    edges: tuple[tuple[int, str], ...] = ()


_END_HEAD: Final = LineHead(None, None, None, None, "")


def end_of(
    source: str, lineno: int, t: float | None, edges: Iterable[tuple[int, str]] = ()
) -> Candidate:
    """The marker a feed yields after its last line: where its source ended, with the
    source's first and last lines (`_Edges`)."""
    return Candidate(source, lineno, "", _END_HEAD, t, (), None, True, tuple(edges))


SPAN: Final = 100  # logs33: lines kept from each end of a source (a pasted log is whole)


class _Edges:
    """A source's first and last SPAN lines as a feed passes them (bounded: a 1 GB log
    keeps 2 x SPAN lines, its tail taken per block, not per line)."""

    def __init__(self) -> None:
        self.head: list[tuple[int, bytes | str]] = []
        self.tail: deque[tuple[int, bytes | str]] = deque(maxlen=SPAN)

    def block(self, before: int, lines: Sequence[bytes]) -> None:
        if len(self.head) < SPAN:
            self.head.extend((before + 1 + i, raw) for i, raw in enumerate(lines[: SPAN - len(self.head)]))
        start = max(0, len(lines) - SPAN)
        self.tail.extend((before + 1 + i, lines[i]) for i in range(start, len(lines)))

    def line(self, lineno: int, text: str) -> None:
        if len(self.head) < SPAN:
            self.head.append((lineno, text))
        self.tail.append((lineno, text))

    def lines(self, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
        seen = 0
        for lineno, raw in [*self.head, *self.tail]:
            if lineno > seen:
                seen = lineno
                yield lineno, (raw if isinstance(raw, str) else decode(raw, encoding)).rstrip("\r")


def _this_year() -> int:
    return datetime.now(timezone.utc).year


class _Cursor:
    """Per-source state: the year glog lines lack, the last time seen."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.year = _this_year()
        self.last_t: float | None = None
        # the time of a line above, by its text: each line is in LOOKBACK windows, and a
        # long run of lines without a time (one error repeated by every rank) would
        # otherwise be parsed LOOKBACK times over
        self._time_of: dict[str, float | None] = {}

    def _time_above(self, line: str) -> float | None:
        if line not in self._time_of:
            if len(self._time_of) >= _TIME_CACHE:
                self._time_of.clear()
            self._time_of[line] = parse_time(parse_head(line, self.year)[0].body, self.year)[0]
        return self._time_of[line]

    def candidate(
        self, lineno: int, text: str, sigs: tuple[Signature, ...], before: Sequence[str] = ()
    ) -> Candidate:
        """`before`: the lines above it, nearest first (for its time when it has none,
        and the traceback that ends above it)."""
        head, year = parse_head(text, self.year)
        if year is not None:
            if year != self.year:
                self._time_of.clear()
            self.year = year
        t = head.t
        if t is None:
            for prev in before:  # nearest earlier line with a time
                t = self._time_above(prev)
                if t is not None:
                    break
        if t is None:
            t = self.last_t
        else:
            self.last_t = t
        where = traceback_where(list(before)) if sigs and before else None
        return Candidate(self.source, lineno, text, head, t, sigs, where)


def _join(last_error: str, cause: str, year: int) -> str:
    """torch's bare "Last error:" line and the cause on the next line, as one line (the
    launcher's prefix of the second line dropped: the first one has it)."""
    return f"{last_error} {parse_head(cause, year)[0].body.strip()}"


# A line held for what may continue it: (line number, text so far, the lines above it,
# how many more lines an NCCL WARN may still take (logs35; 0: a line cut at its width))
Cut = tuple[int, str, Sequence[str], int]


def _cut(lineno: int, text: str, sigs: tuple[Signature, ...], above: Sequence[str]) -> Cut | None:
    """`text` held for its continuation: a line cut at its width (logs31), or an NCCL
    WARN no signature reads (logs35, logs/warnwrap.py); None: read it as it stands."""
    if cut_at_width(text):
        return (lineno, text, above, 0)
    if warn_cut(text, sigs):
        return (lineno, text, above, WARN_WRAP)
    return None


def _after_cut(
    cur: _Cursor, pf: Prefilter, cut: Cut, line: str
) -> tuple[tuple[Candidate, ...], bool, Cut | None]:
    """The candidate of a held line (`_cut`) joined with `line` where that goes on with
    its message and is no line of its own to read (True), else the held line alone
    (False: `line` is read on its own); a WARN still unread after the join is held
    again for the next line (no candidate yet: ())."""
    body = parse_head(line, cur.year)[0].body
    lineno, text, above, more = cut
    if more:
        if continues(body, _sigs_for(pf, line)):
            joined = _rejoin(text, body)
            sigs = _sigs_for(pf, joined) or ()
            if more > 1 and warn_cut(joined, sigs):
                return (), True, (lineno, joined, above, more - 1)
            return (cur.candidate(lineno, joined, sigs, above),), True, None
    elif _goes_on(body) and _unmatched(_sigs_for(pf, line), line):
        joined = _rejoin(text, body)
        return (cur.candidate(lineno, joined, _sigs_for(pf, joined) or (), above),), True, None
    return (cur.candidate(lineno, text, _sigs_for(pf, text) or (), above),), False, None


def _unmatched(sigs: tuple[Signature, ...] | None, line: str) -> bool:
    """No signature reads `line` on its own, nor is it a line of facts (a context
    trigger's: ()).  logs35: whether its words hold a trigger of the prefilter's choice,
    which shifts as signatures are added, does not decide."""
    return sigs is None or (bool(sigs) and classify_line(line, sigs) is None)


def _held(
    cur: _Cursor, pf: Prefilter, cut: Cut | None, pending: tuple[int, str] | None
) -> Iterator[Candidate]:
    """The lines a feed still held when its source ended (a cut line, a bare "Last error:")."""
    if cut is not None:
        yield cur.candidate(cut[0], cut[1], _sigs_for(pf, cut[1]) or (), cut[2])
    if pending is not None:
        yield cur.candidate(pending[0], pending[1], _sigs_for(pf, pending[1]) or ())


def _sigs_for(pf: Prefilter, text: str) -> tuple[Signature, ...] | None:
    """Signatures `text` may match, () for a context-only line, None for neither."""
    return pf.candidates(text)


def from_lines(
    lines: Iterable[str], source: str, pf: Prefilter | None = None
) -> Iterator[Candidate]:
    """Candidates from str lines (line numbers from 1)."""
    pf = pf or default_prefilter()
    cur = _Cursor(source)
    pending: tuple[int, str] | None = None  # a bare "Last error:" waiting for its cause
    cut: Cut | None = None  # logs31, logs35: a wrapped line's first part
    recent: deque[str] = deque(maxlen=LOOKBACK)
    edges = _Edges()
    lineno = 0
    for lineno, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        edges.line(lineno, line)
        above = recent.copy()
        recent.append(line)
        if cut is not None:
            cands, went_on, cut = _after_cut(cur, pf, cut, line)
            yield from cands
            if went_on:
                continue
        if pending is not None:
            joined = _join(pending[1], line, cur.year)
            sigs = _sigs_for(pf, joined)
            yield cur.candidate(pending[0], joined, sigs or ())
            pending = None
            continue
        if joins_next(line):
            pending = (lineno, line.rstrip())
            continue
        sigs = _sigs_for(pf, line)
        if sigs is not None and (held := _cut(lineno, line, sigs, above)) is not None:
            above.reverse()
            cut = held
            continue
        if sigs is None:
            if line[:1] in _MAY_START_WITH_TIME:  # keep the time current for what follows
                t, year = parse_time(parse_head(line, cur.year)[0].body, cur.year)
                cur.last_t = t if t is not None else cur.last_t
                cur.year = year or cur.year
            continue
        above.reverse()
        yield cur.candidate(lineno, line, sigs, above)
    yield from _held(cur, pf, cut, pending)
    yield end_of(source, lineno, cur.last_t, edges.lines())


def node_filter(pf: Prefilter | None = None) -> dict[str, object]:
    """What the logread probe needs to send only the lines `from_blocks` looks at
    (probes/_linescan.py): the prefilter's two patterns and the chunking's limits."""
    pf = pf or default_prefilter()
    exact, folded = pf.exact.scan, pf.folded.scan
    return {
        "exact": exact.pattern.decode("utf-8") if exact is not None else None,
        "folded": folded.pattern.decode("utf-8") if folded is not None else None,
        "all": bool(pf.unfiltered),  # a signature without a trigger sees every line
        **pf.keys.patterns(),  # verdicts per line with its digits made 0 (prefilter.KeyScan)
        "max_line": MAX_LINE,
        "long_line": LONG_LINE,
        "lookback": LOOKBACK,
        "span": SPAN,  # logs33: a file's first and last lines are read for failure words
        "sniff": SNIFF,
        "chunk": CHUNK,
    }


def decode(raw: bytes, encoding: str) -> str:
    return raw.decode(encoding, errors="replace")


def _chunk_lines(chunks: Iterable[bytes]) -> Iterator[list[bytes]]:
    """The complete lines of each chunk (the last, unterminated line at the end).  A line
    longer than LONG_LINE (a tensor dump, a file without newlines) keeps its first
    MAX_LINE bytes and the rest is skipped, so memory stays bounded."""
    carry = b""
    skipping = False  # inside the rest of an over-long line
    for piece in chunks:
        chunk = piece
        if skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                continue
            chunk, skipping = chunk[nl:], False  # its newline ends the kept head
        data = carry + chunk if carry else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            carry = data
            if len(carry) > LONG_LINE:
                carry, skipping = carry[:MAX_LINE], True
            continue
        carry = data[cut + 1 :]
        yield data[:cut].split(b"\n")
    if carry:
        yield [carry]


def from_chunks(
    chunks: Iterable[bytes], source: str, encoding: str = "utf-8", pf: Prefilter | None = None
) -> Iterator[Candidate]:
    """Candidates from a byte stream read in chunks (any boundaries)."""

    def blocks() -> Iterator[tuple[int, list[bytes]]]:
        before = 0
        for lines in _chunk_lines(chunks):
            yield before, lines
            before += len(lines)

    return from_blocks(blocks(), source, encoding, pf)


def from_blocks(
    blocks: Iterable[tuple[int, list[bytes]]], source: str, encoding: str = "utf-8",
    pf: Prefilter | None = None,
) -> Iterator[Candidate]:
    """Candidates from blocks of consecutive lines, each with the number of lines above
    it: every chunk's lines (a whole file), or the parts of the chunks a node sent after
    filtering them with the same prefilter (probes/_linescan.py): a line's lookback stays
    within its block, so a block that starts LOOKBACK lines above each admitted line (or
    at its chunk's start) gives the candidates the whole chunk gives.  The end marker
    takes the line number after the last block: a node's read ends with an empty block
    after the file's last line."""
    pf = pf or default_prefilter()
    scan, verdict = pf.hit, pf.keys.verdict
    cur = _Cursor(source)
    cache: dict[bytes, bool | None] = {}
    pending: tuple[int, str] | None = None  # a bare "Last error:" waiting for its cause
    cut: Cut | None = None  # logs31, logs35: a wrapped line's first part
    edges = _Edges()
    lineno = 0
    for before, lines in blocks:
        lineno = before
        edges.block(before, lines)
        for i, raw in enumerate(lines):
            lineno += 1
            if cut is not None:
                cands, went_on, cut = _after_cut(cur, pf, cut, decode(raw, encoding).rstrip("\r"))
                yield from cands
                if went_on:
                    continue
            if pending is not None:
                joined = _join(pending[1], decode(raw, encoding), cur.year)
                yield cur.candidate(pending[0], joined, _sigs_for(pf, joined) or ())
                pending = None
                continue
            key = raw.translate(_DIGITS_TO_ZERO)
            hit = cache.get(key, _UNSEEN)
            if hit is _UNSEEN:
                if len(cache) >= CACHE_LIMIT:
                    cache.clear()
                hit = cache[key] = verdict(key)
            if hit is None:  # a trigger with digits may be in it: the line decides
                hit = scan(raw)
            if not hit:
                continue
            text = decode(raw, encoding).rstrip("\r")
            if joins_next(text):
                pending = (lineno, text.rstrip())
                continue
            sigs = _sigs_for(pf, text)
            if sigs is not None:
                before_lines = [decode(b, encoding) for b in reversed(lines[max(0, i - LOOKBACK) : i])]
                if (held := _cut(lineno, text, sigs, before_lines)) is not None:
                    cut = held
                    continue
                yield cur.candidate(lineno, text, sigs, before_lines)
    yield from _held(cur, pf, cut, pending)
    yield end_of(source, lineno, cur.last_t, edges.lines(encoding))
