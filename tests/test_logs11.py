"""Round logs11 (issue 15): failing logs that were called clean ("✔ Nothing wrong found").
General readings of what tells a human that the run failed or hung, each checked on the
real excerpt quoted from the public thread and on healthy lines it must leave alone."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from pathlib import Path

from corpus_excerpts import CORPUS, excerpt, ids, lead

from ddptui.logs.diagnose import diagnose_lines


def test_a_module_qualified_exception_not_named_error_is_a_failure() -> None:
    """pytorch#132950: torchrun's etcd-v2 rendezvous ends in 'etcd.EtcdKeyNotFound: Key
    not found : /torch/elastic/store', a traceback's last line whose class does not end in
    Error: an honest unknown (exit 1), not a ✔.  A KeyboardInterrupt (a run stopped by
    hand) is a failure too; a logger's 'module.Class: message' of no failure word is not."""
    d = excerpt("c-etcd-v2-store-race-pytorch-132950")
    assert lead(d) == "LOGS-UNRECOGNIZED", ids(d)
    assert d.first is not None and d.first.severity == "error"
    assert "EtcdKeyNotFound" in d.first.summary + " ".join(d.first.evidence)
    stopped = diagnose_lines(["Traceback (most recent call last):", '  File "train.py", line 9, in <module>', "KeyboardInterrupt"], "ki")
    assert stopped.first is not None and stopped.first.severity == "error", ids(stopped)
    quiet = diagnose_lines(["lightning.Trainer: epoch 3 done", "mylib.DataModule: 120 batches"], "quiet")
    assert lead(quiet) is None, ids(quiet)


def test_the_store_barrier_timeout_cut_before_its_counts_is_still_that() -> None:
    """ChatGLM2-6B#6: the thread quotes torch's store-based barrier timeout without its
    '(world_size=..., worker_count=...)' tail; the message itself names the cause."""
    d = excerpt("r2-timeout-finetune-chatglm2-6")
    assert lead(d) == "C10D-STORE-BARRIER", ids(d)
    full = diagnose_lines(["RuntimeError: Timed out initializing process group in store based barrier on rank: 0, for key: store_based_barrier_key:1 (world_size=4, worker_count=1, timeout=0:30:00)"], "full")
    assert lead(full) == "C10D-STORE-BARRIER"
    assert full.first is not None and "Only 1 of 4 ranks" in full.first.cause


def test_a_whole_one_rank_console_does_not_claim_other_ranks_were_elsewhere() -> None:
    """The real H100 capture of a one-GPU torchrun job whose rank 0 timed out in an
    ALLREDUCE (tests/fixtures/job/h100-hang-after-watchdog.log): torchrun's own failure
    summary makes it a whole console, and it states no rank but 0 and no world, so nothing
    says other ranks exist: the watchdog leads, not LOGS-NOT-IN-COLLECTIVE.  A pasted
    fragment of one rank's watchdog lines (lm-eval-harness#1404) still names the ranks
    that were elsewhere."""
    path = Path(__file__).parent / "fixtures" / "job" / "h100-hang-after-watchdog.log"
    d = diagnose_lines(path.read_text().splitlines(), path.name)
    assert lead(d) == "WATCHDOG", ids(d)
    assert "LOGS-NOT-IN-COLLECTIVE" not in ids(d)
    fragment = excerpt("c-eval-imbalance-watchdog-lm-eval-harness-1404")
    assert lead(fragment) == "LOGS-NOT-IN-COLLECTIVE", ids(fragment)


def test_a_containers_own_eth0_on_one_host_is_no_bridge_between_nodes() -> None:
    """pytorch#152077 ran in one docker container (host 4d1a2ae696c8, eth0 172.17.0.2):
    docker's default network there is no multi-node bridge problem, so AR-BOOT-VIRTUAL is
    not a second error beside the cause.  The same address chosen on two hosts is."""
    d = excerpt("i-old-build-5090-pytorch-152077")
    assert lead(d) == "CUDA-NO-KERNEL", ids(d)
    assert "AR-BOOT-VIRTUAL" not in ids(d)
    two = [*CORPUS["i-old-build-5090-pytorch-152077"].lines,
           "7e2b3c4d5f60:4411:4411 [0] NCCL INFO Bootstrap : Using eth0:172.17.0.2<0>"]
    d = diagnose_lines(two, "two")
    assert "AR-BOOT-VIRTUAL" in ids(d), ids(d)


def test_nccl_tests_printing_its_summary_per_process_is_not_clean() -> None:
    """nccl-tests#27: all_reduce_perf built without MPI=1 and started by mpirun on two
    hosts printed its summary twice (under MPI only rank 0 prints it): each host ran a test
    of its own and nothing crossed the nodes.  Called clean before; now an honest unknown
    (a warning) that says so.  One summary, or two runs each under its own header, are not."""
    d = excerpt("d-launcher-nompi-build-nccltests-27")
    assert lead(d) == "LOGS-UNRECOGNIZED", ids(d)
    assert d.first is not None and d.first.severity == "warning"
    assert "summary more than once" in d.first.summary and "MPI=1" in d.first.cause
    lines = list(CORPUS["d-launcher-nompi-build-nccltests-27"].lines)
    assert lead(diagnose_lines(lines[:2], "one")) is None
    two_runs = ["# Using devices", *lines[:2], "# Using devices", *lines[3:]]
    assert lead(diagnose_lines(two_runs, "two")) is None
    for name in ("f-healthy-bw-ok-nccl-tests-119", "g-healthy-ring-allreduce-nccl-tests-252"):
        assert lead(excerpt(name)) is None, name


