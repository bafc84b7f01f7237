"""`ddptui job` must not read another job's flight recorder dumps as this job's.

Seen on the lent H200 (tests/fixtures/gpu-h200/fail10/noabort-job-*.json): torch 2.11
dumps every rank's flight recorder to ~/.cache/torch/comm_lib_trace_rank_N unless
TORCH_FR_DUMP_TEMP_FILE says otherwise, so two jobs of one user on one node write the same
files, and `ddptui job` on the hung job reported the dumps of the FSDP job beside it
("ranks part ways at collective #1: _all_gather_base [[8320]] vs [[12480]]").

Real processes on this machine: a launcher named torchrun (a stand-in that starts one
worker with torchrun's environment, as in test_job_testbed.py) and the real job probe
through the local transport; the dump is a real torch 2.11 dump (tests/fixtures/gpu-h200/
job/fr/rank_0), written after the job started (an older one is stale anyway)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from standinjob import finding_ids, look, start_launcher

FR = Path(__file__).parent / "fixtures" / "gpu-h200" / "job" / "fr" / "rank_0"
LAUNCHER = """\
import os, subprocess, sys
tag = sys.argv[2]
env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", GROUP_RANK="0",
           MASTER_ADDR="127.0.0.1", MASTER_PORT="29999", TORCHELASTIC_RUN_ID=tag)
subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(1)"], env=env).wait()
"""


def _start(work: Path, tag: str) -> subprocess.Popen[bytes]:
    return start_launcher(work, LAUNCHER, ["--tag", tag], 1, {**os.environ, "HOME": str(work / "home")})


def _look(work: Path) -> dict[str, Any]:
    return look(work, "tag alpha", 29999, "0.5")[0]


_ids = finding_ids


def test_dumps_another_running_job_writes_too_are_not_read_as_this_jobs(tmp_path: Path) -> None:
    procs = []
    try:
        procs.append(_start(tmp_path, "alpha"))
        time.sleep(1.1)  # the dump newer than the job's start (clock ticks)
        dump = tmp_path / "home" / ".cache" / "torch" / "comm_lib_trace_rank_0"
        dump.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(FR, dump)
        alone = _ids(_look(tmp_path))
        # the job alone: its dump is read (its collective #4 timed out, torch said)
        assert any(i.startswith("JOB-FR-") for i in alone), alone
        assert "JOB-FR-SHARED" not in alone, alone

        procs.append(_start(tmp_path, "beta"))  # another job, the same default dump path
        report = _look(tmp_path)
        both = _ids(report)
        assert "JOB-FR-SHARED" in both, both
        assert [i for i in both if i.startswith("JOB-FR-") and i != "JOB-FR-SHARED"] == [], both
        f = next(f for f in report["steps"][0]["findings"] if f["id"] == "JOB-FR-SHARED")
        assert "comm_lib_trace_rank_0" in f["cause"] and "TORCH_FR_DUMP_TEMP_FILE" in f["fix"]
    finally:
        for p in procs:  # only what this test started: each launcher's own session
            os.killpg(p.pid, 9)
            p.wait(10)
