"""Round logs6 (issue 15): the schedulers', containers' and launchers' own messages
(Slurm's srun and slurmstepd, Kubernetes' pod status and events, OpenSSH under
pdsh/mpirun/deepspeed, Open MPI's help texts) and a log that stops in NCCL's bootstrap.
Each rule is checked on lines pasted in public threads (the URL beside each) or on
corpus excerpts (tests/fixtures/corpus/), and on the neighbours it must leave alone."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from pathlib import Path

from corpus_excerpts import excerpt

from ddptui.logs.diagnose import diagnose_lines


def lead(lines: list[str]) -> str | None:
    d = diagnose_lines(lines)
    return d.first.id if d.first is not None else None


def ids(lines: list[str]) -> set[str]:
    return {f.id for f in diagnose_lines(lines).findings}


# ------------------------------------------------- Slurm


def test_slurm_memory_kill_in_the_older_wordings() -> None:
    """slurmstepd's jobacct ("Job N exceeded memory limit (x > y), being killed") and
    its cgroup's "Exceeded job memory limit" are Slurm's memory kill, and lead the
    job's cancel line (coqui-ai/STT#2238)."""
    lines = [
        "Epoch 0 |   Training | Elapsed Time: 0:00:15 | Steps: 93 | Loss: 24.580695",
        "slurmstepd: error: Job 7518 exceeded memory limit (626359956 > 512000000), being killed",
        "slurmstepd: error: Exceeded job memory limit",
        "slurmstepd: error: *** JOB 7518 ON xantipa CANCELLED AT 2022-06-10T17:11:35 ***",
    ]
    assert lead(lines) == "SLURM-OOM"
    assert "SLURM-CANCELLED" in ids(lines)
    # Slurm's "at some point" warning follows jobs that succeeded (page cache counted):
    # no failure (chaos/slurm#54, galaxyproject/galaxy#2309)
    ok = diagnose_lines(["52428800 bytes (52 MB) copied, 0.459204 s, 114 MB/s", "slurmstepd: Exceeded step memory limit at some point."])
    assert not ok.failed and all(f.severity != "error" for f in ok.findings)


def test_a_shell_killed_status_under_slurm_is_sigkill_and_the_cgroup_leads() -> None:
    """The batch shell's job status for a SIGKILLed python, then Slurm's oom-kill
    (ArjunaCluster/ArjunaUsers#52): the cgroup's kill leads, the status is its SIGKILL."""
    lines = [
        "/var/spool/slurmd/job00191/slurm_script: line 28:  8156 Killed                  python3 main.py --prop hform --epochs 400 --lr_milestones 50 100 200 --gamma 0.25",
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=191.batch cgroup. Some of your processes may have been killed by the cgroup out-of-memory handler.",
    ]
    assert lead(lines) == "SLURM-OOM"
    # the status alone (logs19): the shell lived on and one process was SIGKILLed, no
    # killer named: the OOM killer (this thread's own cause, the cgroup's), SIGKILL beside it
    alone = diagnose_lines(lines[:1], "x")
    assert [f.id for f in alone.findings] == ["HOST-OOM-KILL", "C10D-CHILD-SIGKILL"]


def test_slurm_allocation_launch_and_node_failures() -> None:
    # a real Slurm (tests/fixtures/logs/slurm/alloc_busy.log, the namespace testbed): more
    # nodes than the cluster has, with --immediate
    busy = (Path(__file__).parent / "fixtures/logs/slurm/alloc_busy.log").read_text().splitlines()
    assert lead(busy) == "SLURM-ALLOC-FAILED"
    # meta-pytorch/torchforge#590: sbatch refused the request; nothing ran
    assert lead([
        "sbatch: error: Memory specification can not be satisfied",
        "sbatch: error: Batch job submission failed: Requested node configuration is not available",
    ]) == "SLURM-ALLOC-FAILED"
    # srun's own words for a node lost mid-step (src/srun/allocate.c: "Node failure on %s")
    # lead the task exits and the cancel that follow
    lost = [
        "srun: error: Node failure on gpu-node-03",
        "srun: error: gpu-node-03: tasks 8-15: Killed",
        "slurmstepd: error: *** STEP 4711.0 ON gpu-node-01 CANCELLED AT 2024-05-01T12:00:00 ***",
    ]
    assert lead(lost) == "SLURM-NODE-FAIL"
    # slurmd could not start the step's tasks on a node: those ranks never ran, and that
    # explains the others' rendezvous timeout
    launch = [
        "srun: error: Task launch for StepId=123.0 failed on node gpu02: Invalid node name specified",
        "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.",
    ]
    assert lead(launch) == "SLURM-LAUNCH-FAILED"
    # pyxis (Slurm's container plugin) could not start or import the container (as pasted in
    # public docs: `srun -lN1 --environment=alpine`, and a 23.08 image import killed with 137)
    for pyxis in (
        ["0: slurmstepd: error: pyxis: container start failed with error code: 1", "0: slurmstepd: error: pyxis: printing enroot log file:"],
        ["pyxis: importing docker image: nvcr.io#nvidia/pytorch:23.08-py3", "slurmstepd: error: pyxis: child 12455 failed with error code: 137", "slurmstepd: error: pyxis: failed to import docker image"],
    ):
        assert lead(pyxis) == "SLURM-LAUNCH-FAILED", pyxis


