"""A fast prefilter in front of the signature regexes.  Core layer, stdlib only.

A 1 GB log has ~10 million lines and almost none of them is a failure; running 80+
regexes on each would take minutes.  Every signature's regex needs some literal text to
match (``Bootstrap : no socket interface found`` needs ``no socket interface``), so the
needles are derived from the regexes themselves, and a small set of short "trigger"
strings is chosen that every needle contains (a greedy set cover, preferring strings
that healthy runs do not print).  A line without any trigger cannot match any signature:
it is skipped with a few ``bytes.find`` scans per megabyte instead of a regex per line.
Signatures added to the YAML are covered automatically.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ddptui.diagnosis.signatures import MAX_LINE, Signature, load_signatures

# The regex parser (re._parser since Python 3.11): the needles come from the parsed
# pattern, so they are exactly what the engine requires.
sre_parse: Any = importlib.import_module("re._parser")

# Lines the log reader needs to see besides signature matches: torch's "Last error:"
# (the cause is on the next line), NCCL's Init lines (pid -> rank, the rank timeline)
# and torchrun's per-worker failure lines (pid -> local rank).
CONTEXT_TRIGGERS: Final = ("Last error:", " nranks ", "local_rank: ")
MIN_NEEDLE: Final = 4
# Typical healthy output: a trigger found there would cost a classification per line,
# so windows start on characters it rarely prints.
SAMPLE_FILE: Final = Path(__file__).with_name("healthy_sample.txt")


def _literal_runs(items: Iterable[tuple[Any, Any]]) -> list[str]:
    runs, cur = [], []
    for op, av in items:
        if op is sre_parse.LITERAL:
            cur.append(chr(av))
            continue
        if cur:
            runs.append("".join(cur))
            cur = []
    if cur:
        runs.append("".join(cur))
    return runs


def _required(items: Sequence[tuple[Any, Any]]) -> list[str] | None:
    """Strings of which a match of this sequence contains at least one (any-of), or None
    when no literal is required.  Picks the best requirement of the sequence's parts."""
    options: list[list[str]] = [[r] for r in _literal_runs(items)]
    for op, av in items:
        sub: list[str] | None = None
        if op is sre_parse.SUBPATTERN:
            sub = _required(list(av[-1]))
        elif op is sre_parse.BRANCH:
            alts = [_required(list(b)) for b in av[1]]
            if all(a is not None for a in alts):
                sub = [n for a in alts if a is not None for n in a]
        elif op in (sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT) and av[0] >= 1:
            sub = _required(list(av[2]))
        if sub:
            options.append(sub)
    options = [o for o in options if o and min(len(n) for n in o) >= MIN_NEEDLE]
    if not options:
        return None
    return max(options, key=lambda o: (min(len(n) for n in o), -len(o)))


def needles(sig: Signature) -> list[str] | None:
    """Literal strings one of which every line this signature matches contains; None when
    the regex requires none we can use (that signature then sees every line)."""
    if sig.regex.flags & re.IGNORECASE:
        return None
    try:
        parsed = sre_parse.parse(sig.regex.pattern)
    except Exception:  # noqa: BLE001 - an exotic pattern just goes without a prefilter
        return None
    return _required(list(parsed))


WINDOW: Final = 8


def _window(needle: str, freq: Mapping[str, float]) -> str:
    """The WINDOW-long piece of `needle` that starts on its rarest character: the scan
    regex only stops where such a first character stands."""
    if len(needle) <= WINDOW:
        return needle
    starts = range(len(needle) - WINDOW + 1)
    best = min(starts, key=lambda i: (freq.get(needle[i], 0.0), i))
    return needle[best : best + WINDOW]


def _trie_pattern(words: Iterable[str]) -> str:
    """One regex for many literals, factored by common prefixes so that the engine tests
    one character set per position instead of every alternative."""
    root: dict[str, Any] = {}
    for w in words:
        node = root
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        if "" in node:
            return ""  # a shorter word ends here: its prefix is enough to stop
        alts = [re.escape(ch) + emit(sub) for ch, sub in sorted(node.items())]
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"

    return emit(root)


@dataclass(frozen=True)
class Prefilter:
    """The scan regex and, per trigger window, the signatures a line holding it may match."""

    scan: re.Pattern[bytes]  # finds triggers in raw bytes
    scan_text: re.Pattern[str]  # every trigger on one line, overlapping ones too
    by_trigger: dict[str, tuple[Signature, ...]]
    unfiltered: tuple[Signature, ...]  # signatures with no usable needle: every line
    signatures: tuple[Signature, ...]

    def candidates(self, line: str) -> tuple[Signature, ...] | None:
        """The signatures that may match `line` in file order, or None when none can
        (also None for a line that only holds a context trigger)."""
        hit = set(self.scan_text.findall(line[:MAX_LINE]))
        keep = {id(s) for t in hit for s in self.by_trigger.get(t, ())}
        keep.update(id(s) for s in self.unfiltered)
        if not keep:
            return None
        return tuple(s for s in self.signatures if id(s) in keep)


def build_prefilter(sigs: Sequence[Signature], sample: str | None = None) -> Prefilter:
    if sample is None:
        sample = SAMPLE_FILE.read_text(encoding="utf-8")
    counts: dict[str, int] = {}
    for ch in sample:
        counts[ch] = counts.get(ch, 0) + 1
    freq = {ch: n / len(sample) for ch, n in counts.items()}
    by_trigger: dict[str, list[Signature]] = {}
    unfiltered = []
    for sig in sigs:
        found = needles(sig)
        if found is None:
            unfiltered.append(sig)
            continue
        for n in found:
            bucket = by_trigger.setdefault(_window(n, freq), [])
            if sig not in bucket:
                bucket.append(sig)
    for t in CONTEXT_TRIGGERS:
        by_trigger.setdefault(t, [])
    pattern = _trie_pattern(by_trigger)
    # The trie stops at the shortest trigger of a shared prefix; map what the regex
    # returns to every trigger starting with it.
    merged: dict[str, tuple[Signature, ...]] = {}
    for found_text in {re.match(pattern, t).group() for t in by_trigger}:  # type: ignore[union-attr]
        members = {id(s) for t, ss in by_trigger.items() if t.startswith(found_text) for s in ss}
        merged[found_text] = tuple(s for s in sigs if id(s) in members)
    return Prefilter(
        scan=re.compile(pattern.encode("utf-8")),
        scan_text=re.compile(f"(?=({pattern}))"),  # overlapping: every trigger on a line
        by_trigger=merged,
        unfiltered=tuple(unfiltered),
        signatures=tuple(sigs),
    )


@functools.lru_cache(maxsize=1)
def default_prefilter() -> Prefilter:
    return build_prefilter(load_signatures())
