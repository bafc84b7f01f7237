"""Run `ddptui check` as a user would (a subprocess) and read its JSON report."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed import Testbed


@dataclass
class CheckRun:
    rc: int
    report: dict[str, Any]
    stdout: str
    stderr: str
    seconds: float

    def step(self, step_id: str) -> dict[str, Any]:
        return next(s for s in self.report["steps"] if s["id"] == step_id)

    def finding(self, step_id: str, finding_id: str) -> dict[str, Any]:
        found = [f for f in self.step(step_id)["findings"] if f["id"] == finding_id]
        assert found, (
            f"no {finding_id} in {step_id}: "
            f"{[f['id'] for f in self.step(step_id)['findings']]}\n{self.stdout}"
        )
        return found[0]

    @property
    def first(self) -> dict[str, Any] | None:
        return self.report["first_failure"]  # type: ignore[no-any-return]


def check(config: Path, *args: str, timeout: float = 120) -> CheckRun:
    out = config.with_suffix(".report.json")
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "ddptui", "check", str(config), "--json", str(out), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    took = time.monotonic() - started
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    report = json.loads(out.read_text()) if out.exists() else {}
    return CheckRun(proc.returncode, report, proc.stdout, proc.stderr, took)


def assert_nodes_quiet(tb: Testbed, timeout: float = 10) -> None:
    """Nothing ddptui started outlives the run, on any node."""
    left = {n.name: tb.wait_quiet(n.index, timeout) for n in tb.nodes}
    assert not any(left.values()), f"processes left on nodes: {left}"