def test_srun_waiting_for_a_step_is_a_warning_until_it_starts() -> None:
    """"step creation temporarily disabled, retrying": the step waits for resources
    another step holds (a real srun prints it, then "Step created" when it gets them)."""
    waiting = diagnose_lines(["srun: Job 5517045 step creation temporarily disabled, retrying (Requested nodes are busy)"])
    assert waiting.first is not None and waiting.first.id == "SLURM-STEP-WAIT"
    assert waiting.first.severity == "warning" and not waiting.failed
    assert "Requested nodes are busy" in " ".join(waiting.first.evidence)


def test_srun_ending_a_step_is_never_clean() -> None:
    """srun's "Job step aborted" (a task failed or the step was cancelled) with nothing
    else pasted is an honest unknown; with the time limit pasted, the time limit leads
    (corpus f-slurm-timelimit-zetta_utils-671)."""
    d = diagnose_lines(["srun: Job step aborted: Waiting up to 32 seconds for job step to finish."])
    assert d.first is not None and d.first.id == "LOGS-UNRECOGNIZED" and d.failed
    assert excerpt("f-slurm-timelimit-zetta_utils-671").first.id == "SLURM-TIMELIMIT"  # type: ignore[union-attr]


def test_lightning_settings_that_disagree_with_the_slurm_allocation() -> None:
    """Lightning's SLURMEnvironment.validate_settings (fabric/plugins/environments/
    slurm.py), as a user's script quoted it: devices vs --ntasks-per-node, num_nodes vs
    --nodes."""
    d = diagnose_lines(["ValueError: You set `devices=2` in Lightning, but the number of tasks per node configured in SLURM `--ntasks-per-node=1` does not match. HINT: Set `devices=1`."])
    assert d.first is not None and d.first.id == "LAUNCH-LIGHTNING-SLURM"
    assert "devices=2" in d.first.cause and "--ntasks-per-node=1" in d.first.cause
    assert lead(["ValueError: You set `num_nodes=2` in Lightning, but the number of nodes configured in SLURM `--nodes=1` does not match. HINT: Set `num_nodes=1`."]) == "LAUNCH-LIGHTNING-SLURM"


def test_srun_ignoring_ntasks_per_node_is_said() -> None:
    d = diagnose_lines(["srun: Warning: can't honor --ntasks-per-node set to 8 which doesn't match the requested tasks 4 with the number of requested nodes 1. Ignoring --ntasks-per-node."])
    assert d.first is not None and d.first.id == "SLURM-NTASKS-IGNORED"
    assert "4 task(s) on 1 node(s), not 8 per node" in d.first.cause


# ------------------------------------------------- Kubernetes


def test_kubernetes_exit_code_137_is_sigkill() -> None:
    """A container's last state with Reason: Error and Exit Code: 137 (fontbakery-
    dashboard#100, kubernetes#122256) and kubectl's "command terminated with exit code
    137" (jupyter/docker-stacks#736): SIGKILL, the OOM killer first of all."""
    describe = ["    Last State:     Terminated", "      Reason:       Error", "      Exit Code:    137", "      Started:      Wed, 27 Mar 2019 01:53:04 +0100"]
    assert lead(describe) == "C10D-CHILD-SIGKILL"
    assert lead(["command terminated with exit code 137"]) == "C10D-CHILD-SIGKILL"
    # a container that exited 1 is a failure without a known cause; 0 is none
    assert lead(["    Last State:     Terminated", "      Reason:       Error", "      Exit Code:    1"]) == "LOGS-UNRECOGNIZED"
    assert lead(["      Reason:       Completed", "      Exit Code:    0"]) is None
    # 135 is 128 + SIGBUS: the /dev/shm of a container
    assert lead(["      Reason:       Error", "      Exit Code:    135"]) == "SHM-SIZE"


