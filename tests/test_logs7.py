"""Round logs7 (issue 15): general mechanisms for the watchdog/desync, cross-rank and
version kinds the blind batches missed, each checked on real excerpts quoted from public
threads (tests/fixtures/corpus/) - the ones it fires on, and the neighbours it must leave
alone."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "corpus"))

from score import load_corpus

from ddptui.logs.diagnose import LogDiagnosis, diagnose_lines

CORPUS = {e.id: e for e in load_corpus()}


def excerpt(name: str) -> LogDiagnosis:
    return diagnose_lines(list(CORPUS[name].lines), name)


def ids(d: LogDiagnosis) -> list[str]:
    return [f.id for f in d.findings]


# ------------------------------------------- a watchdog timeout only the waiter shows


def test_a_one_rank_watchdog_paste_names_the_ranks_that_were_elsewhere() -> None:
    """One rank's watchdog timeout, nothing else failing: the log holds no line of any
    other rank, which is what a rank-0-only validation (finetrainers#114), a gated
    dataset one rank blocked in (SimpleTuner#3099), rank-0-only test plots
    (particleflow#390, only the watchdog's stack) or rank-0-only eigendecomposition
    (bergson#444) look like from the waiting side."""
    for name, who in (
        ("b-timeout-validation-rank0-finetrainers-114", "rank 3 waits in BROADCAST (SeqNum 3348) past its 30-minute timeout"),
        ("b-desync-gated-dataset-simpletuner-3099", "rank 1 waits in"),
        ("b-timeout-rank0-test-particleflow-390", "a rank (the log does not say which) waits in a collective"),
        ("b-rank0-only-work-timeout-bergson-444", "a rank (the log does not say which)"),
    ):
        d = excerpt(name)
        assert d.first is not None and d.first.id == "LOGS-NOT-IN-COLLECTIVE", (name, ids(d))
        assert d.first.severity == "error"
        assert who in d.first.summary, (name, d.first.summary)
        assert "no other rank's line is in the log" in d.first.summary
        assert "evaluation or validation on rank 0" in d.first.cause
        assert d.first.evidence, name  # the watchdog line itself is quoted
        assert any(i.startswith("WATCHDOG") for i in ids(d)), name  # the timeout stays listed


def test_a_timeout_too_short_for_any_work_stays_the_watchdog_timeout() -> None:
    """instructlab#520 set the timeout to 1 ms on purpose: no rank was elsewhere, the
    timeout itself is the cause."""
    d = excerpt("timeout-instructlab-520")
    assert d.first is not None and d.first.id == "WATCHDOG"


def test_a_timeout_beside_a_fabric_error_is_not_a_rank_elsewhere() -> None:
    """A rank's watchdog timeout after a NCCL network error of its own: the error
    explains it, the waiting side is not the story."""
    lines = [
        "node1:2201:2290 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<33712> with error 12, opcode 0, len 0, vendor err 129 (Recv) localGid ::ffff:10.0.0.1 remoteGid ::ffff:10.0.0.2",
        "[rank0]:[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600363 milliseconds before timing out.",
    ]
    d = diagnose_lines(lines)
    assert d.first is not None and d.first.id != "LOGS-NOT-IN-COLLECTIVE", ids(d)
    assert "LOGS-NOT-IN-COLLECTIVE" not in ids(d)


# ------------------------------------------------- ranks of a node that never started


def test_one_nodes_block_of_ranks_registering_and_nothing_after_is_a_missing_node() -> None:
    """Lightning#8707: an sbatch script ran python without srun, so only node 0's ranks
    0-3 of a world of 8 registered and the log stops in the registration."""
    d = excerpt("f-slurm-nosrun-lightning-8707")
    assert d.first is not None and d.first.id == "LOGS-MISSING-NODES", ids(d)
    assert "ranks 0-3 of a world of 8" in d.first.summary
    assert "node rank(s) 1 never started" in d.first.summary
    assert "srun" in d.first.fix


def test_neighbours_of_the_missing_node_rule_are_left_alone() -> None:
    """Each rank twice (Lightning#10098: two processes per rank) is a duplicate, not a
    missing node; one rank of 8 registering (Lightning#5651: a stray NODE_RANK) is no
    node's block; a hang at the first step after NCCL init (vLLM#9920: every rank had
    joined) is no missing node."""
    assert excerpt("d-slurm-ntasks-mismatch-lightning-10098").first.id == "LOGS-DUP-RANK"  # type: ignore[union-attr]
    for name in ("c-node-rank-env-hang-lightning-5651", "b-p2p-acs-iommu-vllm-9920"):
        d = excerpt(name)
        assert "LOGS-MISSING-NODES" not in ids(d), name
