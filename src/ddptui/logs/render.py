"""A LogDiagnosis as plain text lines: the first cause with its fix, the evidence with
file:line, the other findings, a short timeline per rank.  Core layer."""

from __future__ import annotations

import textwrap
from datetime import datetime, timezone
from typing import Final

from ddptui.diagnosis.signatures import secondary_ids
from ddptui.glyphs import GLYPH, severity_glyph
from ddptui.logs.diagnose import LogDiagnosis, RankTimeline

WIDTH: Final = 100
TIMELINES_SHOWN: Final = 16
EVENTS_SHOWN: Final = 6


def _size(nbytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def clock(t: float | None) -> str:
    if t is None:
        return "--:--:--.---"
    return datetime.fromtimestamp(t, timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def _wrap(label: str, text: str) -> list[str]:
    pad = " " * len(label)
    return textwrap.wrap(text, WIDTH, initial_indent=label, subsequent_indent=pad) or [label]


def timeline_lines(tl: RankTimeline, events: int = EVENTS_SHOWN) -> list[str]:
    shown = tl.events
    cut = max(0, len(shown) - events)
    out = [f"  {tl.key}"]
    if cut or tl.dropped:
        out.append(f"    … {cut + tl.dropped} earlier event(s)")
    for e in shown[cut:]:
        out.append(f"    {clock(e.t)}  {severity_glyph(e.severity) or ' '} {e.label}  ({e.source}:{e.lineno})")
    return out


def cause_lines(diag: LogDiagnosis) -> list[str]:
    """The verdict: the first cause with its fix and evidence, or why there is none."""
    first = diag.first
    if first is None and diag.problems and not diag.bytes_read:
        return [f"{severity_glyph('error')} No input could be read (see the messages above)."]
    if first is None:
        return [f"{GLYPH['pass']} Nothing wrong found: no line matches a known failure."]
    rank = f", rank {first.rank}" if first.rank is not None else ""
    if first.severity == "error":
        out = [f"{severity_glyph('error')} First cause: {first.id}{rank}"]
    else:
        out = [f"{severity_glyph('warning')} No failure found, but a warning: {first.id}{rank}"]
    out.append(f"  {first.summary}")
    if first.where:
        out.append(f"  in code: {first.where}")
    out += _wrap("  cause: ", first.cause)
    out += _wrap("  fix:   ", first.fix)
    out.append("  evidence:")
    out += [f"    {ev[:300]}" for ev in first.evidence[:5]]
    return out


def human_lines(diag: LogDiagnosis, seconds: float | None = None) -> list[str]:
    took = f" in {seconds:.1f} s" if seconds is not None else ""
    out = [f"ddptui diagnose: {diag.lines_read:,} lines ({_size(diag.bytes_read)}){took}", ""]
    out += cause_lines(diag)
    first = diag.first
    others = [f for f in diag.findings if first is None or f.id != first.id]
    if others:
        out += ["", "Also in the logs:"]
        consequences = secondary_ids()
        for f in others[:12]:
            tail = " (a consequence)" if f.id in consequences else ""
            out.append(f"  {severity_glyph(f.severity) or ' '} {f.id}: {f.summary}{tail}")
        if len(others) > 12:
            out.append(f"  … {len(others) - 12} more (see the report)")
    if diag.notes:
        out += ["", "Files read on the nodes:"]
        out += [f"  {note}" for note in diag.notes[:20]]
        if len(diag.notes) > 20:
            out.append(f"  … {len(diag.notes) - 20} more (see the report)")
    timelines = [tl for tl in diag.timelines if tl.events]
    if timelines:
        out += ["", "Timeline per rank (UTC):"]
        for tl in timelines[:TIMELINES_SHOWN]:
            out += timeline_lines(tl)
        if len(timelines) > TIMELINES_SHOWN:
            out.append(f"  … {len(timelines) - TIMELINES_SHOWN} more ranks (see the report)")
    return out