def test_kubernetes_evicts_a_pod_whose_dev_shm_outgrew_its_limit() -> None:
    """The kubelet's eviction for an emptyDir over its sizeLimit (the /dev/shm mount
    "dshm"), as `kubectl describe` printed it in kubernetes/kubernetes#28272."""
    events = [
        "  Normal   Started  12m    kubelet, x_machine_x  Started container x_pod_x",
        '  Warning  Evicted  9m38s  kubelet, x_machine_x  Usage of EmptyDir volume "dshm" exceeds the limit "1Gi".',
        "  Normal   Killing  9m38s  kubelet, x_machine_x  Stopping container x_pod_x",
    ]
    assert lead(events) == "K8S-EVICTED"
    assert lead(["pytorch-worker-1   0/1     Evicted   0          5m"]) == "K8S-EVICTED"


def test_a_pod_the_scheduler_cannot_place_explains_the_others_waiting() -> None:
    """kube-scheduler's FailedScheduling (NVIDIA/k8s-device-plugin#119): that pod's ranks
    never start, so the master's "1/2 clients joined" is its consequence."""
    event = " Warning FailedScheduling  40s (x2 over 40s)  default-scheduler  0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) were unschedulable."
    assert lead([event]) == "K8S-UNSCHEDULABLE"
    waits = [
        "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.",
        event,
    ]
    assert lead(waits) == "K8S-UNSCHEDULABLE"
    # gang schedulers keep every pod of the job pending (volcano-sh/volcano#1959's title;
    # Kueue's admission check)
    assert lead(["  Warning  Unschedulable  2m  volcano  1/2 tasks in gang unschedulable: pod group is not ready, 2 minAvailable"]) == "K8S-UNSCHEDULABLE"
    assert lead(["couldn't assign flavors to pod set worker: insufficient unused quota for nvidia.com/gpu in flavor default-flavor, 8 more needed"]) == "K8S-UNSCHEDULABLE"


def test_a_pod_that_cannot_start_its_container() -> None:
    """kubeflow/pytorch-operator#264: the master pod's image cannot be pulled (`kubectl
    logs` answers for a container waiting to start); the kubelet's own events say the same
    (ErrImagePull, ImagePullBackOff, a volume that cannot be mounted)."""
    pulled = [
        "$ kubectl logs pytorch-dist-mnist-gloo-master-0",
        'Error from server (BadRequest): container "pytorch" in pod "pytorch-dist-mnist-gloo-master-0" is waiting to start: trying and failing to pull image',
        "$ kubectl logs pytorch-dist-mnist-gloo-worker-0",
        'Error from server (BadRequest): container "pytorch" in pod "pytorch-dist-mnist-gloo-worker-0" is waiting to start: PodInitializing',
    ]
    assert lead(pulled) == "K8S-POD-NOT-STARTED"
    for event in (
        "  Warning  Failed     2m (x4 over 4m)   kubelet  Error: ImagePullBackOff",
        '  Warning  FailedMount  3m  kubelet  MountVolume.SetUp failed for volume "dshm" : mount failed: exit status 32',
    ):
        assert lead([event, "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined."]) == "K8S-POD-NOT-STARTED", event


def test_kubernetes_kills_from_outside_lead_the_lost_peers() -> None:
    """A liveness-probe kill, a lost node and a preemption end ranks from outside; they
    lead the SIGKILL and lost-peer lines they cause (SCHEDULER-KILL-FIRST)."""
    sigkill = "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 4121) of binary"
    for event, want in (
        ('  Warning  Unhealthy  35s (x2 over 40s)  kubelet  Liveness probe failed: Get "http://10.0.0.7:8080/healthz": context deadline exceeded', "K8S-LIVENESS-KILL"),
        ("  Normal   Killing    35s                kubelet  Container trainer failed liveness probe, will be restarted", "K8S-LIVENESS-KILL"),
        ("  Warning  NodeNotReady  2m  node-controller  Node is not ready", "K8S-NODE-LOST"),
        ("      Reason:       ContainerStatusUnknown", "K8S-NODE-LOST"),
        # the kubelet's graceful node shutdown (a spot or preemptible node reclaimed)
        ("      Message:      Pod was terminated in response to imminent node shutdown.", "K8S-NODE-LOST"),
        ("  Normal   Preempted  1m   default-scheduler  Preempted by pod 1234-abcd on node gpu-1", "K8S-PREEMPTED"),
    ):
        assert lead([sigkill, event]) == want, event


