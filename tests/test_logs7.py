"""Round logs7 (issue 15): general mechanisms for the watchdog/desync, cross-rank and
version kinds the blind batches missed, each checked on real excerpts quoted from public
threads (tests/fixtures/corpus/) - the ones it fires on, and the neighbours it must leave
alone."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from pathlib import Path

from corpus_excerpts import CORPUS, excerpt, ids

from ddptui.logs.diagnose import diagnose_lines

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
    # what the watchdog's own line says of where the run was: well into it (SeqNum 3348),
    # or a one-element ALLREDUCE early on (lm-eval-harness#1404: one GPU still evaluating)
    assert "well into the run" in excerpt("b-timeout-validation-rank0-finetrainers-114").first.summary  # type: ignore[union-attr]
    early = excerpt("c-eval-imbalance-watchdog-lm-eval-harness-1404").first
    assert early is not None and "a barrier()-sized collective early in the run" in early.summary


def test_a_timeout_too_short_for_any_work_stays_the_watchdog() -> None:
    """instructlab#520 set the timeout to 1 ms on purpose: no rank was elsewhere, the
    timeout itself is the cause."""
    d = excerpt("timeout-instructlab-520")
    assert d.first is not None and d.first.id == "WATCHDOG"
    # its first collective (SeqNum=1) also connects NCCL's communicator: with a 30-minute
    # timeout it is no rank elsewhere (lone_waiter) but the transport hanging on that one
    # host (P2P-HANG, tests/test_p2p_hang.py: four public threads established it)
    lines = [x.replace("Timeout(ms)=1)", "Timeout(ms)=1800000)") for x in CORPUS["timeout-instructlab-520"].lines]
    d = diagnose_lines(lines)
    assert d.first is not None and d.first.id == "P2P-HANG", ids(d)
    assert "LOGS-NOT-IN-COLLECTIVE" not in ids(d), ids(d)


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


# ------------------------------------------------------- NCCL releases and the GPU


GPU = Path(__file__).parent / "fixtures" / "gpu-h100"  # the real H100 captures


def _h100_lines() -> tuple[str, str]:
    """The real H100 capture's nccl-tests device line and NCCL's version line."""
    dev = next(x for x in (GPU / "ddptui/nccl-tests.txt").read_text().splitlines() if "NVIDIA H100" in x)
    ver = next(x for x in (GPU / "nccl-env/algo.log").read_text().splitlines() if "NCCL INFO NCCL version" in x)
    return dev, ver


def test_nccl_2_25_on_a_blackwell_geforce_is_the_release_bug_2_26_2_fixed() -> None:
    """nccl-tests#287: RTX 5090s, NCCL 2.25.1 prints "ncclMaxSharedMem 82240 exceeds
    device/fn maxSharedMem 79856" (an INFO line only 2.25 has) and the test fails; NCCL
    2.26.2's release notes name this issue ("Fix shared memory usage on recent Blackwell
    GPUs").  It was called clean before: the log holds no error line."""
    d = excerpt("f-device-nccl-tests-287")
    assert d.first is not None and d.first.id == "NCCL-BLACKWELL-SHMEM", ids(d)
    assert d.failed
    assert "82240" in d.first.cause and "79856" in d.first.cause
    assert "2.26.2" in d.first.fix


