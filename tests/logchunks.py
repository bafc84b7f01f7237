"""The CLI's reading path for a test's excerpt: its lines as a file's bytes, cut into
small chunks (a line split across chunk boundaries), as `ddptui diagnose FILE` reads."""

from __future__ import annotations

from ddptui.logs.diagnose import diagnose_candidates
from ddptui.logs.scan import from_chunks


def first_via_chunks(lines: list[str], source: str = "excerpt.log") -> str | None:
    """The first finding's id when the excerpt is read in 7-byte chunks."""
    data = ("\n".join(lines) + "\n").encode()
    chunks = [data[i : i + 7] for i in range(0, len(data), 7)]
    d = diagnose_candidates(from_chunks(chunks, source), source).result()
    return d.first.id if d.first else None