def test_a_crash_loop_or_a_failed_job_says_where_not_why() -> None:
    """The kubelet's back-off and the training operator's job condition are wrappers: a
    cause beside them leads; alone they are an honest unknown, never clean."""
    backoff = "  Warning  BackOff    1m (x5 over 3m)  kubelet  Back-off restarting failed container"
    failed = "PyTorchJob default/train is failed because 1 Worker replica(s) failed."
    assert lead([backoff, "      Reason:       OOMKilled"]) == "K8S-OOMKILLED"
    for line in (backoff, failed):
        d = diagnose_lines([line])
        assert d.failed and d.first is not None and d.first.id == "LOGS-UNRECOGNIZED", line


# ------------------------------------------------- ssh and mpirun


def test_ssh_login_refused_leads_pdshs_exit_255() -> None:
    """deepspeedai/DeepSpeed#5709: ssh refused the key; pdsh's "ssh exited with exit
    code 255" is its consequence."""
    lines = [
        "localhost: Permission denied, please try again.",
        "localhost: jiaming@localhost: Permission denied (publickey,password).",
        "pdsh@jiaming-Precision-7960-Tower: localhost: ssh exited with exit code 255",
    ]
    assert lead(lines) == "LAUNCH-SSH-AUTH"
    assert "LAUNCH-SSH-FAILED" in ids(lines)


def test_ssh_that_cannot_connect_or_resolve() -> None:
    # horovod/horovod#1226: horovodrun's ssh to a port nothing listens on
    assert lead([
        "Launching horovodrun task function was not successful:",
        "ssh: connect to host 192.168.0.119 port 12345: Connection refused",
    ]) == "LAUNCH-SSH-CONN"
    # horovod/horovod#655: a host:slots spec taken as a host name, then mpirun's daemons
    # never start: the name leads (logs8: named as the host spec it is)
    lines = [
        "ssh: Could not resolve hostname localhost:4: Name or service not known",
        "--------------------------------------------------------------------------",
        "ORTE was unable to reliably start one or more daemons.",
    ]
    assert lead(lines) == "LAUNCH-HOSTSPEC-AS-NAME"
    assert "LAUNCH-MPI-TCP" in ids(lines)
    # corpus: DeepSpeed's "not reachable via ssh" is the wrapper, the name still leads
    assert excerpt("r2e-host-volcano-2952").first.id == "LAUNCH-SSH-RESOLVE"  # type: ignore[union-attr]
    # hpcac/2023-APAC-HPC-AI#1: only DeepSpeed's wrapper pasted: an honest unknown
    only = diagnose_lines([
        "subprocess.CalledProcessError: Command 'ssh -o PasswordAuthentication=no gadi-gpu-v100-0011 hostname' returned non-zero exit status 255.",
        "RuntimeError: Using hostfile at /home/552/dz9214/hostfile but host=gadi-gpu-v100-0011 was not reachable via ssh. If you are running with a single node please remove /home/552/dz9214/hostfile or setup passwordless ssh.",
    ])
    assert only.failed and only.first is not None and only.first.id == "LOGS-UNRECOGNIZED"


def test_a_launcher_or_a_path_missing_on_the_node() -> None:
    """deepspeedai/Megatron-DeepSpeed#125: pdsh runs the launching node's working
    directory and python on the other node, where neither exists; DeepSpeed's runner
    without pdsh installed (runner.py: "launcher '{args.launcher}' not installed.", or
    the FileNotFoundError of its subprocess call)."""
    remote = [
        "172.16.220.18: bash: line 0: cd: /data/asc23/src_zero3: No such file or directory",
        "172.16.220.18: bash: /home/lxw/anaconda3/envs/sys_py37/bin/python: No such file or directory",
    ]
    assert lead(remote) == "LAUNCH-CMD-NOTFOUND"
    for line in ("RuntimeError: launcher 'pdsh' not installed.", "FileNotFoundError: [Errno 2] No such file or directory: 'pdsh'"):
        assert lead([line]) == "LAUNCH-CMD-NOTFOUND", line
    # a data file the script cannot open is not the launcher's
    assert lead(["FileNotFoundError: [Errno 2] No such file or directory: 'data/train.json'"]) == "LOGS-APP-EXCEPTION"


