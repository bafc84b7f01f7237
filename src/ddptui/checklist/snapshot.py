"""The run at one moment, as views draw it (live from the run core, or a replayed
session). Plain data: no pydantic, no transport; the TUI's first frame imports it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ddptui.diagnosis.model import StepResult
from ddptui.report.first import FirstFailure, first_failure


@dataclass(frozen=True)
class RunSnapshot:
    """The run at one moment, for views: results so far, what runs, the header's state."""

    results: dict[str, StepResult]
    running: str | None
    selected: tuple[str, ...]
    state: str  # pass | warn | fail | error | running | waiting
    label: str  # e.g. "RUNNING 2/6", "WAITING 1/6", "PASS", "FAIL (3/6 run)"

    @cached_property
    def first(self) -> FirstFailure | None:
        """The first failure, computed once for this snapshot (banner, detail, jumps)."""
        return first_failure(self.results)
