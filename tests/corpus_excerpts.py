"""The public-thread corpus (tests/fixtures/corpus/*.yaml) loaded once for the log
tests that diagnose its excerpts by id, and the three helpers they share."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "corpus"))

from score import load_corpus

from ddptui.logs.diagnose import LogDiagnosis, diagnose_lines

CORPUS = {e.id: e for e in load_corpus()}


def excerpt(name: str) -> LogDiagnosis:
    """The diagnosis of corpus excerpt `name`, its lines as pasted."""
    return diagnose_lines(list(CORPUS[name].lines), name)


def lead(d: LogDiagnosis) -> str | None:
    """The id of the finding the diagnosis leads with."""
    return d.first.id if d.first is not None else None


def ids(d: LogDiagnosis) -> list[str]:
    return [f.id for f in d.findings]
