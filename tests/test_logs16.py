"""Round logs16 (issue 15): general readings of misses that name an id, and failure lines
any user reads as one, each read from the printing program's own message format (zsh's
job report, bash's "Killed", torch's gloo wrapper, Ray's node.py, Go's net.OpError, NCCL's
ibvwrap.cc) and checked on the real excerpt as pasted, and on the neighbours it must leave
alone."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from corpus_excerpts import excerpt, ids, lead

from ddptui.logs.diagnose import diagnose_lines


def test_failure_lines_a_user_reads_as_one_are_never_called_clean() -> None:
    """A paste whose only failure is zsh's "[1]  PID bus error  cmd", Ray's "The current
    node timed out during startup ... raylet failed to startup", torch's bare "Gloo
    connectFullMesh failed" or Go's "dial tcp ...: connect: connection refused" gets an
    honest unknown quoting that line, not a tick (the bare Gloo line is GLOO-MESH since round
    13: tests/test_gloo_mesh_iface.py)."""
    for name, quoted in (
        ("j-badlibnccl-vllm-4077", "bus error"),
        ("j1-interface-ray-worker-ip-aws-do-eks-49", "timed out during startup"),
        ("j-istio-mpi-operator-407", "connection refused"),
    ):
        d = excerpt(name)
        assert lead(d) == "LOGS-UNRECOGNIZED", (name, ids(d))
        assert quoted in d.first.cause, (name, d.first.cause)
    for line in (
        "[2]  + 4242 killed     python train.py",  # zsh's job report
        "fish: Job 1, 'python x.py' terminated by signal SIGSEGV (Address boundary error)",
        "run.sh: line 3:   777 Terminated              python x.py",  # bash's
        "*** SIGSEGV (@0x0) received by PID 1234 (TID 0x7f3e2c1ff700) from PID 0; stack trace: ***",  # glog's
        '*** Aborted at 1581234567 (unix time) try "date -d @1581234567" if you are using GNU date ***',
    ):
        shell = diagnose_lines(["epoch 1", line], "sh")
        assert lead(shell) == "LOGS-UNRECOGNIZED", (line, ids(shell))
    assert lead(diagnose_lines(["epoch 1", "Killed"], "sh")) is not None
    quiet = diagnose_lines(
        [
            "[1] 4242",
            "Killed 3 stale workers from the previous run",
            "dial tcp 10.0.0.1:443 established",
            "Gloo connectFullMesh took 2 s",
            "process 1 terminated with signal handlers installed",
            "see line 12:  3 Terminated jobs are listed by squeue",
        ],
        "ok",
    )
    # no shell's failure report, at most logs33's warning that a line reads like a failure
    assert not quiet.failed, ids(quiet)
    assert all(f.severity == "info" or f.summary.startswith("Lines that read like a failure")
               for f in quiet.findings), ids(quiet)


def test_bare_ibv_reg_mr_failure_of_old_nccl_is_the_memlock_limit() -> None:
    """NCCL <= 2.11's ibvwrap.cc IBV_PTR_CHECK prints "Call to ibv_reg_mr failed" with no
    errno: the locked-memory limit (IB-MEMLOCK).  With an errno that names another cause
    (Bad address: GPUDirect RDMA) it keeps that reading."""
    d = excerpt("i-memlock-hhhyunwoo-infiniband-nccl-issue")
    assert lead(d) == "IB-MEMLOCK", ids(d)
    gdr = diagnose_lines(["n1:1:2 [0] misc/ibvwrap.cc:182 NCCL WARN Call to ibv_reg_mr failed with error Bad address"], "g")
    assert lead(gdr) == "IB-GDR-REG", ids(gdr)
    cq = diagnose_lines(["n1:1:2 [0] misc/ibvwrap.cc:106 NCCL WARN Call to ibv_create_cq failed"], "c")
    assert "IB-MEMLOCK" not in ids(cq), ids(cq)


def test_c10d_hostname_warning_a_resolver_timeout_apart_is_not_clean() -> None:
    """c10d's socket.cpp "The hostname of the client socket cannot be retrieved" from one
    process again and again, each ~10 s after the last (pytorch#159007: every reverse
    lookup waits out DNS): an honest unknown quoting the lines.  The same warning in a
    burst (one per rank in the same second, a healthy sglang TP=16 start) stays silent."""
    d = excerpt("i-hostname-pytorch-159007")
    assert lead(d) == "LOGS-UNRECOGNIZED", ids(d)
    assert d.first.severity == "warning"
    assert "reverse DNS" in d.first.cause and "5 times" in d.first.cause
    assert excerpt("a-healthy-hostname-client-socket-warning-sglang-29853").findings == ()
    burst = [f"[W724 18:22:{s:02d}.909218572 socket.cpp:200] [c10d] The hostname of the client socket cannot be retrieved. err=-3" for s in (1, 1, 2, 2, 3, 9)]
    assert diagnose_lines(burst, "b").findings == (), "a burst is no resolver timeout"


def test_lightning_under_slurm_alone_in_its_registration() -> None:
    """Lightning's "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/96", the log
    stopping in the registration and Slurm's own line (slurmstepd's CANCELLED): the Slurm
    tasks do not fill the Trainer's world (LAUNCH-LIGHTNING-SLURM leads the cancel).
    Without Slurm's lines, or with a world of one, it is not said."""
    d = excerpt("j2-lightning-slurm-ntasks-torchmetrics-2300")
    assert lead(d) == "LAUNCH-LIGHTNING-SLURM", ids(d)
    assert "world of 96" in d.first.cause
    start = "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/"
    cancel = "slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2023-08-31T18:04:42 ***"
    for lines in ([start + "8"], [start + "1", cancel]):
        assert "LAUNCH-LIGHTNING-SLURM" not in ids(diagnose_lines(lines, "x")), lines
