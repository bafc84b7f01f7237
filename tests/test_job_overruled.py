"""`ddptui job` must not call a job healthy because its ranks are alive and busy when the
job's own communicators say it is stuck.

Seen on the lent H200 (tests/fixtures/gpu-h200/fail11/barrier0*): rank 0 alone called
dist.barrier() while rank 1 all-reduced. NCCL said "message truncated", both ranks stayed
alive at 100-250 % CPU (NCCL's threads spin) with quiet output, and without py-spy the look
said "HEALTHY: 2 ranks running of 2, 2 progressed", above JOB-FR-DIVERGED ("ranks part
ways at collective #4: rank 0 all_reduce_barrier [[1]], rank 1 all_reduce [[1048576]]").

Real processes on this machine, as in test_job_frshared.py: a launcher named torchrun (a
stand-in starting two workers with torchrun's environment) whose workers spin on the CPU,
and the real job probe through the local transport; the dumps are that run's real torch
2.11 flight-recorder dumps, copied where the workers' TORCH_FR_DUMP_TEMP_FILE names them,
after the job started (an older one is stale)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from standinjob import finding_ids, look, start_launcher

FR = Path(__file__).parent / "fixtures" / "gpu-h200" / "fail11" / "fr"
LAUNCHER = """\
import os, subprocess, sys
prefix = sys.argv[3]
kids = []
for rank in (0, 1):
    env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", GROUP_RANK="0",
               MASTER_ADDR="127.0.0.1", MASTER_PORT="29998", TORCHELASTIC_RUN_ID="overruled",
               TORCH_FR_DUMP_TEMP_FILE=prefix)
    kids.append(subprocess.Popen([sys.executable, "-c", "while True: pass"], env=env))
for k in kids:
    k.wait()
"""


def _start(work: Path) -> subprocess.Popen[bytes]:
    return start_launcher(work, LAUNCHER, ["--tag", "overruled", str(work / "fr" / "barrier0-")], 2)


def _look(work: Path) -> tuple[dict[str, Any], str]:
    return look(work, "tag overruled", 29998, "1")


_ids = finding_ids


def test_busy_ranks_whose_flight_recorder_parts_ways_are_hung_not_healthy(tmp_path: Path) -> None:
    proc = _start(tmp_path)
    try:
        # twin: no dump yet, the busy ranks look healthy (nothing says otherwise)
        report, shown = _look(tmp_path)
        assert "JOB-HEALTHY" in _ids(report), _ids(report)
        assert "HEALTHY" in shown

        time.sleep(1.1)  # the dumps newer than the job's start (clock ticks)
        (tmp_path / "fr").mkdir()
        for rank in (0, 1):
            shutil.copyfile(FR / f"barrier0-{rank}", tmp_path / "fr" / f"barrier0-{rank}")
        report, shown = _look(tmp_path)
        ids = _ids(report)
        assert ids[0] == "JOB-FR-DIVERGED", ids
        assert "JOB-HEALTHY" not in ids, ids
        assert "HUNG" in shown and "HEALTHY" not in shown, shown
        assert "hung: the ranks are alive and busy, but flight recorder: ranks part ways at collective #4" in shown
        first = report["steps"][0]["findings"][0]
        assert "all_reduce_barrier" in " ".join(first["evidence"]), first
    finally:  # only what this test started: the launcher's own session
        os.killpg(proc.pid, 9)
        proc.wait(10)


def test_stacks_at_one_collective_give_way_to_a_flight_recorder_that_parts_ways() -> None:
    # the same job looked at with py-spy on the H200 (fail11/barrier0b-job-stacks.json):
    # rank 0 in barrier() at f11_case.py:104, rank 1 at synchronize() after its all_reduce
    # (line 115); the stacks rule read "every rank waits in `barrier`" (a sync point joins
    # the others' collective: NCCL is asynchronous), the flight recorder says otherwise
    from ddptui.diagnosis.finding import Finding
    from ddptui.job.side import overruled
    from ddptui.job.verdict import JobVerdict

    doc = json.loads((FR.parent / "barrier0b-job-stacks.json").read_text())
    found = tuple(Finding.from_dict(f) for f in doc["steps"][0]["findings"])
    assert found[0].id == "JOB-HUNG-COLLECTIVE"  # as the H200 run (before this rule) said
    verdict = JobVerdict("hung", found[0].summary, found[:1], (), (), 2, (), (), (0, 1))
    v, ordered = overruled(verdict, found)
    assert v.state == "hung" and ordered[0].id == "JOB-FR-DIVERGED"
    assert v.headline == (
        "hung: flight recorder: ranks part ways at collective #4 (pg 0) (rank 0: "
        'all_reduce_barrier [[1]] ["Float"]; rank 1: all_reduce [[1048576]] ["Float"])'
    )
    assert "JOB-HUNG-COLLECTIVE" not in [f.id for f in ordered]
    assert {f.id for f in ordered} >= {"JOB-RAS-PROBLEM", "NET-SOCKET-TRUNC"}
    # twin: without the flight recorder's word the stacks' verdict stands
    rest = tuple(f for f in found if f.id != "JOB-FR-DIVERGED")
    assert overruled(verdict, rest) == (verdict, rest)
