"""Real failures from one lent H200 (tests/fixtures/gpu-h200/fail9/, run9.sh, run9b.sh):
NCCL's CUDA allocation with the GPU full, NCCL_NET=IB with no InfiniBand, a missing net
plugin (healthy), a malformed NCCL_TOPO_FILE, a size mismatch across ranks (silent), a
stale NCCL_COMM_ID, the global rank used as the GPU index, uneven steps per rank, and a
verbose healthy run.  One file per "node" (two torchrun agents on the one GPU, each its
own NCCL_HOSTID), the exit code last.

Each case's files are diagnosed together, as a user would paste them: the first cause and
the rank it names (from the launchers' prefixes and torch elastic's failure summary); the
healthy runs stay free of errors.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from capturecases import Case, assert_case, diagnose_in

FAIL9 = Path(__file__).parent / "fixtures" / "gpu-h200" / "fail9"

# case -> (files, first cause, the rank it names (None: not checked), findings also there)
CASES: dict[str, Case] = {
    # rank 1 fills the GPU but ~64 MiB, then all_reduce: NCCL's init fits, the collective
    # fails with torch 2.11's torch.AcceleratorError "CUDA error: out of memory" (both ranks)
    "oom": (("oom-n0.log", "oom-n1.log"), "RANK-CUDA-OOM", None, ("C10D-CHILDFAILED",)),
    # the same with nothing left: NCCL's commAlloc cannot create its stream
    # (misc/strongstream.cc "Cuda failure 'out of memory'"), rank 0 waits in init
    "oom0": (("oom0-n0.log", "oom0-n1.log"), "RANK-CUDA-OOM", 1, ("BOOT-CUDA",)),
    # NCCL_NET=IB on both nodes, no InfiniBand: "Failed to initialize any NET plugin"
    "net-ib": (("net-ib-n0.log", "net-ib-n1.log"), "NET-NOPLUGIN", None, ("IB-NODEV",)),
    # node 1's NCCL_TOPO_FILE is malformed XML; node 0 loses its peer
    "topo": (("topo-n0.log", "topo-n1.log"), "NCCL-TOPO-XML", 1, ("BOOT-PEERCLOSED",)),
    # NCCL_COMM_ID=10.9.9.9:29999 (not local) on both: rank 0's bootstrap root cannot listen
    "commid": (("commid-n0.log", "commid-n1.log"), "BOOT-COMMID", 0, ("C10D-UIDGET",)),
    # rank 1 torch.cuda.set_device(RANK) on a one-GPU node, before init_process_group
    "ordinal": (("ordinal-n0.log", "ordinal-n1.log"), "ENV-ORDINAL", 1, ()),
    # rank 1 runs 5 steps and destroys its group, rank 0 waits in its 6th all_reduce
    "uneven": (("uneven-n0.log", "uneven-n1.log"), "DDP-UNEVEN-BATCH", 1, ("BOOT-PEERCLOSED",)),
}
HEALTHY = ("plugin", "verbose", "shape")


def diagnose(*files: str) -> tuple[int, dict[str, Any]]:
    return diagnose_in(FAIL9, *files)


def loud(doc: dict[str, Any]) -> dict[str, str]:
    return {f["id"]: f["severity"] for f in doc["steps"][0]["findings"] if f["severity"] != "info"}


def test_every_capture_is_a_case() -> None:
    logs = {p.name for p in FAIL9.glob("*.log")}
    named = {f for files, *_ in CASES.values() for f in files}
    named |= {f"{c}-n{n}.log" for c in HEALTHY for n in (0, 1)}
    assert logs == named


def test_captures_end_with_the_exit_code() -> None:
    codes = {p.name: p.read_text().splitlines()[-1] for p in FAIL9.glob("*.log")}
    for c in HEALTHY:
        assert codes[f"{c}-n0.log"] == codes[f"{c}-n1.log"] == "exit code 0", c
    # the survivors nothing ended: rank 0 waits in NCCL's init (oom0) or its first
    # collective's unique id (ordinal) with no timeout, until `timeout` (124)
    assert codes["oom0-n0.log"] == codes["ordinal-n0.log"] == "exit code 124"
    assert codes["uneven-n1.log"] == "exit code 0"  # the rank that left early


@pytest.mark.parametrize("case", sorted(CASES))
def test_failure_gets_its_cause(case: str) -> None:
    assert_case(FAIL9, CASES[case])


@pytest.mark.parametrize("case", HEALTHY)
def test_healthy_runs_have_no_error(case: str) -> None:
    code, doc = diagnose(f"{case}-n0.log", f"{case}-n1.log")
    assert code == 0
    assert doc["first_failure"] is None
    found = loud(doc)
    assert "error" not in found.values(), found
    if case == "plugin":
        # NCCL_NET_PLUGIN=aws-ofi, not installed: NCCL goes on over sockets; the one
        # warning says so (the run is healthy, its network is not the one asked for)
        assert found == {"NET-PLUGIN-MISSING": "warning"}, found
        f = next(f for f in doc["steps"][0]["findings"] if f["id"] == "NET-PLUGIN-MISSING")
        assert "aws-ofi" in f["cause"] and "libnccl-net-aws-ofi.so" in f["cause"]
    else:
        # verbose: NCCL_DEBUG_SUBSYS=ALL, TORCH_DISTRIBUTED_DEBUG=DETAIL,
        # TORCH_CPP_LOG_LEVEL=INFO; shape: rank 1 all_reduced 2x the elements at step 3 and
        # nothing said so (sockets carried the bytes, both ranks exited 0): no line to read
        assert found == {}, found


def test_the_rank_that_left_early_is_named_with_both_facts() -> None:
    _, doc = diagnose("uneven-n0.log", "uneven-n1.log")
    first = doc["first_failure"]
    assert "rank 1 finished" in first["summary"] and "rank 0 still waited" in first["summary"]
    lead = doc["steps"][0]["findings"][0]
    ev = " ".join(lead["evidence"])
    assert "rank 1 nranks 2" in ev and "Destroy COMPLETE" in ev
    assert "last enqueued work: 6, last completed work: 5" in ev


def _variant(tmp_path: Path, keep: Callable[[str], str | None]) -> tuple[int, dict[str, Any]]:
    """The uneven case's two files, each line through `keep` (None drops it)."""
    for n in (0, 1):
        lines = (FAIL9 / f"uneven-n{n}.log").read_text().splitlines()
        out = [k for k in map(keep, lines) if k is not None]
        (tmp_path / f"uneven-n{n}.log").write_text("\n".join(out) + "\n")
    return diagnose_in(tmp_path, "uneven-n0.log", "uneven-n1.log")


