"""P2P-HANG (factrules_p2p.py): a watchdog timeout in the process group's first collective
(SeqNum 1), on one host, with nothing that shows a rank elsewhere, is the GPU-to-GPU path
hanging.  Checked on the real excerpts of four public threads that established it (the
corpus labels them [NEW]: collected before the id existed), and on the neighbours it must
leave alone: a short timeout, a later collective with a rank busy tokenising, two hosts."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

import pytest
from corpus_excerpts import excerpt, ids, lead

from ddptui.logs.diagnose import diagnose_lines


@pytest.mark.parametrize(
    "eid",
    [
        "j-p2p-driver545-vllm-1801",  # vllm#1801: driver 545.29 misreports P2P
        "j2-p2p-hang-accelerate-2062",  # accelerate#2062: NCCL_P2P_DISABLE=1 works
        "j3-p2p-online-rlhf-22",  # Online-RLHF#22: only disabling P2P lets it finish
    ],
)
def test_first_collective_timeout_on_one_host_is_the_p2p_path(eid: str) -> None:
    d = excerpt(eid)
    assert lead(d) == "P2P-HANG", ids(d)
    assert "SeqNum 1" in d.first.summary
    assert "NCCL_P2P_DISABLE=1" in d.first.fix
    assert "30 min" in d.first.cause  # how long it waited, from the watchdog's own line


def test_a_short_timeout_at_the_first_collective_is_the_timeout() -> None:
    """instructlab: Timeout(ms)=1 at SeqNum 1 (a knob set in the wrong unit): no transport hang."""
    d = excerpt("timeout-instructlab-520")
    assert "P2P-HANG" not in ids(d), ids(d)


def test_a_rank_busy_elsewhere_is_not_the_p2p_path() -> None:
    """llamafactory: ranks 1-3 wait at SeqNum 2 while a tokenizer bar ran ~30 minutes."""
    d = excerpt("timeout-llamafactory-2424")
    assert "P2P-HANG" not in ids(d), ids(d)
    assert lead(d) in {"LOGS-NOT-IN-COLLECTIVE", "LOGS-MAIN-FIRST-WAIT"}, ids(d)


WATCHDOG_R1 = "[rank1]:[E1126 05:20:52.139599905 ProcessGroupNCCL.cpp:689] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=16777216, NumelOut=16777216, Timeout(ms)=1800000) ran for 1800012 milliseconds before timing out."


def test_two_hosts_or_a_rank_that_never_reports_leave_it_alone() -> None:
    """The same first-collective timeout beside NCCL lines of two hosts (the network path),
    or beside a rank the log knows (its NCCL init) that never reports it, is not read as P2P."""
    two_hosts = diagnose_lines(
        [
            "gpu01:539:539 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
            "gpu02:540:540 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
            WATCHDOG_R1,
        ],
        "t",
    )
    assert "P2P-HANG" not in ids(two_hosts), ids(two_hosts)
    # rank 0's NCCL init (as the H200 capture prints it) and only rank 1's watchdog
    absent = diagnose_lines(
        [
            "gpu01:534:534 [0] NCCL INFO ncclCommInitRankConfig comm 0x45783950 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 commId 0x18d4941082c6a069 - Init COMPLETE",
            WATCHDOG_R1,
        ],
        "t",
    )
    assert "P2P-HANG" not in ids(absent), ids(absent)