def test_an_empty_master_address_in_c10d_and_torchrun_words() -> None:
    """An unset MASTER_ADDR reaches c10d as "" or "None" (torch's socket.cpp prints the
    address it dials: "(, 29500)", "[:29500]", "(None, 29500)"), and an unset shell variable
    after --master_addr leaves argparse without a value (QwenLM/Qwen#952: "torchrun: error:
    argument --master-addr/--master_addr: expec[ted one argument]")."""
    for line in (
        "torch.distributed.DistNetworkError: The client socket has timed out after 900s while trying to connect to (, 29500).",
        "[W socket.cpp:663] [c10d] The client socket has failed to connect to [:29500] (errno: 22 - Invalid argument).",
        "[W socket.cpp:697] [c10d] The IPv4 network addresses of (None, 29500) cannot be retrieved (gai error: -2 - Name or service not known).",
        "torchrun: error: argument --master-addr/--master_addr: expected one argument",
        # corpus c-scontrol-missing-master-addr-mmcv-700's thread: MASTER_ADDR from
        # `scontrol show hostname` in a container without scontrol (dash's own words)
        "/bin/dash: 1: scontrol: not found",
    ):
        assert lead([line]) == "LAUNCH-EMPTY-ADDR", line
    # a real name stays a name that does not resolve
    assert lead(["[W socket.cpp:697] [c10d] The IPv4 network addresses of (node0, 29500) cannot be retrieved (gai error: -2 - Name or service not known)."]) == "PING-GAI"


def test_mpirun_daemons_that_cannot_connect() -> None:
    """horovod/horovod#2043: Open MPI's help text for a TCP connection between its
    processes that never completed (a firewall, or an interface that does not reach)."""
    lines = [
        "------------------------------------------------------------",
        "A process or daemon was unable to complete a TCP connection",
        "to another process:",
        "  Local host:    psxi1mzh8",
        "  Remote host:   psfwnezg3",
        "This is usually caused by a firewall on the remote host. Please",
        "check that any firewall (e.g., iptables) has been disabled and",
        "try again.",
    ]
    assert lead(lines) == "LAUNCH-MPI-TCP"
    # horovod/horovod#414: Open MPI's TCP transport connecting to a libvirt bridge address
    assert lead(["[centos01][[32355,1],2][btl_tcp_endpoint.c:796:mca_btl_tcp_endpoint_complete_connect] connect() to 192.168.122.1 failed: Connection refused (111)"]) == "LAUNCH-MPI-TCP"
    # horovod/horovod#978, NVIDIA/apex#482: -np larger than the host list's slots
    slots = [
        "--------------------------------------------------------------------------",
        "There are not enough slots available in the system to satisfy the 8 slots",
        "that were requested by the application:",
        "  python",
    ]
    d = diagnose_lines(slots)
    assert d.first is not None and d.first.id == "LAUNCH-MPI-SLOTS" and "8 processes" in d.first.cause
    # torch 2.x's agent names the signal it got ("Signals.SIGTERM"): told to stop, no cause
    term = diagnose_lines(["[2024-01-01 00:00:00,000] torch.distributed.elastic.agent.server.api: [WARNING] Received Signals.SIGTERM death signal, shutting down workers"])
    assert [f.id for f in term.findings] == ["TORCHRUN-SIGTERM"] and not term.failed
    # mpirun's signal 9 for a rank is its SIGKILL
    assert lead(["mpirun noticed that process rank 1 with PID 0 on node gpu2 exited on signal 9 (Killed)."]) == "C10D-CHILD-SIGKILL"


# ------------------------------------------------- Lightning: one node's ranks registered


