"""The srun transport's pieces that need no Slurm: the step's argv (every flag a probe
step needs, no shell), the one payload for many nodes, and the bootstrap picking its
own node's params and announcing itself (run for real, as srun's task would)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ddptui.transport.base import STAGE0
from ddptui.transport.srun import (
    STEP_SHAPING_ENV,
    SrunOptions,
    frame_group_payload,
    srun_argv,
    step_env,
)


def test_step_argv_claims_nothing_and_labels_output() -> None:
    argv = srun_argv(SrunOptions(job="77"), ["gpu001", "gpu002", "gpu003"], "/x/python3", "env")
    assert argv[:3] == ["srun", "--jobid", "77"]
    for flag in ("--overlap", "--label", "--kill-on-bad-exit=0", "--mem=0", "--input=all",
                 "--cpu-bind=none", "--ntasks-per-node=1", "--job-name=ddptui-env",
                 "--export=ALL"):  # fmt: skip
        assert flag in argv
    assert argv[argv.index("--nodelist") + 1] == "gpu[001-003]"
    assert argv[argv.index("--nodes") + 1] == argv[argv.index("--ntasks") + 1] == "3"
    assert not any(a.startswith("--gres") for a in argv)  # GPUs stay visible for NVML
    assert argv[-4:] == ["/x/python3", "-u", "-c", STAGE0]


def test_step_env_drops_the_allocations_step_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_NTASKS", "64")
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "8")
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    env = step_env(SrunOptions(job="77"))
    assert "SLURM_NTASKS" not in env and "SLURM_CPUS_PER_TASK" not in env
    assert env["SLURM_JOB_ID"] == "77" and "SLURM_JOB_ID" not in STEP_SHAPING_ENV


def _run_task(payload: bytes, node: str) -> list[str]:
    """The task as srun starts it: the payload on stdin, which stays open (the lifeline)
    until the probe said it exited."""
    proc = subprocess.Popen(
        [sys.executable, "-u", "-c", STAGE0],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "SLURMD_NODENAME": node, "SLURM_STEP_ID": "5"},
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(payload)
    proc.stdin.flush()
    lines = []
    for raw in proc.stdout:
        lines.append(raw.decode().rstrip("\n"))
        if lines[-1].startswith("ddptui-exit"):
            break
    proc.stdin.close()
    proc.wait(timeout=30)
    proc.stdout.close()
    return lines


def test_one_payload_every_node_takes_its_own_params() -> None:
    big = "w" * 5000  # shared by all: sent once, in `common`
    params = {
        "gpu001": {"worker": big, "node_rank": 0},
        "gpu002": {"worker": big, "node_rank": 1},
    }
    payload = frame_group_payload("echo", params)
    assert payload.count(big.encode()) == 1
    for node, rank in (("gpu001", 0), ("gpu002", 1)):
        lines = _run_task(payload, node)
        assert lines[0].startswith(f"ddptui-node {node} 5 ")
        hello = json.loads(lines[1])
        assert hello["kind"] == "hello" and hello["params"]["node_rank"] == rank
        assert hello["params"]["worker"] == big
        assert lines[-1] == "ddptui-exit 0"
