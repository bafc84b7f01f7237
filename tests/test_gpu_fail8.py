"""Real failures from one lent H200 (tests/fixtures/gpu-h200/fail8/, run8.sh): the
transformers Trainer past ddp_timeout, torchrun --max-restarts, a lone rendezvous, a
segfault, a device-side assert, mixed backends and a healthy Trainer run.  One file per
"node" (two torchrun agents on the one GPU, each its own NCCL_HOSTID), the exit code last.

Each case's files are diagnosed together, as a user would paste them: the first cause and
the rank it names (read from the launchers' prefixes and torch elastic's failure summary);
the healthy two-node Trainer run stays silent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from capturecases import Case, assert_case, diagnose_in

FAIL8 = Path(__file__).parent / "fixtures" / "gpu-h200" / "fail8"

# case -> (files, first cause, the rank it names (None: not checked), findings also there)
CASES: dict[str, Case] = {
    # HF Trainer, ddp_timeout=30; rank 1 sleeps 90 s in a callback at step 3: rank 0's
    # watchdog times out in the Trainer's loss all_gather, rank 1 never enqueued it
    "hf-stall": (("hf-stall-n0.log", "hf-stall-n1.log"), "LOGS-NOT-IN-COLLECTIVE", 1, ("WATCHDOG",)),
    # torchrun --max-restarts 1, one agent, two ranks; rank 1 raises at step 3, twice
    "restart": (("restart.log",), "LOGS-APP-EXCEPTION", 1, ("BOOT-PEERCLOSED",)),
    # the same with two agents (c10d rendezvous): the survivor's agent finds it closed
    "restart2": (("restart2-n0.log", "restart2-n1.log"), "LOGS-APP-EXCEPTION", 1, ("C10D-RDZV-CLOSED",)),
    # --nnodes 2 with c10d rendezvous and one agent only, join_timeout=30
    "rdzv": (("rdzv.log",), "C10D-RDZV-TIMEOUT", None, ()),
    # rank 1 kills itself with SIGSEGV at step 3; rank 0 loses its peer
    "segv": (("segv-n0.log", "segv-n1.log"), "C10D-CHILD-SIGNAL", 1, ("BOOT-PEERCLOSED",)),
    # rank 1: an out-of-range index into a CUDA tensor (device-side assert)
    "assert": (("assert-n0.log", "assert-n1.log"), "RANK-CUDA-ERROR", 1, ("BOOT-PEERCLOSED",)),
    # rank 0 init_process_group("nccl"), rank 1 "gloo": rank 1's gloo waits for a store key
    # rank 0 never writes (no finding names mixed backends: the store wait is the cause shown)
    "mixed": (("mixed-n0.log", "mixed-n1.log"), "C10D-STORE-WAIT", None, ()),
}


def diagnose(*files: str) -> tuple[int, dict[str, Any]]:
    return diagnose_in(FAIL8, *files)


def test_every_capture_is_a_case() -> None:
    logs = {p.name for p in FAIL8.glob("*.log")}
    named = {f for files, *_ in CASES.values() for f in files} | {"hf-ok-n0.log", "hf-ok-n1.log"}
    assert logs == named


def test_captures_end_with_the_exit_code() -> None:
    codes = {p.name: p.read_text().splitlines()[-1] for p in FAIL8.glob("*.log")}
    assert codes["hf-ok-n0.log"] == codes["hf-ok-n1.log"] == "exit code 0"
    assert codes["hf-stall-n1.log"] == "exit code 124"  # the stalled node, ended by `timeout`
    assert all(c in ("exit code 0", "exit code 1", "exit code 124") for c in codes.values())


@pytest.mark.parametrize("case", sorted(CASES))
def test_failure_gets_its_cause(case: str) -> None:
    assert_case(FAIL8, CASES[case])


def test_healthy_two_node_trainer_run_is_silent() -> None:
    # NCCL_DEBUG=INFO; no destroy_process_group(): NCCL aborts the communicator at exit and
    # traces the sockets it closes ("misc/socket.cc:64 -> 3") between Abort START/COMPLETE
    code, doc = diagnose("hf-ok-n0.log", "hf-ok-n1.log")
    assert code == 0
    assert doc["first_failure"] is None
    sev = {f["id"]: f["severity"] for f in doc["steps"][0]["findings"]}
    assert not [i for i, s in sev.items() if s in ("error", "warning")], sev


def test_the_crashing_rank_leads_not_the_peer_that_lost_it() -> None:
    # rank 1's own RuntimeError comes before rank 0's "Connection closed by remote peer"
    _, doc = diagnose("restart.log")
    first = doc["first_failure"]
    assert "rank 1 raised RuntimeError in f8_case.py:26" in first["summary"], first
    lead = doc["steps"][0]["findings"][0]
    assert "RuntimeError: rank 1: bad batch at step 3" in lead["evidence"][0]
    _, doc = diagnose("restart2-n0.log", "restart2-n1.log")
    assert "rank 1 raised RuntimeError" in doc["first_failure"]["summary"]
    assert "restart2-n0.log:8" in doc["first_failure"]["summary"]


def test_signal_record_names_the_global_rank() -> None:
    # "traceback : Signal 11 (SIGSEGV) received by PID 899": the agent's own line tied pid
    # 899 to local rank 0, the summary's "rank : 1 (local_rank: 0)" makes it rank 1
    _, doc = diagnose("segv-n1.log")
    first = doc["first_failure"]
    assert first["finding"] == "C10D-CHILD-SIGNAL" and first["rank"] == 1, first


def test_one_nodes_view() -> None:
    # what a user of one node would paste: the survivor sees its peer go, the stalled
    # rank's watchdog peer times out
    for files, lead, rank in (
        (("segv-n0.log",), "BOOT-PEERCLOSED", 0),
        (("assert-n1.log",), "RANK-CUDA-ERROR", 1),
        (("hf-stall-n0.log",), "WATCHDOG", 0),
    ):
        code, doc = diagnose(*files)
        assert code == 1
        assert (doc["first_failure"]["finding"], doc["first_failure"]["rank"]) == (lead, rank), files


def test_the_stalled_ranks_own_view() -> None:
    # node 1's file alone: its rank slept in the callback with no work in flight ("Last
    # enqueued NCCL work: 16, last completed NCCL work: 16") when rank 0's watchdog
    # signalled its timeout; the connection rank 0 closed later is the consequence
    code, doc = diagnose("hf-stall-n1.log")
    assert code == 1
    first = doc["first_failure"]
    assert (first["finding"], first["rank"]) == ("LOGS-NOT-IN-COLLECTIVE", 1), first
    assert "rank 0 waits in a collective; rank 1 never reports it" in first["summary"]
    ids = [f["id"] for f in doc["steps"][0]["findings"]]
    assert "BOOT-PEERCLOSED" in ids[1:]


def test_check_on_two_ranks_passed_every_step_on_nccl() -> None:
    doc = json.loads((FAIL8 / "check-2hosts.json").read_text())
    steps = {s["id"]: s["status"] for s in doc["steps"]}
    assert set(steps) >= {"ssh", "inventory", "port", "env", "allreduce", "fabric", "ddp"}
    assert set(steps.values()) <= {"pass", "warn"}, steps
    assert doc["first_failure"] is None
    # run beside the 15 case processes on the same GPU: the allreduce crawled (0.62 GB/s),
    # so the DDP step warns that the gradient allreduce would cost a share of each step
    loud = {f["id"] for s in doc["steps"] for f in s["findings"] if f["severity"] != "info"}
    assert loud == {"DDP-SCALING-LOW"}, loud
