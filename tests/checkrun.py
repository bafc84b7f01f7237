"""Run `ddptui check` as a user would (a subprocess) and read its JSON report."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed import Testbed, describe_pid


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


def check(
    config: Path, *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> CheckRun:
    """`env`: the subprocess's whole environment (default: this process's)."""
    out = config.with_suffix(".report.json")
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "ddptui", "check", str(config), "--json", str(out), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    took = time.monotonic() - started
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    report = json.loads(out.read_text()) if out.exists() else {}
    return CheckRun(proc.returncode, report, proc.stdout, proc.stderr, took)


def assert_nodes_quiet(tb: Testbed, timeout: float = 10) -> None:
    """Nothing ddptui started outlives the run, on any node."""
    left = {n.name: tb.wait_quiet(n.index, timeout) for n in tb.nodes}
    shown = {name: [describe_pid(p) for p in pids] for name, pids in left.items() if pids}
    assert not shown, f"processes left on nodes: {shown}"


def start_check(config: Path, steps: str) -> subprocess.Popen[str]:
    """`ddptui check` in the background, returned once the ssh step has finished
    (connections up, the next step starting)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddptui", "check", str(config), "--steps", steps],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if "SSH reachability" in line:
            break
    return proc


def interrupt(proc: subprocess.Popen[str], within: float) -> str:
    """Ctrl-C; the run must exit 130 within `within` seconds, without a traceback."""
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=within + 15)
    assert proc.returncode == 130, out + err
    assert time.monotonic() - sent < within
    assert "Traceback" not in out + err
    return out