def test_what_a_shell_glibc_ssh_or_nccl_tests_print_for_a_failure_is_not_clean() -> None:
    """A process's death as the shell that ran it reports it (bash's job control, zsh, a
    bare 'Aborted' as horovod#1341's paste ends), glibc's heap check, nccl-tests' verdict on
    wrong results, ssh dropping a launcher's session: each was called clean alone."""
    aborted = CORPUS["d-gloo-iface-eth0-horovod-1341"].lines[-1]
    assert aborted.strip() == "Aborted"
    summary = CORPUS["d-launcher-nompi-build-nccltests-27"].lines[0]  # '# Out of bounds values : 0 OK'
    hard = [
        aborted,
        "[1]+  Killed                  torchrun --nnodes 2 train.py",
        "zsh: killed     python train.py",
        "Terminated",
        "*** Error in `python': double free or corruption (!prev): 0x000055d5c8e0a010 ***",
        summary.replace(": 0 OK", ": 3 FAILED"),
    ]
    for line in hard:
        d = diagnose_lines([line], "x")
        assert d.first is not None and d.first.severity == "error", (line, ids(d))
    for line in ("Connection to 10.0.0.2 closed by remote host.", "client_loop: send disconnect: Broken pipe"):
        d = diagnose_lines([line], "x")
        assert d.first is not None and d.first.id == "LOGS-UNRECOGNIZED", (line, ids(d))
    assert lead(diagnose_lines([summary], "ok")) is None  # 0 OK: nothing wrong


def _testbed_line(name: str, needle: str) -> str:
    """A line as the testbed capture tests/fixtures/logs/<name>.log holds it (verbatim
    after its 'node seconds stream | ' prefix)."""
    raw = (Path(__file__).parent / "fixtures" / "logs" / f"{name}.log").read_text().splitlines()
    return next(x.split(" | ", 1)[1] for x in raw if needle in x)


def test_a_run_stopped_from_outside_or_tearing_down_is_not_clean() -> None:
    """torchrun told to stop (the testbed's SIGTERM of a still-running node, as a scheduler
    or a user ending a hung job sends it) and torchrun stopping its workers (pytorch#150916's
    'Sending process 1365 closing signal SIGTERM') were called clean when a node's log held
    nothing else; they now lead as warnings."""
    told = _testbed_line("loopback_fallback", "death signal")
    d = diagnose_lines([told], "node2")
    assert lead(d) == "TORCHRUN-SIGTERM" and d.first is not None and d.first.severity == "warning", ids(d)
    closing = next(x for x in CORPUS["f-rdzv-closed-pytorch-150916"].lines if "closing signal" in x)
    d = diagnose_lines([closing], "agent")
    assert lead(d) == "LOGS-UNRECOGNIZED" and d.first is not None and d.first.severity == "warning", ids(d)


def test_a_gpu_fault_a_launch_that_never_ran_and_an_exception_cut_at_its_colon_fail() -> None:
    """The driver's Xid report, nvidia-smi without a driver, mpirun's non-zero summary, a
    module or script python cannot find, a missing header in a build, an exception whose
    message is on the next lines (amvur#2's 'ChildFailedError:' as pasted, without its
    trailing space) and ray's wrapped exception (ray#37461): each is a failure alone."""
    child = next(x for x in CORPUS["crash-amvur-2"].lines if x.rstrip().endswith("ChildFailedError:"))
    ray = next(x for x in CORPUS["h-hostname-loopback-ray-37461"].lines if "RayTaskError(" in x)
    for line in (
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.",
        "mpirun detected that one or more processes exited with non-zero status, thus causing",
        "/usr/bin/python: No module named torch.distributed.run",
        "python3: can't open file '/work/train.py': [Errno 2] No such file or directory",
        "csrc/nccl_ops.cpp:3:10: fatal error: nccl.h: No such file or directory",
        child.strip(),
        ray,
    ):
        d = diagnose_lines([line], "x")
        assert d.first is not None and d.first.severity == "error", (line, ids(d))


def test_a_loggers_bracketed_error_level_is_not_clean() -> None:
    """host-elastic#31's '[ERROR] 2020-01-17 00:55:01,724 coordinator_p2p: Rank: -1' (a
    logger's level in brackets) and Python logging's CRITICAL level were called clean alone;
    they keep a log from it now (soft: a warning)."""
    line = next(x for x in CORPUS["host-elastic-31"].lines if x.startswith("[ERROR]"))
    for text in (line, "CRITICAL:root:rank 3 lost its peer"):
        d = diagnose_lines([text], "x")
        assert lead(d) == "LOGS-UNRECOGNIZED" and d.first is not None and d.first.severity == "warning", (text, ids(d))
    assert lead(diagnose_lines(["[INFO] 2020-01-17 00:55:01,724 coordinator_p2p: Rank: 0"], "ok")) is None
