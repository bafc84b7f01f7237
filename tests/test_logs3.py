"""Round logs3 (issue 15): general mechanisms for kinds of failure the blind batches
missed, each checked on real excerpts quoted from public threads (tests/fixtures/corpus/)
- the ones it fires on, and the neighbours it must leave alone."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from corpus_excerpts import CORPUS, excerpt

from ddptui.logs.diagnose import diagnose_lines


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
        assert "rank 0 never reports it" in d.first.summary
        assert "evaluation or validation on rank 0" in d.first.cause
        assert "WATCHDOG" in [f.id for f in d.findings]  # the timeout itself stays listed
    # ranks 2 and 3 time out in the final barrier of a slow, uneven checkpoint consolidation
    d = excerpt("c-consolidation-barrier-timeout-automodel-1038")
    assert d.first is not None and d.first.id == "LOGS-NOT-IN-COLLECTIVE"
    assert "ranks 0, 1 never report it" in d.first.summary


def test_a_timeout_after_the_run_ended() -> None:
    """Lightning's "`Trainer.fit` stopped" then rank 0's watchdog: rank 0 entered a
    barrier (a rank-0-only save) the finished ranks never call (autocast#381)."""
    d = excerpt("b-desync-save-ckpt-rank0-autocast-381")
    assert d.first is not None and d.first.id == "LOGS-NOT-IN-COLLECTIVE"
    assert "after the run ended" in d.first.summary
    assert "had left the loop" in d.first.cause and "Trainer.fit" in d.first.cause


def test_ranks_from_0_up_timing_out_together_stay_a_watchdog_timeout() -> None:
    """(A one-rank paste leads with LOGS-NOT-IN-COLLECTIVE since round logs7: see
    tests/test_logs7.py.)"""
    # every rank of the world timing out together names no absent rank
    lines = [
        f"[rank{r}]:[E ProcessGroupNCCL.cpp:563] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600363 milliseconds before timing out."
        for r in (0, 1)
    ]
    d = diagnose_lines(lines)
    assert d.first is not None and d.first.id == "WATCHDOG"


def test_a_rank_waiting_for_rank_0s_nccl_id_until_the_timeout() -> None:
    """Rank 7's wait for the ncclUniqueId rank 0 publishes timed out (Finetune-ChatGLM2-6B
    #13: rank 0 was still tokenising): rank 0 was elsewhere, as in a watchdog timeout."""
    d = excerpt("c-uid-timeout-slow-tokenize-chatglm2-13")
    assert d.first is not None and d.first.id == "LOGS-NOT-IN-COLLECTIVE"
    assert "rank 7 waits in NCCL's communicator setup" in d.first.summary
    assert "rank 0 never reports it" in d.first.summary
    assert "C10D-UIDGET" in [f.id for f in d.findings]


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


# ------------------------------------------------- a log that stops where a job waits


def test_a_single_host_hang_at_the_first_step_is_p2p_through_an_iommu() -> None:
    """rccl-tests printed its table header and no size (two MI100s, fixed by iommu=pt,
    ROCm/rccl#1129); vLLM's first progress bar stayed at 0 after NCCL connected the two
    GPUs over SHM (A6000s, fixed by disabling ACS/IOMMU, vllm#9920)."""
    d = excerpt("b-iommu-pt-mi100-rccl-1129")
    assert d.first is not None and d.first.id == "P2P-IOMMU" and d.first.severity == "warning"
    assert "benchmark's first size" in d.first.summary
    assert "ranks 0, 1 all run on deep-visionscaper3" in d.first.summary
    d = excerpt("b-p2p-acs-iommu-vllm-9920")
    assert d.first is not None and d.first.id == "P2P-IOMMU"
    assert "progress bar still at 0" in d.first.summary and "over SHM only" in d.first.summary


def test_a_log_that_stops_in_a_wait_is_not_called_clean() -> None:
    """Lightning announced rank 0 of 8 and nothing registered after (a stray NODE_RANK,
    Lightning#5651); torch set up the process group and nothing ran (pytorch#88000: only
    rank 0 called the broadcast).  Nothing says why: an honest unknown, as a warning."""
    for name, what in (
        ("c-node-rank-env-hang-lightning-5651", "Lightning's process registration"),
        ("b-rank0-only-broadcast-pytorch-88000", "the process group's setup"),
        ("b-trainer-num-nodes-missing-lightning-3029", "torchrun's rendezvous"),
    ):
        d = excerpt(name)
        assert d.first is not None and d.first.id == "LOGS-UNRECOGNIZED", name
        assert d.first.severity == "warning" and what in d.first.summary, name
        assert "a hang there, or a log cut there" in d.first.cause


def test_a_step_that_finished_or_a_log_that_went_on_is_no_stall() -> None:
    start = "initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/2"
    assert diagnose_lines([start]).first is not None
    done = [start, "initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/2", "All distributed processes registered. Starting with 2 processes"]
    assert diagnose_lines(done).first is None
    went_on = [start, *(f"epoch 0 step {i} loss 0.5" for i in range(12))]
    assert diagnose_lines(went_on).first is None
    # a progress bar that moved on in the same line (tqdm's carriage returns) did not stall
    moved = "Processed prompts:   0%|          | 0/16 [00:00<?, ?it/s]\rProcessed prompts: 100%|##########| 16/16 [00:02<00:00, 7.1it/s]"
    assert diagnose_lines([moved]).first is None
    # no healthy excerpt of the corpus stops in a wait (round 13 AA's two healthy logs with
    # NCCL warnings a run recovered from, a net plugin's connect retries and the return
    # traces of a socket abort at teardown, are silent since logs37: tests/test_logs37.py)
    soft: set[str] = set()
    for e in CORPUS.values():
        if e.category == "healthy":
            d = diagnose_lines(list(e.lines), e.id)
            assert all(f.id != "P2P-IOMMU" and "stops in" not in f.cause for f in d.findings), e.id
            unknown = [f for f in d.findings if f.id == "LOGS-UNRECOGNIZED"]
            assert not unknown or (e.id in soft and [f.severity for f in unknown] == ["warning"]), e.id


def test_a_running_jobs_log_is_not_a_stall() -> None:
    """`ddptui job` reads the logs of a job still running: they always stop somewhere."""
    from ddptui.job.joblogs import classify

    first, _ = classify(["initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/8"], "node0:rank0")
    assert first is None


# ------------------------------------------------- the name c10d was given, the address it tried


def test_the_master_name_resolved_to_another_address() -> None:
    """A numeric --rdzv_endpoint looked up backwards through /etc/hosts (pytorch#85300:
    given 192.168.1.99, c10d tried fake-host); a short Slurm host name completed to the
    admin network's name (UQ-RCC/hpc-docs#2: bun003 -> bun003.admin)."""
    d = excerpt("b-hostname-reverse-dns-pytorch-85300")
    assert d.first is not None and d.first.id == "LOGS-NAME-ELSEWHERE"
    assert "given (192.168.1.99, 1234) and tried fake-host:1234" in d.first.summary
    assert "looked up backwards" in d.first.cause
    d = excerpt("b-short-hostname-admin-net-uq-hpc-docs-2")
    assert d.first is not None and d.first.id == "LOGS-NAME-ELSEWHERE"
    assert "short name bun003 was completed to bun003.admin" in d.first.cause
    assert "PORT-NOROUTE" in [f.id for f in d.findings]


def test_an_address_tried_for_its_own_name_is_no_finding() -> None:
    lines = [
        "[W socket.cpp:558] [c10d] The client socket has failed to connect to [10.0.0.5]:29500 (errno: 113 - No route to host).",
        "[E socket.cpp:610] [c10d] The client socket has failed to connect to any network address of (10.0.0.5, 29500).",
        "[W socket.cpp:558] [c10d] The client socket has failed to connect to [node7.cluster]:29500 (errno: 111 - Connection refused).",
        "[E socket.cpp:610] [c10d] The client socket has failed to connect to any network address of (node7.cluster, 29500).",
    ]
    d = diagnose_lines(lines)
    assert d.first is not None and d.first.id != "LOGS-NAME-ELSEWHERE"
    assert "LOGS-NAME-ELSEWHERE" not in [f.id for f in d.findings]


def test_watchdog_lines_without_the_operation_join_the_rank_that_names_it() -> None:
    """torch 2.2+'s "failure detected by watchdog at work sequence id: N" names no
    operation: a rank saying only that waits in the collective another rank names at N
    (NVIDIA-NeMo/Automodel#1038's lines, rank 3's WorkNCCL line left out)."""
    lines = [x for x in CORPUS["c-consolidation-barrier-timeout-automodel-1038"].lines if not ("[rank3]" in x and "OpType" in x)]
    d = diagnose_lines(lines)
    assert d.first is not None and d.first.id == "LOGS-NOT-IN-COLLECTIVE"
    assert "ranks 2, 3 wait in ALLGATHER (SeqNum 493); ranks 0, 1 never report it" in d.first.summary
    # ranks 1, 2, 3 in the work torch names at 19, the operation from rank 2's line
    d = excerpt("b-desync-iterable-uneven-pytorch-141069")
    assert d.first is not None and "ranks 1, 2, 3 wait in ALLREDUCE (SeqNum 19); rank 0 never reports it" in d.first.summary


def test_a_fabric_error_keeps_the_lead_over_ranks_implied_absent() -> None:
    """With a failure of the fabric in the log, ranks that report no timeout may be the
    broken ones: rank 0 is not implied elsewhere."""
    lines = [
        *CORPUS["timeout-myria3d-123"].lines,
        "node1:1234:1300 [1] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<48384> with error 12, opcode 0, len 0, vendor err 129 (Recv)",
    ]
    d = diagnose_lines(lines)
    assert d.first is not None and d.first.id != "LOGS-NOT-IN-COLLECTIVE", d.first.id
    assert "LOGS-NOT-IN-COLLECTIVE" not in [f.id for f in d.findings]


def test_nccls_system_error_with_ranks_connected_over_shm_is_dev_shm() -> None:
    """Real lines put together: NCCL's SHM channels of vllm#9920, then DEKR#18's system
    error (its two lines alone stay an honest unknown, above)."""
    shm = [x for x in CORPUS["b-p2p-acs-iommu-vllm-9920"].lines if "via SHM" in x]
    d = diagnose_lines([*shm, *CORPUS["c-docker-ipc-host-dekr-18"].lines])
    assert d.first is not None and d.first.id == "SHM-SIZE"
    assert "NCCL connects ranks over SHM" in d.first.summary


def test_the_store_port_in_use_when_a_terminal_wrapped_the_line() -> None:
    """torch's EADDRINUSE message wrapped before "network address." (sglang#39611): its
    tail ("port: N, useIpv6: ..., code: -98, name: EADDRINUSE") is torch's own format."""
    d = excerpt("b-nccl-port-dropped-race-sglang-39611")
    assert d.first is not None and d.first.id == "PORT-INUSE"
    assert "45623" in d.first.fix


def test_a_progress_bar_of_other_work_as_long_as_the_timeout() -> None:
    """One rank's watchdog after a progress bar that had run 30:01 of a 30-minute timeout
    (accelerate#314: one process indexed a 200 GB file): the rank printing the bar was
    elsewhere.  A training loop's own bar says nothing of the kind."""
    d = excerpt("timeout-accelerate-314")
    assert d.first is not None and d.first.id == "LOGS-NOT-IN-COLLECTIVE"
    assert "rank 6 waits in ALLREDUCE; meanwhile a progress bar had run 30 min" in d.first.summary
    assert "about the 30-minute timeout" in d.first.cause
    bar, watchdog = CORPUS["timeout-accelerate-314"].lines[:2]
    # (since logs7 a one-rank timeout leads with LOGS-NOT-IN-COLLECTIVE anyway, but
    # without naming the bar's rank as the one elsewhere)
    d = diagnose_lines([bar.replace(" 35%|", "Epoch 3:  35%|"), watchdog])
    assert d.first is not None and "meanwhile" not in d.first.summary
    short = bar.replace("[30:01<", "[03:01<")  # a bar much shorter than the timeout
    assert "meanwhile" not in diagnose_lines([short, watchdog]).first.summary  # type: ignore[union-attr]