def test_without_nccl_debug_the_exit_barrier_names_the_node_that_finished(tmp_path: Path) -> None:
    # the same capture as a run without NCCL_DEBUG prints it: no "Destroy COMPLETE", no
    # NCCL rank for node 1; its agent's exit barrier says its workers all exited 0
    code, doc = _variant(tmp_path, lambda t: None if "NCCL INFO" in t else t)
    assert code == 1
    first = doc["first_failure"]
    assert first["finding"] == "DDP-UNEVEN-BATCH", first
    assert "uneven-n1.log finished (their agent waited at the exit barrier)" in first["summary"]


def test_a_subgroups_destroy_alone_is_not_a_rank_leaving(tmp_path: Path) -> None:
    # a communicator of 1 rank destroyed (a subgroup, not the world of 2) and no exit
    # barrier: nothing says rank 1 finished, rank 0's lost peer leads
    def keep(t: str) -> str | None:
        if "exit barrier" in t:
            return None
        return t.replace(
            "rank 1 nranks 2 cudaDev 0 busId 60 - Destroy",
            "rank 0 nranks 1 cudaDev 0 busId 60 - Destroy",
        )

    code, doc = _variant(tmp_path, keep)
    assert code == 1
    assert doc["first_failure"]["finding"] == "BOOT-PEERCLOSED", doc["first_failure"]
    assert "DDP-UNEVEN-BATCH" not in {f["id"] for f in doc["steps"][0]["findings"]}


def test_a_rank_with_nothing_in_flight_is_not_waiting(tmp_path: Path) -> None:
    # rank 0 as if it had completed all it enqueued ("last enqueued work: 6, last completed
    # work: 6"): an idle rank, not one left in a collective
    code, doc = _variant(
        tmp_path,
        lambda t: t.replace("completed work: 5", "completed work: 6").replace(
            "completed NCCL work: 5", "completed NCCL work: 6"
        ),
    )
    assert code == 1
    assert "DDP-UNEVEN-BATCH" not in {f["id"] for f in doc["steps"][0]["findings"]}


def test_unprefixed_traceback_takes_the_rank_of_the_one_failed_worker() -> None:
    # set_device failed before init_process_group: no "[rank1]:" prefix; torch elastic's
    # summary "rank : 1 (local_rank: 0)" is the only worker its agent reports
    code, doc = diagnose("ordinal-n1.log")
    assert code == 1
    assert (doc["first_failure"]["finding"], doc["first_failure"]["rank"]) == ("ENV-ORDINAL", 1)
    # the agent's own ChildFailedError is about the agent: it gets no worker's rank
    ranks = {f["id"]: f.get("rank") for f in doc["steps"][0]["findings"]}
    assert ranks["C10D-CHILD-EXIT"] == 1 and ranks["C10D-CHILDFAILED"] is None, ranks


def test_one_nodes_view() -> None:
    for files, lead, rank in (
        (("oom0-n1.log",), "RANK-CUDA-OOM", 1),
        (("oom-n0.log",), "RANK-CUDA-OOM", 0),
        (("topo-n1.log",), "NCCL-TOPO-XML", 1),
        (("uneven-n0.log",), "BOOT-PEERCLOSED", 0),  # rank 0 alone sees only its peer go
        (("commid-n0.log",), "BOOT-COMMID", 0),
    ):
        code, doc = diagnose(*files)
        assert code == 1
        assert (doc["first_failure"]["finding"], doc["first_failure"]["rank"]) == (lead, rank), (
            files
        )


def test_check_on_two_ranks_passed_every_step_on_nccl() -> None:
    doc = json.loads((FAIL9 / "check-2hosts.json").read_text())
    steps = {s["id"]: s["status"] for s in doc["steps"]}
    assert set(steps) >= {"ssh", "inventory", "port", "env", "allreduce", "fabric", "ddp"}
    assert set(steps.values()) == {"pass"}, steps
    assert doc["first_failure"] is None
