"""One reading of the places the log pipeline quotes.  Core layer, stdlib only: it lives in
diagnosis/ so that the rules over facts and logs/ (above them) read it alike.

A finding's evidence quotes a log line as "SOURCE:LINE: TEXT" (logs/diagnose.py: SOURCE is
the input's label, "a.log", "corpus" or a remote input's "node1:/var/log/x.log"); a place
alone is "SOURCE:LINE" (a hit's `where`), or "SOURCE" with no line number; an unknown's key
is "rank N".  Paths are POSIX (no drive letters): a colon belongs to the source up to the
first ":LINE: ", and everything after it, colons included, is the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Final

# the shortest SOURCE followed by ":LINE: " (a text with colons of its own keeps them)
_QUOTED: Final = re.compile(r"(?P<source>.+?):(?P<line>\d+): (?P<text>.*)", re.DOTALL)
_PLACE: Final = re.compile(r"(?P<source>.+):(?P<line>\d+)")
_RANK: Final = re.compile(r"rank (?P<rank>\d+)")
_RANK_QUOTED: Final = re.compile(r"rank (?P<rank>\d+): (?P<text>.*)", re.DOTALL)


@dataclass(frozen=True)
class Quote:
    """A quoted line: where it was read (None where the string names no place) and what
    it says."""

    source: str | None
    line: int | None
    text: str
    rank: int | None = None

    @property
    def place(self) -> str:
        """"SOURCE:LINE", "SOURCE" or "rank N" as it was written; "" where none was."""
        if self.source is not None:
            return self.source if self.line is None else f"{self.source}:{self.line}"
        return "" if self.rank is None else f"rank {self.rank}"

    @property
    def placed(self) -> bool:
        """Whether it names a line of an input (SOURCE:LINE)."""
        return self.source is not None and self.line is not None


def parse_evidence(evidence: str) -> Quote:
    """'a.log:12: text' / 'rank 3: text' / 'rank 3: a.log:12: text' -> its parts; a string
    naming no place is all text."""
    r = _RANK_QUOTED.fullmatch(evidence)
    if r is not None:
        return replace(parse_evidence(r["text"]), rank=int(r["rank"]))
    m = _QUOTED.fullmatch(evidence)
    if m is not None:
        return Quote(m["source"], int(m["line"]), m["text"])
    return Quote(None, None, evidence)


def parse_place(where: str) -> Quote:
    """'a.log:12' / 'node1:/x.log' (no line number) / 'rank 3' -> a Quote with no text."""
    r = _RANK.fullmatch(where)
    if r is not None:
        return Quote(None, None, "", int(r["rank"]))
    m = _PLACE.fullmatch(where)
    if m is not None:
        return Quote(m["source"], int(m["line"]), "")
    return Quote(where or None, None, "")