def test_one_nodes_block_of_ranks_registered_means_the_other_nodes_never_launched() -> None:
    """corpus f-slurm-nosrun-lightning-8707: ranks 0-3 of 8 register and the log stops
    there (the sbatch script ran python without srun: one node's processes only)."""
    d = excerpt("f-slurm-nosrun-lightning-8707")
    assert d.first is not None and d.first.id == "LOGS-MISSING-NODES"
    assert "ranks 4, 5, 6, 7" in d.first.summary and "srun" in d.first.cause
    # newer Lightning's wording (Lightning-AI/pytorch-lightning#14949: "the first 4 ranks
    # (gpus) have been initialized as follows (the rest haven't)")
    newer = [
        "Initializing distributed: GLOBAL_RANK: 2, MEMBER: 3/8",
        "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/8",
        "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/8",
        "Initializing distributed: GLOBAL_RANK: 3, MEMBER: 4/8",
    ]
    assert lead(newer) == "LOGS-MISSING-NODES"
    # every rank registered: no finding
    every = [f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/8" for r in range(8)]
    assert lead([*every, "All distributed processes registered. Starting with 8 processes"]) is None
    # one process alone says nothing of nodes (corpus c-node-rank-env-hang-lightning-5651:
    # a stray NODE_RANK), and ranks announced twice are LOGS-DUP-RANK's
    assert excerpt("c-node-rank-env-hang-lightning-5651").first.id == "LOGS-UNRECOGNIZED"  # type: ignore[union-attr]
    assert excerpt("d-slurm-ntasks-mismatch-lightning-10098").first.id == "LOGS-DUP-RANK"  # type: ignore[union-attr]


# ------------------------------------------------- silence taken for health


def test_a_host_name_that_does_not_resolve_written_without_its_port_is_not_clean() -> None:
    """corpus r2-host-pytorch-74824: c10d's gai warning pasted with the host name and no
    "(host, port)" tuple (a docker container id the other container cannot resolve): the
    name still does not resolve; the tuple form keeps its host and port."""
    d = excerpt("r2-host-pytorch-74824")
    assert d.first is not None and d.first.id == "PING-GAI-IPV6" and d.first.severity == "warning"
    assert "<container id> does not resolve" in d.first.cause
    tup = diagnose_lines(["[W socket.cpp:697] [c10d] The IPv4 network addresses of (node0, 29500) cannot be retrieved (gai error: -2 - Name or service not known)."])
    assert tup.first is not None and tup.first.id == "PING-GAI" and tup.first.cause.startswith("node0 does not resolve")


# ------------------------------------------------- a launcher that started one job per host


def test_the_same_ranks_on_every_host_are_independent_jobs() -> None:
    """NVIDIA/nccl-tests#107: mpirun of nccl-tests built without MPI=1 on two hosts: each
    copy lists itself as rank 0 (the maintainers' answer in nccl-tests#27: rebuild with
    MPI=1 after `make clean`)."""
    two = [
        "# nThread 1 nGpus 1 minBytes 1310720000 maxBytes 1310720000 step: 1048576(bytes) warmup iters: 5 iters: 20 validation: 1",
        "#",
        "# Using devices",
        "# nThread 1 nGpus 1 minBytes 1310720000 maxBytes 1310720000 step: 1048576(bytes) warmup iters: 5 iters: 20 validation: 1",
        "#",
        "# Using devices",
        "#   Rank  0 Pid   1320 on ip-172-31-20-228 device  0 [0x00] Tesla V100-SXM2-16GB",
        "#   Rank  0 Pid   2066 on ip-172-31-22-230 device  0 [0x00] Tesla V100-SXM2-16GB",
        "#",
    ]
    d = diagnose_lines(two)
    assert d.first is not None and d.first.id == "LAUNCH-INDEPENDENT-JOBS" and d.failed
    assert "ip-172-31-20-228, ip-172-31-22-230" in d.first.cause and "MPI=1" in d.first.fix
    # NVIDIA/nccl-tests#254: the device list pasted without its "#", 16 processes, all rank 0
    dgx = [f"Rank  0 Group  0 Pid {pid} on    {host} device  0 [0x1a] NVIDIA H100 80GB HBM3" for pid, host in (
        (544816, "dgx01"), (332597, "dgx02"), (332599, "dgx02"), (544818, "dgx01"))]
    assert lead(dgx) == "LAUNCH-INDEPENDENT-JOBS"
    # nebius/soperator#428: one MPI job across two hosts numbers its ranks once: silent
    one_job = [f"#  Rank {r:2d} Group  0 Pid {1887 + r}  on   worker-{1 - r // 8} device  {r % 8} [0x8d] NVIDIA H100 80GB HBM3" for r in range(16)]
    assert diagnose_lines(one_job).findings == ()
    # one host's list alone (corpus f-device-nccl-tests-287) is no such thing
    assert all(f.id != "LAUNCH-INDEPENDENT-JOBS" for f in excerpt("f-device-nccl-tests-287").findings)


# ------------------------------------------------- launcher prefixes


def test_mpiruns_tag_output_prefix_names_the_rank() -> None:
    """mpirun --tag-output (horovodrun's default) writes [jobid,rank]<stream>: before each
    line (horovod/horovod#3751): the MPI rank is the line's rank, NCCL's prefix after it
    still gives host and pid."""
    from ddptui.logs.lineinfo import parse_head

    head, _ = parse_head("[1,2]<stdout>:j63g01247:65:197 [0] NCCL INFO Bootstrap : Using bond0:11.158.237.10<0>", 2024)
    assert (head.rank, head.host, head.pid) == (2, "j63g01247", 65)
    assert head.body.startswith("j63g01247:65:197 [0] NCCL INFO")
    d = diagnose_lines([
        "[1,0]<stdout>:j66d10267:290:422 [0] NCCL INFO Bootstrap : Using bond0:11.158.244.23<0>",
        "[1,2]<stderr>:RuntimeError: CUDA error: an illegal memory access was encountered",
    ])
    assert d.first is not None and d.first.id == "RANK-CUDA-ERROR" and d.first.rank == 2


def test_a_launcher_hung_up_on_by_its_terminal() -> None:
    """torch's own format strings (tests/fixtures/source_sites/torch-2.13.0-py.tsv:
    agent/server/api.py "Received %s death signal, shutting down workers",
    multiprocessing/api.py "Process {os.getpid()} got signal: {sigval}") with SIGHUP: the
    session that started torchrun closed.  SIGTERM stays torchrun being told to stop."""
    for line in (
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4021 got signal: 1",
        "W1122 13:54:07.895000 27402 torch/distributed/elastic/agent/server/api.py:753] Received Signals.SIGHUP death signal, shutting down workers",
        "WARNING:torch.distributed.elastic.agent.server.api:Received 1 death signal, shutting down workers",
    ):
        assert lead([line]) == "LAUNCH-SIGHUP", line
    term = diagnose_lines(["torch.distributed.elastic.multiprocessing.api.SignalException: Process 4021 got signal: 15"])
    assert not term.failed and [f.id for f in term.findings] == ["TORCHRUN-SIGTERM"]


def test_lightnings_rank_prefix_names_the_rank() -> None:
    """Lightning's rank_prefixed_message (lightning_fabric/utilities/rank_zero.py:
    f"[rank: {rank}] {message}") prefixes its warnings and errors with the global rank."""
    from ddptui.logs.lineinfo import parse_head

    head, _ = parse_head("[rank: 3] Seed set to 42", 2024)
    assert head.rank == 3 and head.body == "Seed set to 42"
    d = diagnose_lines(["[rank: 1] RuntimeError: CUDA error: an illegal memory access was encountered"])
    assert d.first is not None and d.first.rank == 1


def test_rays_worker_prefix_names_the_host() -> None:
    """Ray Train's worker prefix (ray-project/ray#40850: "(RayTrainWorker pid=83501,
    ip=192.168.0.107)"): the ip is the host the line came from."""
    from ddptui.logs.lineinfo import parse_head

    head, _ = parse_head("(RayTrainWorker pid=83501, ip=192.168.0.107) [rank1]: RuntimeError: CUDA error: an illegal memory access was encountered", 2024)
    assert (head.host, head.rank) == ("192.168.0.107", 1)
    assert head.body.startswith("RuntimeError: CUDA error")


def test_a_pytorchjob_whose_workers_never_resolve_the_master() -> None:
    """kubeflow/trainer#2034: the worker's init container (init-pytorch, which waits for the
    master pod's name to resolve) keeps failing: a cause of its own, not a crash loop of
    the training container."""
    events = [
        "  Normal   Pulled          9m32s                  kubelet            Successfully pulled image \"quay.io/bharathappali/alpine:3.10\" in 1.065165424s (1.065174057s including waiting)",
        "  Warning  BackOff         2m49s                  kubelet            Back-off restarting failed container init-pytorch in pod random-exp-jw6qxmrm-worker-0_sampler(8d6860a7-204d-45c8-bb57-8d84a6cf8e66)",
    ]
    assert lead(events) == "K8S-INIT-MASTER-WAIT"
    assert lead(["nslookup: can't resolve 'pytorch-simple-master-0'"]) == "K8S-INIT-MASTER-WAIT"
