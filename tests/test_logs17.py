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
