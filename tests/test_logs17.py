"""Round logs17 (issue 15, blind batch K's misses that name an id): each reading comes from
the printing program's own message format (torch's socket.cpp and reducer.cpp, torch's
DataLoader, argparse, Slurm's salloc/sbatch and its gres validation) and is checked on the
real excerpt as pasted and on the neighbours it must leave alone."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from corpus_excerpts import excerpt, ids, lead

from ddptui.logs.diagnose import diagnose_lines


def test_socket_cpp_listen_failure_without_a_version_marker_is_the_master_port_in_use() -> None:
    """torch's socket.cpp raises "The server socket has failed to listen on any local
    network address." followed by each bind attempt's error: the only TCPStore backend
    before torch 2.4 (ModelArts' troubleshooting page pasted it alone).  Only torch >= 2.4
    with use_libuv=0 (its glog prefix carries a timestamp) is the legacy backend."""
    d = excerpt("k1-port-inuse-huaweicloud-modelarts-trouble-0124")
    assert lead(d) == "PORT-INUSE", ids(d)
    assert d.first is not None and "sport = :29500" in d.first.fix
    new = diagnose_lines(["[W1122 13:52:25.570934259 socket.cpp:752] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use)."], "x")
    assert lead(new) == "PORT-INUSE-LEGACY", ids(new)
    refused = diagnose_lines(["RuntimeError: The server socket has failed to listen on any local network address. The server socket has failed to bind to [::]:29500 (errno: 13 - Permission denied)."], "x")
    assert lead(refused) != "PORT-INUSE", ids(refused)


def test_dataloaders_bus_error_message_in_any_case_is_shared_memory() -> None:
    """torch's DataLoader SIGBUS handler: "ERROR: Unexpected bus error encountered in
    worker. This might be caused by insufficient shared memory (shm)." retyped in lower
    case by a blog (a docker container's 64 MB /dev/shm)."""
    d = excerpt("k1-shm-dataloader-docker-csdn-109053807")
    assert lead(d) == "SHM-DATALOADER", ids(d)
    assert lead(diagnose_lines(["epoch 1: unexpected values encountered in worker output, skipped"], "x")) is None


def test_argparse_requiring_local_rank_is_the_launchers_local_rank_argument() -> None:
    """argparse's "PROG: error: the following arguments are required: --local_rank": the
    script requires the option and the launcher passes none of that spelling
    (Swin-Transformer#342: torch.distributed.launch of torch 2.x writes --local-rank)."""
    d = excerpt("k3-localrank-swin-342")
    assert lead(d) == "LAUNCH-LOCAL-RANK-ARG", ids(d)
    assert d.first is not None and "--local_rank" in d.first.cause and "required" in d.first.cause
    other = diagnose_lines(["train.py: error: the following arguments are required: --config"], "x")
    assert lead(other) != "LAUNCH-LOCAL-RANK-ARG", ids(other)


def test_reducers_message_cut_after_its_first_sentence_is_unused_parameters() -> None:
    """torch's reducer.cpp: "Expected to have finished reduction in the prior iteration
    before starting a new one." with the rest on the next lines (detectron2 SwinT#28)."""
    d = excerpt("k3-unusedparams-swint-detectron2-28")
    assert lead(d) == "DDP-UNUSED-PARAMS", ids(d)
    assert lead(diagnose_lines(["note: Expected to have finished reduction in the prior iteration before starting a new one. Skipping"], "x")) != "DDP-UNUSED-PARAMS"


def test_slurm_clients_refusing_the_job_spec_is_the_allocation_refused() -> None:
    """Slurm's salloc.c "Job submit/allocate failed: %m" (slurmctld's "invalid partition
    specified: X" before it) and slurm_opt.c's gres validation, "Failed to validate job
    spec. --gpus-per-task ... is not allowed." (sbatch 23.11, torchx#1100): nothing of the
    job ran."""
    for name, said in (
        ("k3-slurm-partition-inferencex-3336", "Invalid partition name specified"),
        ("k4-scheduler-sbatch-gpus-per-task-torchx-1100", "--gpus-per-task"),
    ):
        d = excerpt(name)
        assert lead(d) == "SLURM-ALLOC-FAILED", (name, ids(d))
        assert d.first is not None and said in d.first.cause, d.first.cause
    ok = diagnose_lines(["salloc: Granted job allocation 4242", "salloc: Waiting for resource configuration", "sbatch: Submitted batch job 77"], "x")
    assert lead(ok) is None, ids(ok)


def test_nccl_proxy_accept_failing_with_enospc_is_dev_shm_full() -> None:
    """NCCL's proxy.cc: "[Service thread] Accept failed %s" with strerror(errno) after
    ncclSocketAccept failed, which need not set errno; ENOSPC is never a socket error but
    the proxy thread's failed write to its /dev/shm segment (DeepEP#53: the next line is
    shmutils' "failed to extend /dev/shm/nccl-..."; the fix was a larger /dev/shm)."""
    d = excerpt("k2-shm-full-deepep-53")
    assert lead(d) == "SHM-SIZE", ids(d)
    alone = diagnose_lines(["node1:1234:1300 [0] proxy.cc:1587 NCCL WARN [Service thread] Accept failed No space left on device"], "x")
    assert lead(alone) == "SHM-SIZE", ids(alone)
    files = diagnose_lines(["node1:1234:1300 [0] proxy.cc:1587 NCCL WARN [Service thread] Accept failed Too many open files"], "x")
    assert lead(files) == "NOFILE-LIMIT", ids(files)


def test_sigkill_after_the_log_states_large_host_memory_is_the_oom_killer() -> None:
    """ColossalAI#3172: every step prints "CPU memory usage: 44096.98 MB" (placement=cpu
    offloads the 7B model to host RAM), then torchrun's "failed (exitcode: -9)": the host
    memory the log was tracking ran out.  A SIGKILL with small stated use, or with no
    such line (7 corpus excerpts labelled C10D-CHILD-SIGKILL alone), stays a SIGKILL."""
    d = excerpt("k2-host-oom-sigkill-colossalai-3172")
    assert lead(d) == "HOST-OOM-KILL", ids(d)
    assert d.first is not None and "44096.98 MB" in " ".join(d.first.evidence)
    kill = "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 2410412) of binary: /usr/bin/python"
    small = diagnose_lines(["INFO: [3/1000] Forward GPU memory usage: 8367.72 MB, CPU memory usage: 4096.98 MB", kill], "x")
    assert lead(small) == "C10D-CHILD-SIGKILL", ids(small)
    ds = diagnose_lines(["[INFO] [utils.py:786:see_memory_usage] CPU Virtual Memory:  used = 121.3 GB, percent = 96.4%", kill], "x")
    assert lead(ds) == "HOST-OOM-KILL", ids(ds)
    healthy = diagnose_lines(["INFO: [3/1000] Forward GPU memory usage: 8367.72 MB, CPU memory usage: 44096.98 MB"], "x")
    assert lead(healthy) is None, ids(healthy)
    for name in ("crash-ra-isf-11", "r2c-crash-rlhfv-11", "crash-amvur-2"):
        assert lead(excerpt(name)) == "C10D-CHILD-SIGKILL", name


def test_a_crash_whose_innermost_frames_are_nccls_is_a_crash_inside_nccl() -> None:
    """NCCL#1996 (labelled [NEW]: a use-after-free in NCCL 2.27.7's RAS thread): UCX's
    "Caught signal 11 (Segmentation fault ...)" and its backtrace, whose frames right past
    the handler's (libucs) are libnccl.so's.  glibc's backtrace_symbols as Open MPI prints
    it reads the same; a libnccl frame deep in the stack (the caller's side) does not, nor
    a frame without a crash."""
    d = excerpt("k4-rank-crash-ras-segv-nccl-1996")
    assert lead(d) == "NCCL-INTERNAL-CRASH", ids(d)
    assert d.first is not None and "NCCL_RAS_ENABLE=0" in d.first.fix
    ompi = [
        "[node3:40123] *** Process received signal ***",
        "[node3:40123] Signal: Segmentation fault (11)",
        "[node3:40123] [ 0] /lib/x86_64-linux-gnu/libc.so.6(+0x42520)[0x7f0e2c842520]",
        "[node3:40123] [ 1] /usr/lib/x86_64-linux-gnu/libnccl.so.2(+0x8a1b2)[0x7f0e1a28a1b2]",
    ]
    assert lead(diagnose_lines(ompi, "x")) == "NCCL-INTERNAL-CRASH"
    deep = [*ompi[:3], "[node3:40123] [ 1] /usr/lib/libcuda.so.1(+0x2f1c3)[0x7f0e1b02f1c3]", "[node3:40123] [ 9] /usr/lib/x86_64-linux-gnu/libnccl.so.2(ncclAllReduce+0x1b2)[0x7f0e1a28a1b2]"]
    assert lead(diagnose_lines(deep, "x")) not in (None, "NCCL-INTERNAL-CRASH")
    frame_only = diagnose_lines(["  3  /opt/nccl/lib/libnccl.so(+0x120057) [0x7ff1c18c1057]"], "x")
    assert lead(frame_only) != "NCCL-INTERNAL-CRASH", ids(frame_only)


def test_open_mpis_signal_report_is_a_failure_line() -> None:
    """NCCL#1669: the only failure line is Open MPI's "[host:pid] *** Process received
    signal ***" (the process crashed during NCCL's init): an honest unknown quoting it,
    never a tick."""
    d = excerpt("k4-rank-crash-ras-init-race-nccl-1669")
    assert lead(d) == "LOGS-UNRECOGNIZED", ids(d)
    assert d.first is not None and "Process received signal" in d.first.cause


def test_a_paste_that_holds_no_next_line_of_a_process_is_cut_not_stopped_in_nccl_init() -> None:
    """NCCL's init.cc prints "Using network X" (commAlloc) right before "Init START", with
    nothing that waits between (2.18 to 2.29).  nccl#1713's healthy paste ends at rank 0's
    "Init START" while two other processes printed "Using network IB" and never their
    start: the paste is cut, not a job stopped in init.  A whole console that stops at
    "Init START" after every process's start stays a stall (a warning)."""
    d = excerpt("k4-healthy-roce-profiler-plugin-nccl-1713")
    assert lead(d) is None, ids(d)
    hung = diagnose_lines(
        [
            "node1:201:210 [0] NCCL INFO Using network IB",
            "node1:201:210 [0] NCCL INFO ncclCommInitRank comm 0x55fa0e00e740 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 19000 commId 0xd37e70d13f797e7e - Init START",
            "node2:301:310 [0] NCCL INFO Using network IB",
            "node2:301:310 [0] NCCL INFO ncclCommInitRank comm 0x55fa0e00e900 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 19000 commId 0xd37e70d13f797e7e - Init START",
        ],
        "x",
    )
    assert lead(hung) == "LOGS-UNRECOGNIZED" and "Init COMPLETE" in hung.first.cause, ids(hung)


def test_nccl_229s_ib_probe_on_a_host_without_ib_is_noise() -> None:
    """nccl#2094 (healthy, NCCL 2.29.7 on sockets): "Failed to open libibverbs.so[.1]",
    the IB transport's error trace "transport/net_ib/init.cc:396 -> 3", the GIN plugin's
    probe "misc/ibvwrap.cc:173 NCCL WARN lib wrapper not initialized." and
    "transport/net_ib/gdr.cc:56 -> 3", then "Using network Socket"."""
    d = excerpt("k4-healthy-nccl229-socket-noib-nccl-2094")
    assert d.findings == () or all(f.id != "LOGS-UNRECOGNIZED" for f in d.findings), ids(d)
    real = diagnose_lines(["node1:1:2 [0] misc/ibvwrap.cc:173 NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory"], "x")
    assert lead(real) is not None, ids(real)
