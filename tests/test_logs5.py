"""Round logs5 (issue 15): general mechanisms for kinds of failure the round-4 blind
batches (D, D2) missed, each checked on real excerpts quoted from public threads
(tests/fixtures/corpus/) - the ones it fires on, and the neighbours it must leave alone."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from corpus_excerpts import CORPUS, excerpt

from ddptui.logs.diagnose import diagnose_lines


def first(name: str) -> str | None:
    d = excerpt(name)
    return d.first.id if d.first is not None else None


# ------------------------------------------------- a scheduler's kill explains the launcher's


def test_slurm_oom_kill_leads_torchruns_sigkill() -> None:
    """Slurm's "Detected 1 oom-kill event(s)" (its own "(s)") and srun's "Out Of
    Memory": the cgroup killer is the cause, the SIGKILL what it did (ranking.yaml
    SCHEDULER-KILL-FIRST, applied to line signatures too)."""
    d = excerpt("e-slurm-oom-brainscore-950")
    assert d.first is not None and d.first.id == "SLURM-OOM"
    # torchrun's own words for the kill, printed before Slurm's: the kill still follows
    lines = [*CORPUS["e-slurm-oom-brainscore-950"].lines]
    lines.insert(0, "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 484375) of binary")
    both = diagnose_lines(lines)
    assert both.first is not None and both.first.id == "SLURM-OOM"
    assert "C10D-CHILD-SIGKILL" in {f.id for f in both.findings}
    # without Slurm's line the SIGKILL stays the cause
    assert first("r2c-crash-rlhfv-11") == "C10D-CHILD-SIGKILL"


def test_kubernetes_kills_lead() -> None:
    assert first("e-k8s-oomkilled-pai-5464") == "K8S-OOMKILLED"
    assert first("e-k8s-evicted-memory-kubeflow-1261") == "K8S-EVICTED"
    assert first("e-slurm-timelimit-debugq-desitarget-628") == "SLURM-TIMELIMIT"
    # torchrun's SIGKILL first, then the pod's events (kubectl describe: OOMKilled, or
    # the node's OOMKilling event): the kill explains the SIGKILL
    sigkill = "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 4121) of binary"
    for event in (
        "  Warning  OOMKilling  2m  kernel-monitor, node-3  Memory cgroup out of memory: Killed process 4121 (python)",
        *(x for x in CORPUS["e-k8s-oomkilled-pai-5464"].lines if "OOMKilled" in x),
    ):
        d = diagnose_lines([sigkill, event])
        assert d.first is not None and d.first.id == "K8S-OOMKILLED", event
        assert "C10D-CHILD-SIGKILL" in {f.id for f in d.findings}


# ------------------------------------------------- /dev/shm in containers


def test_a_segment_nccl_could_not_create_in_a_container_is_dev_shm() -> None:
    """vLLM in docker: NCCL's "Error while creating shared memory segment": SHM-SIZE
    (the container's /dev/shm) leads the segment error it explains."""
    d = excerpt("d-shm-vllm-docker-MiniMax-42")
    assert d.first is not None and d.first.id == "SHM-SIZE"
    assert "SHM-SEGMENT" in {f.id for f in d.findings}


def test_a_worker_killed_by_sigbus_is_dev_shm() -> None:
    """A training worker that died of signal 7 (SIGBUS) with nothing else said (a k8s
    pod's elastic error file): a /dev/shm page that cannot be backed."""
    d = excerpt("d-shm-k8s-sigbus-dlrover-1046")
    assert d.first is not None and d.first.id == "SHM-SIZE"
    assert "bus error" in d.first.summary
    # torchrun's summary without the signal's name: exit code -7 is SIGBUS too
    line = CORPUS["d-shm-k8s-sigbus-dlrover-1046"].lines[0].replace(", message='Signal 7 (SIGBUS) received by PID 54'", "")
    assert "SIGBUS" not in line
    assert diagnose_lines([line]).first.id == "SHM-SIZE"  # type: ignore[union-attr]
    assert diagnose_lines(["    exitcode  : -7 (pid: 54)"]).first.id == "SHM-SIZE"  # type: ignore[union-attr]
    # other signals stay what they are
    assert first("r2c-crash-rlhfv-11") != "SHM-SIZE"


def test_deepspeed_killing_its_workers_is_never_clean() -> None:
    """DeepSpeed's launcher killing its subprocesses (a worker died; here of a 64 MB
    /dev/shm the paste does not show) is an honest unknown, never a clean bill."""
    d = excerpt("e-shm-docker-64m-deepspeed-4000")
    assert d.first is not None and d.first.id == "LOGS-UNRECOGNIZED"
    assert d.failed


# ------------------------------------------------- launchers, limits


def test_launcher_command_not_found_on_the_node() -> None:
    d = excerpt("d-slurm-torchrun-missing-CSCfi-ddp-1")
    assert d.first is not None and d.first.id == "LAUNCH-CMD-NOTFOUND"
    assert "<" not in d.first.cause  # every placeholder filled
    for line in (
        "/var/spool/slurmd/job123/slurm_script: line 12: torchrun: command not found",
        "sh: 1: deepspeed: not found",
        "mpirun was unable to launch the specified application as it could not find an executable:",
    ):
        shell = diagnose_lines([line])
        assert shell.first is not None and shell.first.id == "LAUNCH-CMD-NOTFOUND", line
    # a module or file a script cannot find is no launcher's command
    other = diagnose_lines(["FileNotFoundError: [Errno 2] No such file or directory: 'data/train.json'"])
    assert other.first is None or other.first.id != "LAUNCH-CMD-NOTFOUND"


def test_launcher_with_an_empty_master_address() -> None:
    d = excerpt("d-launcher-ds-empty-master-addr-DeepSpeed-2612")
    assert d.first is not None and d.first.id == "LAUNCH-EMPTY-ADDR"
    assert "ddp-0.ddp.ml-dev.svc.cluster.local" in d.first.cause
    # an address there is no finding
    ok = diagnose_lines(["[2022-12-15 21:00:19,543] [INFO] [runner.py:417:main] Using IP address of 10.0.0.4 for node ddp-0"])
    assert ok.first is None


def test_too_many_open_files_is_the_nofile_limit() -> None:
    """NCCL 2.26+'s ncclOsSocketTryAccept, older socketTryAccept and c10d's accept all
    say EMFILE the same way: the open-files limit."""
    assert first("e-nofile-limit-spd-957") == "NOFILE-LIMIT"
    for line in (
        "node1:1234:1240 [0] misc/socket.cc:459 NCCL WARN socketTryAccept: Accept failed: Too many open files",
        "[E1125 10:00:01.000000000 socket.cpp:290] [c10d] The server socket on [::]:29500 has failed to accept a connection (errno: 24 - Too many open files).",
    ):
        d = diagnose_lines([line])
        assert d.first is not None and d.first.id == "NOFILE-LIMIT", line


# ------------------------------------------------- healthy noise stays silent


def test_a_benchmark_that_printed_a_result_row_did_not_stall() -> None:
    """nccl-tests' table header then a size's result: it went on (no stall, no unknown);
    the header alone at the end of a log is still a stall."""
    d = excerpt("d-healthy-libibverbs-ibdisabled-nccltests-82")
    assert d.findings == ()
    head = [x for x in CORPUS["d-healthy-libibverbs-ibdisabled-nccltests-82"].lines if not x.strip().startswith("8 ")]
    stalled = diagnose_lines(head)
    assert stalled.first is not None and stalled.first.severity == "warning"


def test_healthy_warnings_stay_non_errors() -> None:
    for name in ("e-healthy-deprecated-env-warn-fms-fsdp-120", "e-healthy-slow-socket-warn-nccl-766", "e-healthy-barrier-device-warn-prime-rl-1756"):
        d = excerpt(name)
        assert not d.failed, name
        assert all(f.severity != "error" for f in d.findings), name


def test_ranking_lines_flag_is_checked() -> None:
    """`lines:` in a precedence rule is true or false; a typo is a clear error."""
    import pytest

    from ddptui.diagnosis.ranking import RankingError, parse_ranking

    good = "precedence:\n- {id: R, why: w, causes: [SLURM-OOM], before: [C10D-CHILD-SIGKILL], lines: true}\n"
    assert parse_ranking(good).precedence[0].lines is True
    with pytest.raises(RankingError, match="lines must be true or false"):
        parse_ranking(good.replace("lines: true", "lines: yes please"))


# ------------------------------------------------- two hosts NCCL took for one


def test_p2p_between_ranks_of_two_hosts_is_the_host_hash() -> None:
    """nccl#187: "6[6] -> 10[2] via P2P/IPC": rank 10 on GPU 2 belongs to the host whose
    first rank is 8, rank 6 to the one of rank 0; NCCL joined them over IPC because both
    hosts hashed alike (host names sharing a prefix)."""
    d = excerpt("a-hostname-prefix-collision-ipc-across-hosts-nccl-187")
    assert d.first is not None and d.first.id == "NCCL-HOSTHASH"
    assert "rank 6 (GPU 6" in d.first.summary and "rank 10 (GPU 2" in d.first.summary
    err = "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:260, unhandled cuda error"
    # one GPU visible per process (every device 0), and a cyclic layout (ranks 0, 2 on
    # one host): nothing says two hosts
    for edges in (
        ["h:1:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 2[0] via P2P/IPC"],
        ["h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[1] via P2P/IPC", "h:1:3 [1] NCCL INFO Channel 00/0 : 2[1] -> 0[0] via P2P/IPC"],
    ):
        d = diagnose_lines([*edges, err])
        assert all(f.id != "NCCL-HOSTHASH" for f in d.findings), edges
    # a healthy log with such an edge and no failure says nothing
    assert diagnose_lines(["learngpu060:3728593:3730444 [6] INFO Ring 00 : 6[6] -> 10[2] via P2P/IPC"]).first is None
