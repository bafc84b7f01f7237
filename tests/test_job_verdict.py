"""The job verdict's rules on what nodes showed: a healthy job is never called stuck; a
diverged rank is named; a busy straggler is slow, not hung, until its peers have been
quiet for long; missing ranks, refused ptrace, missing py-spy and ambiguous jobs are
said with their fix. Built from py-spy text as the probe sends it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ddptui.job.model import (
    Candidate,
    LogFile,
    NodeView,
    Output,
    RankView,
    StackSample,
    node_from_records,
)
from ddptui.job.side import ambiguity, side_findings
from ddptui.job.stacks import parse_dump
from ddptui.job.verdict import judge

ALL_REDUCE = (
    'Thread 1 (idle): "MainThread"\n'
    "    all_reduce (torch/distributed/distributed_c10d.py:3252)\n"
    "    _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)\n"
    "    <module> (train.py:12)\n"
)
SLEEP_BETWEEN = 'Thread 1 (idle): "MainThread"\n    <module> (train.py:14)\n'
EVALUATE = 'Thread 1 (idle): "MainThread"\n    evaluate (train.py:6)\n    <module> (train.py:11)\n'
# What py-spy 0.4.3 prints when the kernel refuses it (run as another user).
PTRACE_REFUSED = (
    "Permission Denied: Try running again with elevated permissions by going "
    "'sudo env \"PATH=$PATH\" !!'"
)


def rank(
    r: int,
    stacks: tuple[str | None, ...],
    *,
    cpu: float = 0.0,
    grew: int = 0,
    age: float | None = 30.0,
    node: str | None = None,
    error: str | None = None,
    world: int = 3,
) -> RankView:
    out = Output("file", f"/jobs/node{r}.log", 100, grew, age)
    return RankView(
        node=node or f"node{r}",
        pid=100 + r,
        rank=r,
        local_rank=0,
        world_size=world,
        group_rank=r,
        state="S",
        cpu_pct=cpu,
        rss_bytes=1 << 28,
        threads=4,
        started=0.0,
        wchan="futex_wait_queue",
        cmd="python -u train.py",
        stdout=out,
        stderr=out,
        env={"RANK": str(r)},
        gpu=None,
        stacks=tuple(
            StackSample(i + 1, parse_dump(t) if t else None, None if t else (error or "failed"))
            for i, t in enumerate(stacks)
        ),
    )


def views(*ranks: RankView, **extra: object) -> list[NodeView]:
    out = []
    for r in ranks:
        cand = Candidate(r.node, 10, "torchrun train.py", 0.0, (r.rank or 0,), "job-a")
        out.append(NodeView(r.node, agent={"pid": 10}, ranks=(r,), candidates=(cand,), **extra))  # type: ignore[arg-type]
    return out


def test_healthy_loop_in_all_reduce_is_not_stuck() -> None:
    # Both samples catch most ranks inside all_reduce (as the healthy H100 dump does),
    # but the stacks move between samples and output grows: healthy.
    v = judge(
        views(
            rank(0, (ALL_REDUCE, SLEEP_BETWEEN), cpu=12, grew=40, age=0.1),
            rank(1, (ALL_REDUCE, ALL_REDUCE), cpu=9, grew=40, age=0.1),
            rank(2, (SLEEP_BETWEEN, ALL_REDUCE), cpu=11, grew=40, age=0.1),
        ),
        window_s=2,
    )
    assert v.state == "healthy"
    assert v.findings[0].id == "JOB-HEALTHY"


def test_healthy_even_with_identical_stacks_when_output_grows() -> None:
    v = judge(
        views(*(rank(r, (ALL_REDUCE, ALL_REDUCE), grew=10, age=0.2) for r in range(3))),
        window_s=2,
    )
    assert v.state == "healthy"


def test_diverged_rank_named_with_function_and_waiters() -> None:
    v = judge(
        views(
            rank(0, (ALL_REDUCE, ALL_REDUCE)),
            rank(1, (EVALUATE, EVALUATE)),
            rank(2, (ALL_REDUCE, ALL_REDUCE)),
        ),
        window_s=2,
    )
    f = v.findings[0]
    assert v.state == "hung" and f.id == "JOB-HUNG-DIVERGED"
    assert f.rank == 1 and f.nodes == ("node1",) and f.where == "train.py:6 in evaluate"
    assert f.summary.startswith(
        "hung: rank 1 (node1) is in `evaluate` at `train.py:6`; ranks 0, 2 (node0, node2) "
        "wait in `all_reduce` at `train.py:12` (no output for 30s)"
    )
    assert "Rank 1 (node1) is in `evaluate`" in f.cause and "train.py:6" in f.fix


def test_busy_straggler_is_slow_until_its_peers_are_quiet_for_long() -> None:
    busy = (rank(0, (ALL_REDUCE, ALL_REDUCE), age=5), rank(1, (EVALUATE, EVALUATE), cpu=100, age=5))
    v = judge(views(*busy, rank(2, (ALL_REDUCE, ALL_REDUCE), age=5)), window_s=2)
    assert v.state == "slow" and v.findings[0].id == "JOB-STRAGGLER"
    assert v.findings[0].severity == "warning" and v.findings[0].rank == 1
    old = replace(busy[0].stdout, age_s=600.0)
    quiet = [replace(r, stdout=old, stderr=old) for r in busy]
    v = judge(views(*quiet, rank(2, (ALL_REDUCE, ALL_REDUCE), age=600)), window_s=2)
    assert v.state == "hung" and v.findings[0].id == "JOB-HUNG-DIVERGED"


def test_every_rank_in_the_same_collective_without_moving() -> None:
    # Quiet for 10 minutes: hung.
    v = judge(views(*(rank(r, (ALL_REDUCE, ALL_REDUCE), age=600) for r in range(3))), window_s=2)
    assert v.state == "hung" and v.findings[0].id == "JOB-HUNG-COLLECTIVE"
    assert v.findings[0].severity == "error"
    assert "every rank waits in `all_reduce` at train.py:12 in <module>" in v.findings[0].summary
    # Printed 30 s ago: a busy NCCL loop looks the same, so it is said, not a problem.
    v = judge(views(*(rank(r, (ALL_REDUCE, ALL_REDUCE), age=30) for r in range(3))), window_s=2)
    assert v.state == "waiting" and v.findings[0].severity == "info"


def test_cpu_spent_waiting_at_a_sync_point_is_no_progress() -> None:
    # CUDA spin-waits in cudaDeviceSynchronize: 100% CPU, yet the rank does not move.
    sync = 'Thread 1 (active): "MainThread"\n    synchronize (torch/cuda/__init__.py:1162)\n    <module> (hang.py:13)\n'
    v = judge(views(rank(0, (sync, sync, sync), cpu=100, age=600, world=1)), window_s=2)
    assert v.state == "hung" and "synchronize" in v.findings[0].summary


def test_a_missing_rank_is_named() -> None:
    v = judge(
        views(rank(0, (ALL_REDUCE, ALL_REDUCE)), rank(1, (ALL_REDUCE, ALL_REDUCE))), window_s=2
    )
    assert v.state == "hung" and v.missing == (2,)
    assert v.findings[0].id == "JOB-RANKS-MISSING" and "rank 2 of 3" in v.findings[0].summary


def test_a_missing_rank_whose_log_tells_the_crash() -> None:
    crash_log = LogFile(
        "node2",
        "/jobs/node2.log",
        (
            "[rank2]: Traceback (most recent call last):",
            '[rank2]:   File "/jobs/train.py", line 9, in step',
            "[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB.",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        ),
        (),
        1.0,
    )
    seen = [
        *views(rank(0, (ALL_REDUCE, ALL_REDUCE)), rank(1, (ALL_REDUCE, ALL_REDUCE))),
        NodeView("node2", logs=(crash_log,)),
    ]
    v = judge(seen, window_s=2)
    f = v.findings[0]
    assert v.state == "crashed" and f.id == "JOB-CRASHED"
    assert f.rank == 2 and f.nodes == ("node2",) and f.where == "train.py:9 in step"
    assert "OutOfMemoryError: CUDA out of memory" in f.summary
    assert "ranks 0-1 are still running" in f.summary
    assert "batch size" in f.fix  # the knowledge base's RANK-CUDA-OOM fix


def test_no_job_anywhere() -> None:
    v = judge([NodeView("node0"), NodeView("node1")], window_s=2)
    assert v.state == "none" and v.findings == ()


def test_ptrace_refused_says_why_and_what_to_do() -> None:
    r = rank(0, (None, None), error=PTRACE_REFUSED, world=1)
    node = views(r)[0]
    for scope, words in ((2, "ptrace_scope is 2"), (1, "ptrace_scope is 1")):
        seen = [replace(node, ptrace_scope=scope, me_uid=1000)]
        found = side_findings(seen, judge(seen, window_s=2), _config(), None, [])
        f = next(x for x in found if x.id == "JOB-STACKS-PTRACE")
        assert words in f.summary and "never raises its own privileges" in f.fix
    seen = [replace(node, cap_sys_ptrace=False, me_uid=0)]
    found = side_findings(seen, judge(seen, window_s=2), _config(), None, [])
    f = next(x for x in found if x.id == "JOB-STACKS-PTRACE")
    assert "CAP_SYS_PTRACE" in f.summary and "SYS_PTRACE" in f.fix


def test_no_pyspy_and_no_stacks_still_judges_by_cpu_and_output() -> None:
    r = rank(0, (), world=1, age=600)
    seen = [replace(views(r)[0], stacks_unavailable="py-spy is not installed on this node")]
    v = judge(seen, window_s=2)
    assert v.state == "stalled" and "no stacks to say where" in v.findings[0].summary
    found = side_findings(seen, v, _config(), None, [])
    assert any(f.id == "JOB-STACKS-NO-PYSPY" for f in found)


def test_different_jobs_on_different_nodes_are_ambiguous() -> None:
    a = views(rank(0, (ALL_REDUCE,)))[0]
    b = views(rank(1, (ALL_REDUCE,)))[0]
    b = replace(b, candidates=(Candidate("node1", 11, "torchrun other.py", 0.0, (0,), "job-b"),))
    f = ambiguity([a, b])
    assert f is not None and f.id == "JOB-AMBIGUOUS"
    assert "torchrun other.py" in " ".join(f.evidence)
    assert ambiguity([a, views(rank(1, (ALL_REDUCE,)))[0]]) is None


def _config() -> object:
    from ddptui.config import ClusterConfig

    return ClusterConfig.model_validate(
        {"master": {"addr": "10.0.0.1", "port": 29500}, "nodes": [{"host": "node0"}]}
    )


# ------------------------------------------------------------- real NCCL jobs on an H100
# What the job probe recorded on the lent H100 (bench/results, one GPU, NCCL 2.28.9):
# hang.py 12 s into its hang, loop.py running, and hang.py's log after the watchdog.

FIX = Path(__file__).parent / "fixtures" / "job"


def h100(name: str) -> list[NodeView]:
    doc = json.loads((FIX / name).read_text())
    return [node_from_records("gpu0", doc["records"])]


def test_h100_hang_at_the_sync_point_is_waiting_then_hung() -> None:
    seen = h100("h100-probe-hang.json")
    (r,) = seen[0].ranks
    assert r.gpu is not None and r.gpu["gpu"] == 0 and r.gpu["mem_bytes"] > 1 << 30
    assert r.cpu_pct is not None and r.cpu_pct > 90  # CUDA spins while it waits
    assert {s.place.op for s in r.good_stacks()} == {"synchronize"}
    v = judge(seen, window_s=2)  # quiet for 12 s: not yet called hung
    assert v.state == "waiting"
    v = judge(seen, window_s=2, hang_after_s=10)
    assert v.state == "hung" and v.findings[0].where == "hang.py:13 in <module>"
    found = side_findings(seen, v, _config(), None, [])
    assert "JOB-RAS-OK" in [f.id for f in found]


def test_h100_healthy_loop_is_not_stuck() -> None:
    seen = h100("h100-probe-loop.json")
    v = judge(seen, window_s=2)
    assert v.state in ("healthy", "waiting"), v.headline
    assert not v.findings[0].id.startswith("JOB-HUNG")


def test_h100_post_mortem_of_the_watchdog_abort() -> None:
    lines = tuple((FIX / "h100-hang-after-watchdog.log").read_text().splitlines())
    v = judge([NodeView("gpu0", logs=(LogFile("gpu0", "hang.log", lines, (), 5.0),))], window_s=2)
    f = v.findings[0]
    assert v.state == "crashed" and f.rank == 0 and f.where == "hang.py:12 in <module>"
    assert "exit code -6" in f.summary and "SIGABRT" in f.summary
    assert "collective 4 (ALLREDUCE)" in f.cause  # the knowledge base's WATCHDOG reading


def test_the_jobs_real_launch_environment_is_audited_with_the_env_rules() -> None:
    """The torchrun agents' own environments (redacted on the node) go through the env
    step's rules: an NCCL variable set on one node only is named."""
    a, b = views(rank(0, (ALL_REDUCE, SLEEP_BETWEEN), grew=5), rank(1, (ALL_REDUCE,), grew=5))
    a = replace(a, agent={"pid": 10, "env": {"NCCL_IB_DISABLE": "1", "PATH": "/usr/bin"}})
    b = replace(b, agent={"pid": 10, "env": {"PATH": "/usr/bin"}})
    seen = [a, b]
    found = side_findings(seen, judge(seen, window_s=2), _config(), None, [])
    env = [f for f in found if f.id.startswith("ENV-")]
    assert env and any("NCCL_IB_DISABLE" in f.summary for f in env), [f.id for f in found]


