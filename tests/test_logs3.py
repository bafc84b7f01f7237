"""Round logs3 (issue 15): general mechanisms for kinds of failure the blind batches
missed, each checked on real excerpts quoted from public threads (tests/fixtures/corpus/)
- the ones it fires on, and the neighbours it must leave alone."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "corpus"))
sys.path.insert(0, str(Path(__file__).parent))

from score import load_corpus

from ddptui.logs.diagnose import LogDiagnosis, diagnose_lines

CORPUS = {e.id: e for e in load_corpus()}


def excerpt(name: str) -> LogDiagnosis:
    return diagnose_lines(list(CORPUS[name].lines), name)


def first(name: str) -> str | None:
    d = excerpt(name)
    return d.first.id if d.first is not None else None


# ------------------------------------------------- watchdog: a rank was elsewhere


def test_several_ranks_time_out_and_rank_0_never_reports_it() -> None:
    """Ranks count from 0: when ranks 1 and 2 (myria3d: rank 0 prepared the test set)
    or 1, 2, 3 (LlamaFactory: rank 0 tokenised) time out in one collective, rank 0 was
    elsewhere; the finding names it and the other work it usually is."""
    for name, waiting in (("timeout-myria3d-123", "ranks 1, 2"), ("timeout-llamafactory-2424", "ranks 1, 2, 3")):
        d = excerpt(name)
        assert d.first is not None and d.first.id == "LOGS-NOT-IN-COLLECTIVE", name
        assert f"{waiting} wait in ALLREDUCE" in d.first.summary
        assert "rank 0 never report" in d.first.summary
        assert "evaluation or validation on rank 0" in d.first.cause
        assert "WATCHDOG" in [f.id for f in d.findings]  # the timeout itself stays listed
    # ranks 2 and 3 time out in the final barrier of a slow, uneven checkpoint consolidation
    d = excerpt("c-consolidation-barrier-timeout-automodel-1038")
    assert d.first is not None and d.first.id == "LOGS-NOT-IN-COLLECTIVE"
    assert "ranks 0, 1 never report" in d.first.summary


def test_a_timeout_after_the_run_ended() -> None:
    """Lightning's "`Trainer.fit` stopped" then rank 0's watchdog: rank 0 entered a
    barrier (a rank-0-only save) the finished ranks never call (autocast#381)."""
    d = excerpt("b-desync-save-ckpt-rank0-autocast-381")
    assert d.first is not None and d.first.id == "LOGS-NOT-IN-COLLECTIVE"
    assert "after the run ended" in d.first.summary
    assert "had left the loop" in d.first.cause and "Trainer.fit" in d.first.cause


def test_one_rank_timing_out_alone_stays_a_watchdog_timeout_naming_the_usual_cause() -> None:
    """A paste of one rank's timeout cannot say who was elsewhere: WATCHDOG, whose cause
    names first what threads establish most (one rank doing other work)."""
    for name in ("c-eval-imbalance-watchdog-lm-eval-harness-1404", "b-timeout-validation-rank0-finetrainers-114", "timeout-open-clip-1087"):
        d = excerpt(name)
        assert d.first is not None and d.first.id == "WATCHDOG", name
        assert "one rank was doing other work" in d.first.cause, name
    # every rank of the world timing out together names no absent rank
    lines = [
        f"[rank{r}]:[E ProcessGroupNCCL.cpp:563] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600363 milliseconds before timing out."
        for r in (0, 1)
    ]
    d = diagnose_lines(lines)
    assert d.first is not None and d.first.id == "WATCHDOG"


# ------------------------------------------------- /dev/shm in containers


def test_a_bus_error_in_a_container_is_dev_shm() -> None:
    """SIGBUS in NCCL, the process prefix a docker container id (pipedream#76: docker's
    64 MB /dev/shm, fixed with --shm-size)."""
    d = excerpt("c-sigbus-shm-docker-pipedream-76")
    assert d.first is not None and d.first.id == "SHM-SIZE"
    assert "bus error" in d.first.summary and "container" in d.first.summary
    assert any("8d6bf97c3bf4" in e for e in d.first.evidence)


def test_nccls_system_error_with_every_rank_on_one_host_is_dev_shm() -> None:
    """nccl-tests in a docker container, four ranks on one host, 'unhandled system
    error' (NVIDIA/nccl#473, fixed by --ipc=host)."""
    d = excerpt("a-docker-ipc-host-nccltests-unhandled-nccl-473")
    assert d.first is not None and d.first.id == "SHM-SIZE"
    assert "ranks 0, 1, 2, 3 all run on fastmoe" in d.first.summary


def test_a_system_error_without_any_hint_of_where_stays_unknown() -> None:
    # DEKR#18 was docker too, but the two pasted lines do not say so: honest unknown
    assert first("c-docker-ipc-host-dekr-18") == "LOGS-UNRECOGNIZED"
    # several hosts: a duplicate rank, not shared memory
    assert first("c-slurm-dup-rank-lightning-14986") == "ENV-DUPRANK"


# ------------------------------------------------- a node that never launched


def test_a_node_that_never_launched_torchrun() -> None:
    """Testbed (tests/fixtures/logs/node_missing.log): node2 never starts torchrun; node0
    and node1 state `max_nodes : 3` and their node ranks (rdzv_configs 'rank'), then the
    master times out with 2/3 clients joined and node1 waits for its assigned ranks."""
    from test_logfacts import capture, ids

    d = capture("node_missing")
    assert d.first is not None and d.first.id == "LOGS-MISSING-NODES", ids(d)
    assert "node rank(s) 2 never joined" in d.first.summary
    assert "node ranks 0, 1 appear" in d.first.cause
    assert {"C10D-CLIENTS-JOINED", "C10D-STORE-WAIT"} <= set(ids(d))
    # one node started with another --nnodes in a run that completed: no error
    assert not [f for f in capture("nnodes_differs").findings if f.severity == "error"]
