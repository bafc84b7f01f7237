"""Real failures from one lent H200 (tests/fixtures/gpu-h200/fail10/, run10.sh, run10b.sh):
TORCH_NCCL_BLOCKING_WAIT=1 with a stalled rank, the same stall with
TORCH_NCCL_ASYNC_ERROR_HANDLING=0 (the job stays hung), a CPU tensor on the NCCL group,
DDP over models that differ, FSDP2 over hidden sizes that differ, a rank SIGKILLed, forced
multi-node NVLink, and healthy accelerate (bf16) and torch.compile runs with their noise.
One file per "node" (two torchrun agents or accelerate machines on the one GPU, each its own
NCCL_HOSTID; the noabort case one agent of two ranks), the exit code last.

Each case's files are diagnosed together, as a user would paste them: the first cause and
the rank it names (from the launchers' prefixes); the healthy runs stay free of findings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from capturecases import Case, assert_case, assert_healthy, diagnose_in, ids, variant_in

FAIL10 = Path(__file__).parent / "fixtures" / "gpu-h200" / "fail10"

# case -> (files, first cause, the rank it names (None: not checked), findings also there)
CASES: dict[str, Case] = {
    # TORCH_NCCL_BLOCKING_WAIT=1, rank 1 sleeps 90 s at step 3, rank 0's work.wait() times
    # out ("timed out in blocking wait"); rank 1 wakes into its lost peer
    "blocking-wait": (
        ("blocking-wait-n0.log", "blocking-wait-n1.log"),
        "LOGS-NOT-IN-COLLECTIVE",
        1,
        ("WATCHDOG", "BOOT-PEERCLOSED"),
    ),
    # TORCH_NCCL_ASYNC_ERROR_HANDLING=0, rank 1 sleeps 300 s: the watchdog times out, takes
    # nothing down, and `timeout` ends the job (one agent, both ranks in one file)
    "noabort": (
        ("noabort.log",),
        "LOGS-NOT-IN-COLLECTIVE",
        1,
        ("WATCHDOG", "WATCHDOG-NO-TEARDOWN"),
    ),
    # rank 1 all_reduces a CPU tensor on the NCCL group at step 3; rank 0 loses its peer
    "cpu-tensor": (
        ("cpu-tensor-n0.log", "cpu-tensor-n1.log"),
        "C10D-NCCL-CPU-TENSOR",
        1,
        ("BOOT-PEERCLOSED",),
    ),
    # DDP(model): rank 1's model has one Linear more (both ranks raise the same check)
    "model-diff": (("model-diff-n0.log", "model-diff-n1.log"), "DDP-MODEL-DIFFERS", None, ()),
    # FSDP2 fully_shard, hidden 256 on rank 0 and 384 on rank 1: their all-gathers of
    # different sizes hang until both watchdogs time out (NumelIn 257 vs 385)
    "fsdp-diff": (
        ("fsdp-diff-n0.log", "fsdp-diff-n1.log"),
        "NET-SIZE-MISMATCH",
        None,
        ("WATCHDOG", "LOGS-NOT-IN-COLLECTIVE"),
    ),
    # rank 1 SIGKILLs itself at step 3 (as the OOM killer would): exitcode -9
    "sigkill": (
        ("sigkill-n0.log", "sigkill-n1.log"),
        "C10D-CHILD-SIGKILL",
        1,
        ("BOOT-PEERCLOSED",),
    ),
}
# blocking: TORCH_NCCL_BLOCKING_WAIT=1 with a plain all_reduce + cuda.synchronize: rank 0
# waited out rank 1's 90 s sleep with no timeout at all and both exited 0 (nothing to read);
# mnnvl: NCCL_MNNVL_ENABLE=1 NCCL_NVLS_ENABLE=1 without the hardware: NCCL says "MNNVL 0",
# "0 nvls channels" and goes on
HEALTHY = {
    "blocking": ("blocking-n0.log", "blocking-n1.log"),
    "mnnvl": ("mnnvl-n0.log", "mnnvl-n1.log"),
    "healthy-amp": ("healthy-amp-m0.log", "healthy-amp-m1.log"),
    "healthy-compile": ("healthy-compile-n0.log", "healthy-compile-n1.log"),
    "healthy-compile-logs": ("healthy-compile-logs-n0.log", "healthy-compile-logs-n1.log"),
}


def diagnose(*files: str) -> tuple[int, dict[str, Any]]:
    return diagnose_in(FAIL10, *files)



def test_every_capture_is_a_case() -> None:
    logs = {p.name for p in FAIL10.glob("*.log")}
    named = {f for files, *_ in CASES.values() for f in files}
    named |= {f for files in HEALTHY.values() for f in files}
    assert logs == named


def test_captures_end_with_the_exit_code() -> None:
    codes = {p.name: p.read_text().splitlines()[-1] for p in FAIL10.glob("*.log")}
    for files in HEALTHY.values():
        assert {codes[f] for f in files} == {"exit code 0"}, files
    # nothing took these down: the watchdog with error handling off, the FSDP all-gathers
    # (both ranks dumping their flight recorders) until `timeout` (124)
    assert codes["noabort.log"] == "exit code 124"
    assert codes["fsdp-diff-n0.log"] == codes["fsdp-diff-n1.log"] == "exit code 124"
    assert codes["sigkill-n1.log"] == codes["blocking-wait-n0.log"] == "exit code 1"


@pytest.mark.parametrize("case", sorted(CASES))
def test_failure_gets_its_cause(case: str) -> None:
    assert_case(FAIL10, CASES[case])


@pytest.mark.parametrize("case", sorted(HEALTHY))
def test_healthy_runs_have_no_finding_worth_a_warning(case: str) -> None:
    assert_healthy(FAIL10, *HEALTHY[case])



def test_the_sizes_the_watchdogs_state_are_named() -> None:
    _, doc = diagnose("fsdp-diff-n0.log", "fsdp-diff-n1.log")
    first = doc["first_failure"]
    assert "_ALLGATHER_BASE" in first["summary"], first
    assert "rank 0 257 elements (#3)" in first["summary"] and "rank 1 385 (#2)" in first["summary"]
    assert "rank 0 had completed #2" in first["summary"]


def test_equal_sizes_are_no_size_mismatch(tmp_path: Path) -> None:
    # the same two timeouts with one size: a collective one rank never reached, not sizes
    files = ("fsdp-diff-n0.log", "fsdp-diff-n1.log")
    code, doc = variant_in(
        FAIL10,
        tmp_path,
        files,
        lambda t: t.replace("NumelIn=385, NumelOut=770", "NumelIn=257, NumelOut=514"),
    )
    assert code == 1
    assert "NET-SIZE-MISMATCH" not in ids(doc)
    assert doc["first_failure"]["finding"] == "LOGS-NOT-IN-COLLECTIVE"


def test_sizes_of_unrelated_collectives_are_not_compared(tmp_path: Path) -> None:
    # rank 0 had not completed the work rank 1 waits in, and they wait at different
    # sequence numbers: two different collectives, whose sizes may differ
    files = ("fsdp-diff-n0.log", "fsdp-diff-n1.log")
    code, doc = variant_in(
        FAIL10,
        tmp_path, files, lambda t: t.replace("last completed work: 2", "last completed work: 1")
    )
    assert code == 1
    assert "NET-SIZE-MISMATCH" not in ids(doc)


def test_a_watchdog_that_kept_the_job_is_not_called_a_teardown() -> None:
    _, doc = diagnose("noabort.log")
    found = ids(doc)
    assert "WATCHDOG-TEARDOWN" not in found, found
    assert found["WATCHDOG-NO-TEARDOWN"] == "warning"
    f = next(f for f in doc["steps"][0]["findings"] if f["id"] == "WATCHDOG-NO-TEARDOWN")
    assert f["rank"] == 0 and "TORCH_NCCL_ASYNC_ERROR_HANDLING=0" in f["cause"]
    assert any("Received 15 death signal" in e for e in f["evidence"]), f["evidence"]
    # the runs whose watchdog did take the process down say so, and nothing else
    for files in (("blocking-wait-n0.log", "blocking-wait-n1.log"), ("sigkill-n0.log",)):
        found = ids(diagnose(*files)[1])
        assert "WATCHDOG-TEARDOWN" in found and "WATCHDOG-NO-TEARDOWN" not in found, files


def test_the_teardown_line_after_it_is_a_teardown(tmp_path: Path) -> None:
    # the same log with torch's teardown line after the failure line (error handling on)
    def keep(t: str) -> str | None:
        if "Some NCCL operations have failed" in t:
            return (
                t
                + "\n"
                + t.partition("] [Rank")[0]
                + "] [Rank 0] To avoid data inconsistency, we are taking the entire process down."
            )
        return t

    _, doc = variant_in(FAIL10, tmp_path, ("noabort.log",), keep)
    found = ids(doc)
    assert "WATCHDOG-TEARDOWN" in found and "WATCHDOG-NO-TEARDOWN" not in found, found


def test_only_info_level_lines_are_left_alone(tmp_path: Path) -> None:
    # dynamo's graph breaks with whole tracebacks at INFO (TORCH_LOGS=dynamo): silent; the
    # same lines at WARNING level are lines a user must see
    files = ("healthy-compile-logs-n0.log",)
    assert ids(diagnose(*files)[1]).get("LOGS-UNRECOGNIZED") is None
    _, doc = variant_in(FAIL10, tmp_path, files, lambda t: t.replace("[rank0]:I1126", "[rank0]:W1126"))
    assert ids(doc).get("LOGS-UNRECOGNIZED") == "warning", ids(doc)


def test_one_nodes_view() -> None:
    for files, lead, rank in (
        (("cpu-tensor-n1.log",), "C10D-NCCL-CPU-TENSOR", 1),
        (("cpu-tensor-n0.log",), "BOOT-PEERCLOSED", 0),  # rank 0 alone sees its peer go
        (("sigkill-n1.log",), "C10D-CHILD-SIGKILL", 1),
        (("model-diff-n1.log",), "DDP-MODEL-DIFFERS", 1),
        (("blocking-wait-n0.log",), "LOGS-NOT-IN-COLLECTIVE", 0),
    ):
        code, doc = diagnose(*files)
        assert code == 1
        first = doc["first_failure"]
        assert (first["finding"], first["rank"]) == (lead, rank), files


def test_job_on_the_hung_job_names_the_rank_elsewhere() -> None:
    # `ddptui job` 8 s after rank 0 began to wait, and again after its watchdog fired: the
    # job did not die, and both looks name rank 1 (asleep in <module>) as the one elsewhere
    for name in ("noabort-job-hung.json", "noabort-job-late.json"):
        doc = json.loads((FAIL10 / name).read_text())
        first = doc["first_failure"]
        assert (first["finding"], first["rank"]) == ("JOB-HUNG-DIVERGED", 1), name


def test_check_on_two_ranks_passed_every_step_on_nccl() -> None:
    doc = json.loads((FAIL10 / "check-2hosts.json").read_text())
    steps = {s["id"]: s["status"] for s in doc["steps"]}
    assert set(steps) >= {"ssh", "inventory", "port", "env", "allreduce", "fabric", "ddp"}
    assert set(steps.values()) == {"pass"}, steps
    assert doc["first_failure"] is None