SLOW_STEP = 'Thread 1 (idle): "MainThread"\n    slow_step (train.py:6)\n    <module> (train.py:11)\n'


def test_a_rank_computing_while_the_others_wait_every_step_is_slow_not_hung() -> None:
    # The job moves (every rank's output grew), rank 1 is in its own code in every
    # sample but one, the others wait in all_reduce: slow, rank 1 named.
    slow = rank(1, (SLOW_STEP, SLOW_STEP, ALL_REDUCE, SLOW_STEP, SLOW_STEP), grew=40, age=0.5)
    others = [rank(r, (ALL_REDUCE,) * 5, grew=40, age=0.5) for r in (0, 2)]
    v = judge(views(others[0], slow, others[1]), window_s=2.0)
    assert v.state == "slow"
    f = v.findings[0]
    assert f.id == "JOB-SLOW-RANK" and f.rank == 1 and f.nodes == ("node1",)
    assert f.where == "train.py:6 in slow_step"
    assert "rank 1 (node1) computes in `slow_step`" in f.summary
    # The same shape with nothing moving is the hung case, not this one.
    stuck = rank(1, (SLOW_STEP,) * 5)
    quiet = [rank(r, (ALL_REDUCE,) * 5) for r in (0, 2)]
    assert judge(views(quiet[0], stuck, quiet[1]), window_s=2.0).state == "hung"
    # A healthy loop (every rank mostly between collectives) is not slow.
    mostly_between = (SLEEP_BETWEEN, ALL_REDUCE, SLEEP_BETWEEN, SLEEP_BETWEEN, SLEEP_BETWEEN)
    loop = [rank(r, mostly_between, grew=40, age=0.5) for r in range(3)]
    assert judge(views(*loop), window_s=2.0).state == "healthy"
