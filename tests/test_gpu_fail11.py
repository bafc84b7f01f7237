"""Real failures from one lent H200 (tests/fixtures/gpu-h200/fail11/, run11.sh): DDP with a
parameter the forward never uses, one block run twice under reentrant checkpointing, rank 0
alone in a barrier, rank 0 alone creating a process group, a DataLoader and NCCL in a 1 MB
/dev/shm, a collective after destroy_process_group, init_process_group twice, a script run
without torchrun, and healthy runs with torch's INFO chatter; bfloat16 against float32 in
one all_reduce completed silently on both ranks (nothing to read, no case). One file per
"node" (two torchrun agents on the one GPU, each its own NCCL_HOSTID; barrier0 one agent of
two ranks), the exit code last.

Each case's files are diagnosed together, as a user would paste them: the first cause and
the rank it names; the healthy runs stay free of findings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from capturecases import Case, assert_case, assert_healthy, diagnose_in, ids, variant_in

FAIL11 = Path(__file__).parent / "fixtures" / "gpu-h200" / "fail11"

CASES: dict[str, Case] = {
    # DDP(find_unused_parameters=False) and a Linear the forward never uses: both ranks
    # raise the reducer's "Expected to have finished reduction in the prior iteration"
    "unused": (("unused-n0.log", "unused-n1.log"), "DDP-UNUSED-PARAMS", None, ()),
    # one block run twice under checkpoint(use_reentrant=True), find_unused_parameters=True
    "twice": (("twice-n0.log", "twice-n1.log"), "DDP-MARKED-TWICE", None, ()),
    # rank 0 alone calls new_group([0, 1]) and its all_reduce: rank 0 builds a communicator
    # rank 1 never starts, rank 1 times out in the default group's ALLREDUCE
    "newgroup": (
        ("newgroup-n0.log", "newgroup-n1.log"),
        "NCCL-COMM-NOT-JOINED",
        None,
        ("WATCHDOG", "LOGS-NOT-IN-COLLECTIVE"),
    ),
    # rank 1's DataLoader workers in a 1 MB /dev/shm: "unable to allocate shared memory(shm)"
    # (EAGAIN) re-raised as "Caught RuntimeError in DataLoader worker process 0."
    "shmbus": (("shmbus-n0.log", "shmbus-n1.log"), "SHM-SIZE", None, ()),
    # NCCL itself in a 1 MB /dev/shm: "failed to extend /dev/shm/nccl-* to 34210180 bytes"
    "nccl-smallshm": (("nccl-smallshm-n0.log", "nccl-smallshm-n1.log"), "SHM-SIZE", None, ()),
    # rank 1 destroys its process group at step 3, then all_reduces: its own ValueError
    # ("Default process group has not been initialized"), not uneven batches
    "nopg": (
        ("nopg-n0.log", "nopg-n1.log"),
        "C10D-NOT-INITIALIZED",
        1,
        ("BOOT-PEERCLOSED",),
    ),
    # rank 1 calls init_process_group a second time at step 3
    "twiceinit": (("twiceinit-n0.log", "twiceinit-n1.log"), "C10D-INIT-TWICE", 1, ()),
    # rank 0 alone calls barrier() at step 3 while rank 1 all_reduces 1M floats: NCCL's
    # socket transport says "message truncated : receiving 524288 bytes instead of 65536"
    "barrier0": (("barrier0.log",), "NET-SOCKET-TRUNC", 0, ("WATCHDOG",)),
    # python3 f11_case.py without torchrun: env:// finds no RANK
    "noenv": (("noenv.log",), "ENV-MISSING", None, ()),
    # run11b.sh: DDP(static_graph=True) and the forward uses another Linear from step 2 on
    "static": (("static-n0.log", "static-n1.log"), "DDP-STATIC-GRAPH-CHANGED", None, ()),
    # run11b.sh: both ranks dist.send() to each other first; NCCL 2.28.9 fails the lazily
    # built point-to-point connection: "ncclSocketInit: connecting to address  with family
    # 1 is neither AF_INET(2) nor AF_INET6(10)" (its knowledge names unpaired sends)
    "sendsend": (("sendsend-n0.log", "sendsend-n1.log"), "BOOT-NOIF-2.27", None, ()),
    # run11b.sh: the master port held by another server (python -m http.server): the
    # rendezvous store's EADDRINUSE on node 0; node 1's agent talks to that server and
    # hangs until `timeout` (its file holds only the exit code)
    "portbusy": (("portbusy-n0.log", "portbusy-n1.log"), "PORT-INUSE", None, ()),
    # run11b.sh: RANK=0 WORLD_SIZE=2 by hand, rank 1 never started: the store's server
    # "Timed out after 31 seconds waiting for clients. 1/2 clients joined."
    "alone": (("alone.log",), "LOGS-MISSING-RANKS", None, ("C10D-CLIENTS-JOINED",)),
    # run11c.sh: newgroup with init_process_group(device_id=...): eager NCCL init, the new
    # group built by ncclCommSplit, which blocks before printing its Init START: nothing
    # shows the communicator, only that rank 0 never reached rank 1's ALLREDUCE
    "newgroup-eager": (
        ("newgroup-eager-n0.log", "newgroup-eager-n1.log"),
        "LOGS-NOT-IN-COLLECTIVE",
        0,
        ("WATCHDOG",),
    ),
    # run11c.sh: newgroup without NCCL_DEBUG: the watchdog's lines only
    "newgroup-quiet": (
        ("newgroup-quiet-n0.log", "newgroup-quiet-n1.log"),
        "LOGS-NOT-IN-COLLECTIVE",
        0,
        ("WATCHDOG",),
    ),
    # run11c.sh: newgroup with TORCH_DISTRIBUTED_DEBUG=DETAIL: rank 1's wrapper waits in
    # gloo's monitored barrier ("received errors while waiting for send/recv from rank 0");
    # rank 0, whose lines stop before it, is the one elsewhere
    "newgroup-detail": (
        ("newgroup-detail-n0.log", "newgroup-detail-n1.log"),
        "LOGS-NOT-IN-COLLECTIVE",
        0,
        ("C10D-MONITORED-PEER", "GLOO-OP-TIMEOUT"),
    ),
    # run11d.sh: NCCL_PROTO=LL on node 0, Simple on node 1: "message truncated : receiving
    # 524288 bytes instead of 65536" on rank 0, rank 1's watchdog; NCCL's "set by environment"
    # lines across the files say why
    "proto-diff": (
        ("proto-diff-n0.log", "proto-diff-n1.log"),
        "LOGS-NCCL-ENV-DIFFERS",
        None,
        ("NET-SOCKET-TRUNC", "WATCHDOG"),
    ),
    # run11d.sh: NCCL_BUFFSIZE 1 MiB on node 0, 8 MiB on node 1: the same truncation
    "buffsize-diff": (
        ("buffsize-diff-n0.log", "buffsize-diff-n1.log"),
        "LOGS-NCCL-ENV-DIFFERS",
        None,
        ("NET-SOCKET-TRUNC",),
    ),
    # run11d.sh: rank 1 leaves its loop at step 3 with exit 0 (no destroy_process_group):
    # torch's "destroy_process_group() was not called before program exit" on rank 1, rank 0
    # in ALLREDUCE #4 loses its peer; rank 1's agent waits at the exit barrier
    "exit0": (("exit0-n0.log", "exit0-n1.log"), "DDP-UNEVEN-BATCH", 1, ("BOOT-PEERCLOSED",)),
    # run11d.sh: rank 1 raises ValueError at step 3 (the same warning at its exit): its own
    # exception (logs39: LOGS-APP-EXCEPTION, an honest unknown before), naming rank 1, not
    # a rank that finished early
    "valerr": (("valerr-n0.log", "valerr-n1.log"), "LOGS-APP-EXCEPTION", 1, ("BOOT-PEERCLOSED",)),
    # run11b.sh: barrier0 again (the file `ddptui job` read, with and without py-spy)
    "barrier0b": (("barrier0b.log",), "NET-SOCKET-TRUNC", 0, ("WATCHDOG",)),
}
HEALTHY = {
    # TORCH_DISTRIBUTED_DEBUG=DETAIL TORCH_CPP_LOG_LEVEL=INFO NCCL_DEBUG=INFO: c10d's INFO
    # lines (watchdog and heartbeat settings, DDP's logging data), six healthy DDP steps
    "healthy-detail": ("healthy-detail-n0.log", "healthy-detail-n1.log"),
    # rank 1 all_reduces bfloat16, rank 0 float32 (same element count): both completed and
    # exited 0; no line says anything (NCCL checks no types across ranks)
    "dtype": ("dtype-n0.log", "dtype-n1.log"),
    # run11c.sh: every rank creates new_group([0, 1]) and all_reduces in it (lazy, and eager
    # by ncclCommSplit): the twins of the newgroup cases
    "subgroup": ("subgroup-n0.log", "subgroup-n1.log"),
    "subgroup-eager": ("subgroup-eager-n0.log", "subgroup-eager-n1.log"),
}


def diagnose(*files: str) -> tuple[int, dict[str, Any]]:
    return diagnose_in(FAIL11, *files)



def test_every_capture_is_a_case() -> None:
    logs = {p.name for p in FAIL11.glob("*.log")} - {"run.log", "run-b.log", "run-c.log", "run-d.log"}
    named = {f for files, *_ in CASES.values() for f in files}
    named |= {f for files in HEALTHY.values() for f in files}
    assert logs == named


@pytest.mark.parametrize("case", sorted(CASES))
def test_failure_gets_its_cause(case: str) -> None:
    assert_case(FAIL11, CASES[case])


@pytest.mark.parametrize("case", sorted(HEALTHY))
def test_healthy_runs_have_no_finding_worth_a_warning(case: str) -> None:
    assert_healthy(FAIL11, *HEALTHY[case])



def test_the_communicator_and_the_waiting_rank_are_named() -> None:
    _, doc = diagnose("newgroup-n0.log", "newgroup-n1.log")
    first = doc["first_failure"]
    assert "rank 0 was building an NCCL communicator (commId 0xe4199fdf77d97df1, 2 ranks)" in first["summary"]
    assert "rank 1 never started" in first["summary"] and "ALLREDUCE (SeqNum 4)" in first["summary"]


def test_a_communicator_both_ranks_started_is_no_group_on_some_ranks(tmp_path: Path) -> None:
    # twin: rank 1's log also starts that communicator (both ranks created the group and
    # hang in it for another reason): not this rule's
    files = ("newgroup-n0.log", "newgroup-n1.log")
    start = next(t for t in (FAIL11 / files[0]).read_text().splitlines() if "0xe4199fdf77d97df1" in t)

    def keep(t: str) -> str | None:
        if "Watchdog caught collective operation timeout" in t and "[rank1]" in t:
            return start.replace("rank 0 nranks", "rank 1 nranks") + "\n" + t
        return t

    _, doc = variant_in(FAIL11, tmp_path, files, keep)
    assert "NCCL-COMM-NOT-JOINED" not in ids(doc)


def test_one_ranks_log_alone_names_no_group(tmp_path: Path) -> None:
    # rank 0's file alone: the other rank's lines are not there to say it never started it
    _, doc = diagnose("newgroup-n0.log")
    assert "NCCL-COMM-NOT-JOINED" not in ids(doc)


def test_a_rank_that_raised_after_destroying_its_group_did_not_finish_early() -> None:
    _, doc = diagnose("nopg-n0.log", "nopg-n1.log")
    assert "DDP-UNEVEN-BATCH" not in ids(doc), ids(doc)
    assert doc["first_failure"]["finding"] == "C10D-NOT-INITIALIZED"
    # its knowledge says both ways to have no process group
    from ddptui.diagnosis.kb import load_kb

    assert "after destroy_process_group" in load_kb()["C10D-NOT-INITIALIZED"].title


def test_a_rank_whose_lines_stop_before_the_wait_is_the_one_named() -> None:
    # gloo's wait on rank 1 (DETAIL's monitored barrier); rank 0's file holds its NCCL init
    # lines and nothing after: rank 0 is named, not "no other rank's line is in the log"
    _, doc = diagnose("newgroup-detail-n0.log", "newgroup-detail-n1.log")
    first = doc["first_failure"]
    assert "rank 1 waits in a gloo send/recv" in first["summary"], first
    assert "rank 0 never reported it (its lines stop before it)" in first["summary"], first
    # twin: rank 1's file alone still says that no other rank's line is there
    _, doc = diagnose("newgroup-detail-n1.log")
    assert "no other rank's line is in the log" in doc["first_failure"]["summary"]
    assert doc["first_failure"]["rank"] == 1


def test_the_first_unrecognized_line_is_quoted_for_the_rank_that_raised() -> None:
    _, doc = diagnose("valerr-n0.log", "valerr-n1.log")
    assert "DDP-UNEVEN-BATCH" not in ids(doc)
    first = doc["steps"][0]["findings"][0]
    assert any("ValueError: batch 3 has 0 samples" in e for e in first["evidence"]), first


def test_unpaired_sends_are_named_in_the_garbage_address_knowledge() -> None:
    _, doc = diagnose("sendsend-n0.log", "sendsend-n1.log")
    first = doc["steps"][0]["findings"][0]
    assert "both send() to each other" in first["cause"] and "batch_isend_irecv" in first["fix"]


def test_one_missing_rank_is_said_as_one() -> None:
    _, doc = diagnose("alone.log")
    first = doc["steps"][0]["findings"][0]
    assert "but rank(s) 1 never print" in first["cause"], first["cause"]


def test_the_dataloader_wrapper_line_is_not_the_failure_to_read() -> None:
    # "RuntimeError: Caught RuntimeError in DataLoader worker process 0." re-raises the
    # worker's own error, printed after it: that line is the one shown, the wrapper is not
    _, doc = diagnose("shmbus-n1.log")
    first = doc["first_failure"]
    assert first["finding"] == "SHM-SIZE"
    quoted = " ".join(f for fs in doc["steps"][0]["findings"] for f in fs["evidence"])
    assert "Caught RuntimeError in DataLoader worker process 0" not in quoted
    assert "unable to allocate shared memory(shm)" in quoted