def test_an_nccl_older_than_the_gpu_explains_its_generic_errors() -> None:
    """The real H100 capture's device line (nccl-tests) and NCCL's version line, with the
    version the milabench#183 container ran (2.14.3; H100 support came in 2.15.1 per
    NVIDIA/nccl's 2.15.1-1 release) before that thread's pasted failure: the version and
    the GPU explain NCCL's "Failed to find reverse path".  With the capture's own version
    (2.28.9) nothing changes; an old NCCL on an H100 with no failure is no finding."""
    dev, ver = _h100_lines()
    failure = list(CORPUS["e-nccl-too-old-h100-milabench-183"].lines)
    old = ver.replace("2.28.9", "2.14.3")
    d = diagnose_lines([dev, old, *failure])
    assert d.first is not None and d.first.id == "LOGS-NCCL-PREDATES-GPU", ids(d)
    assert "NCCL 2.14.3 on H100 80GB HBM3 (sm_90), supported from NCCL 2.15.1" in d.first.summary
    assert "da8152e5" in d.first.cause
    assert "NCCL-TOPO-GRAPH" in ids(d)
    d = diagnose_lines([dev, ver, *failure])
    assert d.first is not None and d.first.id == "NCCL-TOPO-GRAPH"
    assert "LOGS-NCCL-PREDATES-GPU" not in ids(d)
    assert diagnose_lines([dev, old]).first is None
    # CUDA-NO-KERNEL says the same of the GPU code itself and keeps its lead
    no_kernel = "vm:1717:1750 [0] enqueue.cc:1564 NCCL WARN Cuda failure 'no kernel image is available for execution on the device'"
    d = diagnose_lines([dev, old, no_kernel])
    assert d.first is not None and d.first.id == "CUDA-NO-KERNEL", ids(d)
    assert "LOGS-NCCL-PREDATES-GPU" in ids(d)


def test_gpuarch_yaml_is_validated() -> None:
    import pytest

    from ddptui.diagnosis.gpuarch import GpuArchError, arch_of, parse_gpuarch

    assert arch_of("H100 80GB HBM3").arch == "sm_90"  # type: ignore[union-attr]
    assert arch_of("GeForce RTX 5090").arch == "sm_120"  # type: ignore[union-attr]
    assert arch_of("Tesla V100-SXM2-32GB") is None
    with pytest.raises(GpuArchError, match=r"archs\[1\]: nccl_since '2\.15' is not a version"):
        parse_gpuarch("archs:\n- {arch: sm_90, nccl_since: '2.15', source: x, gpus: ['H100']}\n")
    with pytest.raises(GpuArchError, match=r"archs\[1\]: keys must be"):
        parse_gpuarch("archs:\n- {arch: sm_90}\n")


def test_nvshmem_ipc_between_two_hosts_of_one_name() -> None:
    """DeepEP#316: two nodes with the same host name; NVSHMEM took the remote PE for a
    local one and its socket exchange failed ("No such file or directory", then its
    NVSHMEMI_IPC_CHECK's "Fatal IPC Failure").  Called clean before."""
    d = excerpt("d-hostname-same-nvshmem-DeepEP-316")
    assert d.first is not None and d.first.id == "NVSHMEM-IPC", ids(d)
    assert d.failed and "same one" in d.first.cause and "distinct host name" in d.first.fix


def test_gloos_own_timeout_from_the_waiting_side() -> None:
    """Testbed capture (rank_skips_collective: node2's rank sleeps instead of calling
    all_reduce): rank 1's gloo recv times out after 15 s.  Its line alone, as a one-rank
    paste, names the ranks elsewhere; beside a peer that closed the connection it does not
    (that peer died)."""
    raw = (Path(__file__).parent / "fixtures/logs/rank_skips_collective.log").read_text().splitlines()
    line = next(x.split(" | ", 1)[1] for x in raw if "for recv operation to complete" in x)
    d = diagnose_lines([line])
    assert d.first is not None and d.first.id == "LOGS-NOT-IN-COLLECTIVE", ids(d)
    assert "rank 1 waits in a gloo send/recv past its 15 s timeout" in d.first.summary
    assert "GLOO-OP-TIMEOUT" in ids(d)
    closed = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.85.0.3]:21367"
    d = diagnose_lines([closed, line])
    assert d.first is not None and d.first.id != "LOGS-NOT-IN-COLLECTIVE", ids(d)


def test_a_later_line_of_the_same_timeout_names_the_operation() -> None:
    """pytorch#141069's rank 2 lines in the other order (torch prints "Timeout at NCCL
    work: 19" and the WorkNCCL line from two threads): the operation is still named."""
    watchdog, work = CORPUS["b-desync-iterable-uneven-pytorch-141069"].lines[:2]
    d = diagnose_lines([work, watchdog])
    assert d.first is not None and d.first.id == "LOGS-NOT-IN-COLLECTIVE", ids(d)
    assert "rank 2 waits in ALLREDUCE (SeqNum 19)" in d.first.summary
    assert "OpType=ALLREDUCE" in d.first.evidence[0]  # the line that names it is quoted
