"""Real launcher output from one lent H200 (tests/fixtures/gpu-h200/launch/, run7.sh):
accelerate and Lightning as they print, one file per "node" (two launchers on the one GPU,
each its own NCCL_HOSTID, so NCCL joins them over NET/Socket), the exit code last.

Each case's files are diagnosed together, as a user would paste them: the first cause,
the rank it names (read from the launchers' own prefixes and torch elastic's failure
summary), and the healthy two-node Lightning run stays silent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from capturecases import Case, assert_case, diagnose_in
from click.testing import CliRunner

from ddptui.cli import main

LAUNCH = Path(__file__).parent / "fixtures" / "gpu-h200" / "launch"

# case -> (files, first cause, the rank it names (None: not one rank), findings also there)
CASES: dict[str, Case] = {
    # accelerate launch --multi_gpu --num_processes 2 on one GPU: both ranks on cuda:0
    "acc-1gpu": (("acc-1gpu.log",), "ENV-DUPGPU", 1, ("C10D-NCCLERR",)),
    # two accelerate "machines"; machine 1's rank allocates 32 TiB at step 3
    "acc-oom": (("acc-oom-m0.log", "acc-oom-m1.log"), "RANK-CUDA-OOM", 1, ("BOOT-PEERCLOSED",)),
    # Trainer(accelerator="gpu", devices=2) on a machine with one GPU (no Slurm)
    "lt-devices2": (("lt-devices2.log",), "TORCHRUN-NPROC-GPUS", None, ()),
    # two torchrun agents, node 1 NCCL_SOCKET_IFNAME=nosuch0: its rank is 1 by torchrun's
    # failure summary ("rank : 1 (local_rank: 0)"), node 0 hangs in NCCL init
    "lt-ifname": (("lt-ifname-n0.log", "lt-ifname-n1.log"), "BOOT-NOIF", 1, ()),
    # a parameter unused in forward, DDP without find_unused_parameters: Lightning's words
    "lt-unused": (("lt-unused-n0.log", "lt-unused-n1.log"), "DDP-UNUSED-PARAMS", None, ()),
}


def diagnose(*files: str) -> tuple[int, dict[str, Any]]:
    return diagnose_in(LAUNCH, *files)


def test_every_capture_is_a_case() -> None:
    logs = {p.name for p in LAUNCH.glob("*.log")}
    named = {f for files, *_ in CASES.values() for f in files} | {"lt-ok-n0.log", "lt-ok-n1.log"}
    assert logs == named


def test_captures_end_with_the_exit_code() -> None:
    codes = {p.name: p.read_text().splitlines()[-1] for p in LAUNCH.glob("*.log")}
    assert codes["lt-ok-n0.log"] == codes["lt-ok-n1.log"] == "exit code 0"
    assert codes["lt-ifname-n0.log"] == "exit code 124"  # node 0 hung until `timeout`
    assert all(c in ("exit code 0", "exit code 1", "exit code 124") for c in codes.values())


@pytest.mark.parametrize("case", sorted(CASES))
def test_launcher_failure_gets_its_cause(case: str) -> None:
    assert_case(LAUNCH, CASES[case])


def test_unused_parameters_name_both_ranks() -> None:
    _, doc = diagnose("lt-unused-n0.log", "lt-unused-n1.log")
    assert "ranks 0, 1" in doc["first_failure"]["summary"]


def test_lightning_device_check_says_what_it_saw() -> None:
    _, doc = diagnose("lt-devices2.log")
    lead = doc["steps"][0]["findings"][0]
    assert lead["id"] == "TORCHRUN-NPROC-GPUS"
    assert "[0, 1]" in lead["summary"] and "only [0]" in lead["summary"]
    assert "local rank 1 has no GPU" in lead["cause"]


def test_lightning_device_check_under_slurm_is_the_slurm_cause(tmp_path: Path) -> None:
    # the same two lines with Slurm's own line in the log: a task bound to one GPU
    text = (LAUNCH / "lt-devices2.log").read_text()
    log = tmp_path / "slurm.log"
    log.write_text("srun: error: gpu01: task 0: Exited with exit code 1\n" + text)
    result = CliRunner().invoke(main, ["diagnose", str(log), "--json", "-"])
    doc = json.loads(result.stdout)
    ids = {f["id"] for f in doc["steps"][0]["findings"]}
    assert doc["first_failure"]["finding"] == "LAUNCH-LIGHTNING-SLURM", doc["first_failure"]
    assert "TORCHRUN-NPROC-GPUS" not in ids


def test_healthy_two_node_lightning_run_is_silent() -> None:
    code, doc = diagnose("lt-ok-n0.log", "lt-ok-n1.log")
    assert code == 0
    assert doc["first_failure"] is None
    sev = {f["id"]: f["severity"] for f in doc["steps"][0]["findings"]}
    assert not [i for i, s in sev.items() if s in ("error", "warning")], sev


def test_check_on_two_ranks_passed_every_step_on_nccl() -> None:
    doc = json.loads((LAUNCH / "check-2hosts.json").read_text())
    steps = {s["id"]: s["status"] for s in doc["steps"]}
    assert set(steps) >= {"ssh", "inventory", "port", "env", "allreduce", "fabric", "ddp"}
    assert set(steps.values()) == {"pass"}, steps
    assert doc["verdict"] == "pass" and doc["first_failure"] is None
    # no warning either: the audit no longer reads NCCL_HOSTID as a difference (run3.sh's
    # capture had ENV-NCCL-DIFF); every finding of the run is info
    sev = {f["severity"] for s in doc["steps"] for f in s["findings"]}
    assert sev <= {"info"}, sev
    assert "1 rank(s) nccl" in (LAUNCH / "check-2hosts.md").read_text()


def test_agent_lines_name_the_global_rank_from_the_summary() -> None:
    # node 1's agent: "failed (exitcode: 1) local_rank: 0 (pid: 831)" and, in its failure
    # summary, "rank      : 1 (local_rank: 0)": the worker that exited is global rank 1
    _, doc = diagnose("lt-ifname-n0.log", "lt-ifname-n1.log")
    ranks = {f["id"]: f.get("rank") for f in doc["steps"][0]["findings"]}
    assert ranks["C10D-CHILD-EXIT"] == 1, ranks
    assert ranks["IB-NODEV"] == 0, ranks  # node 0's NCCL pid, from its Init START line


def test_one_machines_view_of_a_peer_that_died() -> None:
    # machine 0's log alone: ncclRemoteError, "Connection closed by remote peer", then the
    # watchdog's abort (SIGABRT in the agent's summary): the peer's exit leads, not the abort
    code, doc = diagnose("acc-oom-m0.log")
    assert code == 1
    assert doc["first_failure"]["finding"] == "BOOT-PEERCLOSED", doc["first_failure"]
    assert doc["first_failure"]["rank"] == 0
    ids = {f["id"] for f in doc["steps"][0]["findings"]}
    assert "C10D-CHILD-SIGNAL" in ids  # still listed
