"""Shared by the tests that look at a stand-in job with the real `ddptui job` through the
local transport (test_job_frshared.py, test_job_overruled.py): a launcher named torchrun
whose workers carry torchrun's environment, and one look at it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def start_launcher(
    work: Path, script: str, args: list[str], workers: int, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`script` as work/bin/torchrun, run with `args` in a session of its own; returns once
    `workers` children are up (the caller kills the session, nothing else)."""
    launcher = work / "bin" / "torchrun"
    launcher.parent.mkdir(parents=True, exist_ok=True)
    launcher.write_text(script)
    proc = subprocess.Popen(
        [sys.executable, str(launcher), *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # its workers are up
        kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        if kids.exists() and len(kids.read_text().split()) >= workers:
            return proc
        time.sleep(0.1)
    os.killpg(proc.pid, 9)
    raise AssertionError(f"the job {args} did not start")


def look(work: Path, match: str, port: int, window: str) -> tuple[dict[str, Any], str]:
    """(the JSON report, the printed output) of `ddptui job --match MATCH --no-stacks` on a
    one-node local config."""
    config = work / "one.yaml"
    config.write_text(
        f"name: one-host\nmaster: {{addr: 127.0.0.1, port: {port}}}\n"
        "nodes: [{host: local, name: vm}]\npython: " + sys.executable + "\n"
    )
    out = work / f"job-{time.monotonic_ns()}.json"
    run = subprocess.run(
        [sys.executable, "-m", "ddptui", "job", str(config), "--match", match,
         "--no-stacks", "--window", window, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "XDG_STATE_HOME": str(work / "state")},
        check=False,
    )
    return json.loads(out.read_text()), run.stdout


def finding_ids(report: dict[str, Any]) -> list[str]:
    return [f["id"] for f in report["steps"][0]["findings"]]
