"""Round logs8 (issue 15): schedulers', launchers' and network facts the blind batch F
missed, read from the programs' own message formats, each checked on real excerpts quoted
from public threads (tests/fixtures/corpus/) - the ones it fires on, and the neighbours it
must leave alone."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from corpus_excerpts import excerpt, ids

from ddptui.logs.diagnose import LogDiagnosis, diagnose_lines


def lines(text: str) -> LogDiagnosis:
    return diagnose_lines(text.splitlines(), "paste")


def first(d: LogDiagnosis) -> str | None:
    return d.first.id if d.first else None


# ------------------------------------------------------------- Slurm's and runc's words


def test_srun_step_creation_is_read_from_slurms_format_whatever_the_job_id_looks_like() -> None:
    """Slurm's "Unable to create step for job %u: %m" with the id redacted in the paste
    (verl#548: two node names given to `srun -w`) and its older "Unable to create job
    step: %m" both name the step failure; the id, when there is one, is quoted."""
    d = excerpt("h-slurm-step-create-verl-548")
    assert first(d) == "SLURM-STEP-CREATE", ids(d)
    assert d.first is not None and "Requested node configuration is not available" in d.first.cause
    assert "scontrol show hostnames" in d.first.fix
    old = lines("srun: error: Unable to create job step: Job/step already completing or completed")
    assert first(old) == "SLURM-STEP-CREATE", ids(old)
    numbered = lines("srun: error: Unable to create step for job 4359715: More processors requested than permitted")
    assert numbered.first is not None and "scontrol show job 4359715" in numbered.first.fix


def test_a_container_whose_init_runc_saw_oom_killed_is_an_oom_kill_not_a_pod_that_did_not_start() -> None:
    """kubeflow/trainer#1661: the kubelet reports CreateContainerError, and the same event
    says runc's "container init was OOM-killed (memory limit too low?)": the OOM kill leads
    and the container error stays listed; a plain CreateContainerError stays the pod
    that did not start."""
    d = excerpt("h-k8s-oomkilled-kubeflow-trainer-1661")
    assert first(d) == "K8S-OOMKILLED", ids(d)
    assert "K8S-POD-NOT-STARTED" in ids(d)
    plain = lines(
        "training-operator-5cc8cdfdd6-fpthk   0/1     CreateContainerError   0          2m29s\n"
        '  Warning  Failed  113s  kubelet  Error: container create failed: time="2022-09-14T11:35:13Z" level=error msg="runc create failed: unable to start container process: exec: \\"torchrun\\": executable file not found in $PATH"'
    )
    assert first(plain) == "K8S-POD-NOT-STARTED", ids(plain)


# ------------------------------------------------------------------- launchers' host lists


def test_a_host_slots_spec_ssh_could_not_resolve_is_the_launchers_syntax_not_dns() -> None:
    """athena#139: horovodrun under an old Open MPI handed "localhost:4" to ssh; a name
    with ":N" is a host:slots spec, not a DNS miss.  A plain unresolvable name stays
    LAUNCH-SSH-RESOLVE (the corpus' eva#4 and volcano#2952)."""
    d = excerpt("g-launcher-oldompi-athena-139")
    assert first(d) == "LAUNCH-HOSTSPEC-AS-NAME", ids(d)
    assert d.first is not None and '"localhost:4"' in d.first.cause
    assert "localhost slots=4" in d.first.fix
    for name in ("r2e-host-eva-4", "r2e-host-volcano-2952"):
        assert first(excerpt(name)) == "LAUNCH-SSH-RESOLVE", name


# ------------------------------------------------------------ torch's port-in-use, by version


def test_the_store_port_in_use_is_named_by_torchs_own_log_prefix() -> None:
    """Before torch 2.4 the TCPStore's only backend logged "[W socket.cpp:436] [c10d] The
    server socket has failed to bind to [::]:50002 (errno: 98 ...)" (GR-MG#11: a leftover
    run held the port): the master port in use, not the legacy (non-libuv) backend of
    torch >= 2.4, whose c10 prefix carries a timestamp ("[W1122 13:52:25.57 socket.cpp")."""
    d = excerpt("g-port-inuse-lingering-grmg-11")
    assert first(d) == "PORT-INUSE", ids(d)
    assert d.first is not None and "sport = :50002" in d.first.fix
    new = lines("[W1122 13:52:25.570934259 socket.cpp:752] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).")
    assert first(new) == "PORT-INUSE-LEGACY", ids(new)


# ------------------------------------------------------ InfiniBand NCCL could not use


def test_nccl_on_sockets_over_ipoib_after_failing_to_open_verbs_is_ib_unused_not_clean() -> None:
    """sglang#1427: the container had no libibverbs, so NCCL fell back to NET/Socket on
    ib0 (an IPoIB interface): IB hardware the all-reduces do not use.  The log holds no
    error, so the fact leads as a warning rather than a clean bill.  The same "Failed to
    open libibverbs" beside sockets on an Ethernet interface (detectron2#4730, a machine
    without IB) stays healthy noise."""
    d = excerpt("h-ib-no-verbs-sglang-1427")
    assert d.first is not None and d.first.id == "AR-IB-UNUSED", ids(d)
    assert d.first.severity == "warning"
    assert any("libibverbs" in e for e in d.first.evidence) and any("ib0" in e for e in d.first.evidence)
    healthy = excerpt("a-healthy-libibverbs-warn-socket-detectron2-4730")
    assert "AR-IB-UNUSED" not in ids(healthy) and not healthy.failed, ids(healthy)
    # MeshTransformer#38: a working one-node run on an IB machine prints the same two
    # lines and names no rank: the same fact, a warning only, never a failure
    one_node = excerpt("b-healthy-ibverbs-warn-mpi-meshtransformer-38")
    assert not one_node.failed and all(f.severity != "error" for f in one_node.findings)


# ------------------------------------------------------------- a rank killed while loading


def test_a_rank_sigkilled_while_loading_its_model_is_the_host_oom_killer() -> None:
    """AnomalyGPT#43: DeepSpeed's launcher saw a rank end with return code -9 right after
    "Initializing language decoder from ../pretrained_ckpt/..." (host RAM too small): the
    kernel's OOM killer leads, the launcher's SIGKILL line stays listed.  SIGKILLs with no
    loading line (the corpus' rank_crash excerpts) stay C10D-CHILD-SIGKILL, and a scheduler
    that names the kill (Slurm's oom-kill, 3DRS#7) keeps its lead."""
    d = excerpt("g-rank-hostoom-anomalygpt-43")
    assert d.first is not None and d.first.id == "HOST-OOM-KILL", ids(d)
    assert "C10D-CHILD-SIGKILL" in ids(d)
    assert any("Initializing language decoder" in e for e in d.first.evidence)
    assert "loaded its model or checkpoint" in d.first.summary
    for name in ("crash-tomotwin-122", "crash-acumen-4", "r2c-crash-qwenvl-79"):
        assert excerpt(name).first.id == "C10D-CHILD-SIGKILL", name  # type: ignore[union-attr]
    slurm = excerpt("r2c-crash-3drs-7")
    assert slurm.first is not None and slurm.first.id != "HOST-OOM-KILL", ids(slurm)
    # the same kill after a loading line under Slurm's own oom-kill report: Slurm leads
    both = lines(
        "Loading checkpoint shards:  50%|#####     | 1/2 [00:31<00:31, 31.2s/it]\n"
        "slurmstepd: error: Detected 1 oom_kill event in StepId=2236.0. Some of the step tasks have been OOM Killed.\n"
        "    exitcode  : -9 (pid: 1181)"
    )
    assert both.first is not None and both.first.id == "SLURM-OOM", ids(both)


# ------------------------------------------------------ a traceback pasted without its error


def test_traceback_frames_without_their_exception_are_an_honest_unknown_not_clean() -> None:
    """meta-pytorch/data#1142: the paste holds only the frames of a traceback that ends in
    dist.new_group(backend="gloo") (the nodes resolved to loopback); no line names the
    error.  Python's frame lines say something failed: an honest unknown, not a clean bill.
    A healthy log that prints no frame stays clean."""
    d = excerpt("h-gloo-loopback-meta-pytorch-data-1142")
    assert d.first is not None and d.first.id == "LOGS-UNRECOGNIZED", ids(d)
    clean = lines('  with open("run.py") as f:  # a quoted line of code is no frame\nEpoch 1: loss 0.31')
    assert clean.first is None, ids(clean)


def test_horovodruns_own_host_list_check_names_the_list_not_an_unknown() -> None:
    """horovod#1325: horovodrun 0.17.0's check of -H (its pattern allowed no ".") rejected
    "10.0.0.3:1"; its ValueError is horovodrun's own format string. ([NEW] in the corpus:
    counted wrong there while its label stays as collected.)"""
    d = excerpt("g-launcher-ip-host-horovod-1325")
    assert d.first is not None and d.first.id == "LAUNCH-HOROVOD-HOSTS", ids(d)
    assert "horovod#1327" in d.first.cause


def test_slurms_own_error_format_is_never_called_clean() -> None:
    """Slurm's commands write every error as "<program>: error: <message>" (its log.c);
    a message no signature knows (a gres or CPU request srun cannot satisfy, salloc's
    account check) is an honest unknown that fails the log, not a clean bill.  srun's
    ioctl(TIOCGWINSZ) complaint, printed by any srun without a terminal, stays silent."""
    for text in (
        "srun: error: CPU count per node can not be satisfied",
        "salloc: error: Job submit/allocate failed: Invalid account or account/partition combination specified",
        "slurmstepd: error: *** STEP 123.0 ON gpu01 CANCELLED AT 2024-01-01T00:00:00 ***",
    ):
        d = lines(text)
        assert d.first is not None and d.failed, (text, ids(d))
    quiet = lines("srun: error: ioctl(TIOCGWINSZ): Inappropriate ioctl for device\nEpoch 1: loss 0.31")
    assert quiet.first is None and not quiet.failed, ids(quiet)


# ------------------------------------------------------------ host memory: Ray, the kernel


def test_rays_memory_monitor_kill_is_host_memory_and_leads_the_launchers_exit() -> None:
    """Ray's memory monitor kills a worker before the kernel would; its own words (a
    worker-exit report pasted in a public repository's notes, Ray 2.x) name host RAM.
    Beside torchrun's SIGKILL summary it leads; the kernel's own OOM line does too."""
    d = lines(
        "Worker exit type: SYSTEM_ERROR Worker exit detail: Task was killed due to the node running low on memory.\n"
        "    Memory on the node (IP: 172.17.0.2, ID: 3a4b60759256926fd0e84a9ff596dab3d7be854134107ef21b0e0260) where the task was running was 32.91GB / 33.28GB (0.988698), which exceeds the memory usage threshold of 0.969955.\n"
    )
    assert first(d) == "RAY-OOM-KILL", ids(d)
    after = lines(
        "    exitcode  : -9 (pid: 1181)\n"
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory."
    )
    assert first(after) == "RAY-OOM-KILL" and "C10D-CHILD-SIGKILL" in ids(after), ids(after)
    kernel = lines(
        "    exitcode  : -9 (pid: 31337)\n"
        "[Tue May  7 10:11:12 2024] Out of memory: Killed process 31337 (python) total-vm:123456789kB, anon-rss:98765432kB"
    )
    assert first(kernel) == "HOST-OOM-KILL", ids(kernel)


def test_vllms_one_address_per_node_check_names_nodes_that_share_an_address() -> None:
    """vLLM's Ray executor check added for vllm#7699 (the same VLLM_HOST_IP on every node),
    as its source formats it (no paste of it was found in the batches)."""
    d = lines(
        "RuntimeError: Every node should have a unique IP address. Got 2 nodes with node ids "
        "['e161bb4b4023b8fe68152672794804629f3995241b7cc60fd9fe8ae2', '0fcb74c428a1f8e66d45d27879bfc50cc73e80bf268f27ded6284b5c'] "
        "and 1 unique IP addresses {'10.0.0.5'}. Please check your network configuration. If you set `VLLM_HOST_IP` "
        "environment variable, make sure it is unique for each node."
    )
    assert first(d) == "HOST-IP-NOT-UNIQUE", ids(d)
    assert d.first is not None and "counted 2 nodes but 1 distinct addresses" in d.first.cause


def test_open_mpis_and_rays_own_failure_reports_are_never_called_clean() -> None:
    """Open MPI's help text when it cannot start a rank (a paste on the Open MPI users'
    list) and the raylet's report of a dead worker (a verl run's log) hold no exception
    and no signature's line: each is an honest unknown that fails the log."""
    for text in (
        "--------------------------------------------------------------------------\n"
        "mpirun was unable to launch the specified application as it could not access\n"
        "or execute an executable:\n"
        "Executable: /home/gordon/Desktop/openmpi-1.3.3/examples/hello_c.out\n"
        "Node: node1\n"
        "while attempting to start process rank 1.",
        "(WorkerDict pid=150008) log_probs = logprobs_from_logits(logits=logits_rmpad, labels=input_ids_rmpad_rolled), shape: torch.Size([6235])\n"
        "(raylet) A worker died or was killed while executing a task by an unexpected system error. To troubleshoot the problem, check the logs for the dead worker. RayTask ID: ffffffffffffffff8c22c88e5dbb3e566fc0518001000000 Worker ID: 1efd167431990baae8361c1abf2e5773e42430b6a530fd0bf81be063",
    ):
        d = lines(text)
        assert d.first is not None and d.first.id == "LOGS-UNRECOGNIZED" and d.failed, (text[:60], ids(d))


# ------------------------------------------------------------------ Kubernetes' own tables


def test_kubernetes_warning_events_and_failed_pod_statuses_are_never_called_clean() -> None:
    """`kubectl describe pod`'s events (TYPE REASON AGE FROM MESSAGE) of type Warning that
    no signature knows (a sandbox the kubelet could not create, from a public cluster
    notes file) keep the log from being called clean; `kubectl get pods` rows whose
    STATUS is Error (a training operator's workers, from a public issue's paste) fail it.
    Normal events and Running/Completed rows stay silent."""
    events = lines(
        "Events:\n"
        "  Type     Reason                  Age    From     Message\n"
        "  ----     ------                  ----   ----     -------\n"
        "  Warning  FailedCreatePodSandBox  3m57s  kubelet  Failed to create pod sandbox: open /run/systemd/resolve/resolv.conf: no such file or directory\n"
        '  Normal   Pulled                  3m42s  kubelet  Container image "registry.k8s.io/etcd:3.5.9-0" already present on machine'
    )
    assert events.first is not None and events.first.id == "LOGS-UNRECOGNIZED", ids(events)
    pods = lines(
        "tftest-ps-0       1/1     Running             0          3s    192.168.221.137   las1     <none>           <none>\n"
        "tftest-worker-1   1/1     Running             0          3s    192.168.221.183   las1     <none>           <none>\n"
        "tftest-worker-0   0/1     Error               0          13s   192.168.221.129   las1     <none>           <none>"
    )
    assert pods.first is not None and pods.first.id == "LOGS-UNRECOGNIZED" and pods.failed, ids(pods)
    fine = lines(
        "tftest-worker-0   1/1     Running             1 (3s ago)   14s   192.168.221.140   las1     <none>           <none>\n"
        "tftest-worker-1   0/1     Completed           0          2m    192.168.221.183   las1     <none>           <none>\n"
        '  Normal   Pulled     3m42s  kubelet  Container image "registry.k8s.io/etcd:3.5.9-0" already present on machine'
    )
    assert fine.first is None and not fine.failed, ids(fine)


def test_the_kernels_oom_report_is_read_from_its_first_and_summary_lines() -> None:
    """The kernel's OOM report (mm/oom_kill.c: dump_header's "X invoked oom-killer:
    gfp_mask=...", dump_oom_summary's "oom-kill:constraint=...,task=X,pid=N") was called
    clean when the "Killed process" line was not pasted (a docker --memory run's
    kern.log, grepped for "oom", in a public report)."""
    d = lines(
        "$ grep oom /var/log/kern.log\n"
        "[ 1016.926650] python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0\n"
        "[ 1016.926670]  oom_kill_process.cold+0xb/0x10\n"
        "[ 1016.926715] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name"
    )
    assert first(d) == "HOST-OOM-KILL" and d.failed, ids(d)
    summary = lines("oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/init.scope,task=python,pid=14078,uid=1000")
    assert first(summary) == "HOST-OOM-KILL", ids(summary)
    assert "<" not in (summary.first.cause if summary.first else "<")  # no unfilled placeholder


# ------------------------------------------------------------------------- command lines


def test_the_launchers_local_rank_argument_and_argparse_errors_are_read() -> None:
    """torch.distributed.launch (torch >= 2.0) appends --local-rank=N, which a script
    declaring only --local_rank rejects (a public training repository's notes: "TCL:
    error: unrecognized arguments: --local-rank=1" under its usage line); any other
    argparse error of a launcher or script (horovodrun's -H without a value) fails the
    log as an honest unknown; Open MPI's "mpirun: Error:" too."""
    d = lines(
        "           [--start_epoch N] [--save_freq SAVE_FREQ] [--eval_freq EVAL_FREQ] [--num_workers NUM_WORKERS] [--pin_mem] [--dist_eval] [--world_size WORLD_SIZE] [--local_rank LOCAL_RANK] [--dist_on_itp]\n"
        "           [--dist_url DIST_URL]\n"
        "TCL: error: unrecognized arguments: --local-rank=1"
    )
    assert first(d) == "LAUNCH-LOCAL-RANK-ARG" and d.failed, ids(d)
    assert d.first is not None and "torchrun" in d.first.fix
    for text in ("horovodrun: error: argument -H/--hosts: expected one argument", 'mpirun: Error: unknown option "--map-by"'):
        other = lines(text)
        assert first(other) == "LOGS-UNRECOGNIZED" and other.failed, (text, ids(other))


def test_a_server_that_cannot_bind_its_port_fails_the_log() -> None:
    """uvicorn (vLLM's and SGLang's API server) prints "Application startup complete"
    and then "ERROR: [Errno 98] error while attempting to bind on address (...): address
    already in use" (a public project's notes): the server never listened, the log fails
    instead of ending as a warning."""
    d = lines(
        "INFO:     Started server process [56195]\n"
        "INFO:     Waiting for application startup.\n"
        "INFO:     Application startup complete.\n"
        "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use\n"
        "INFO:     Application shutdown complete."
    )
    assert d.first is not None and d.failed, ids(d)
