"""Round logs13 (issue 15): general readings of blind batch H's misses whose cause has an
id, each read from the printing program's own message format (UCX, torch, gloo, CUDA,
NCCL) and checked on the real excerpt as pasted, and on the neighbours it must leave
alone."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from pathlib import Path

from corpus_excerpts import excerpt, ids, lead

from ddptui.logs.diagnose import diagnose_lines

GPU = Path(__file__).parent / "fixtures" / "gpu-h100"  # the real H100 captures


def test_ucx_memory_registration_enomem_is_the_memlock_limit() -> None:
    """UCX's uct_ib_md reports a failed registration as "<dev>: <call>(<args>) failed: %m";
    ENOMEM there is the locked-memory limit, like NCCL's "Call to ibv_reg_mr failed with
    error Cannot allocate memory" (a container's 8 MB memlock inherited from dockerd)."""
    d = excerpt("j-memlock-mlperf-automations-664")
    assert lead(d) == "IB-MEMLOCK", ids(d)
    assert "mlx5dv_devx_umem_reg" in d.first.cause
    # another errno on the same call is not the limit
    other = diagnose_lines(["UCX  ERROR mlx5_0: mlx5dv_devx_umem_reg(size=131072 access=0x0) failed: Bad address"], "efault")
    assert "IB-MEMLOCK" not in ids(other), ids(other)
    # NCCL's own wording keeps its reading
    assert lead(excerpt("ib-nccl-tests-206")) == "IB-MEMLOCK"


def test_torch_signal_exception_for_sighup_is_the_hangup() -> None:
    """torch's elastic SignalException "Process <pid> got signal: <sigval>" for signal 1
    (the pasted form "got sigval:1" included): the launcher's terminal closed.  Signal 15
    (a scheduler's SIGTERM) is not a hang-up."""
    d = excerpt("i-sighup-nohup-chatglm2-262")
    assert lead(d) == "LAUNCH-SIGHUP", ids(d)
    term = diagnose_lines(["torch.distributed.elastic.multiprocessing.api.SignalException: Process 81061 got signal: 15"], "term")
    assert "LAUNCH-SIGHUP" not in ids(term), ids(term)


def test_gloo_unable_to_find_address_for_an_interface_name() -> None:
    """gloo's tcp/device.cc says "Unable to find address for: <x>" both for an interface
    (lookupAddrForIface: GLOO_SOCKET_IFNAME) and for a host name (lookupAddrForHostname);
    without the enforce prefix, a Linux interface name (eth0) is the interface, and a host
    name keeps its own reading."""
    d = excerpt("i-gloo-ifname-eth0-sparkrun-275")
    assert lead(d) == "ENV-GLOO-SYNTAX", ids(d)
    assert "eth0" in d.first.cause
    host = diagnose_lines(["RuntimeError: Unable to find address for: node17"], "host")
    assert "ENV-GLOO-SYNTAX" not in ids(host), ids(host)
    assert lead(excerpt("host-pipedream-32")) == "GLOO-ADDR"
    assert lead(excerpt("d-gloo-ifname-ib0-hardcoded-YOLOX-119")) == "ENV-GLOO-SYNTAX"


def test_torchs_own_raise_of_no_nccl_in_a_traceback() -> None:
    """torch's distributed_c10d.py raises "Distributed package doesn't have NCCL built in"
    with the literal split in two ("... NCCL " "built in"); a traceback that ends on that
    source line is the Windows/CPU build without NCCL, not a clean log."""
    d = excerpt("j-nonccl-whisper-vits-svc-97")
    assert lead(d) == "ENV-NO-NCCL", ids(d)
    mpi = diagnose_lines(["RuntimeError: Distributed package doesn't have MPI built in. MPI is only included if you build PyTorch from source on a host that has MPI installed."], "mpi")
    assert lead(mpi) == "C10D-BACKEND-MISSING", ids(mpi)


def test_cuda_error_803_is_the_driver_mismatch() -> None:
    """CUDA's error 803 (cudaErrorSystemDriverMismatch), as torch prints "Error 803: ..."
    whatever the wording after it: the user-space driver is not the kernel module's."""
    d = excerpt("i-driver-gitcode-695c2a5b")
    assert lead(d) == "CUDA-DRIVER-MISMATCH", ids(d)
    other = diagnose_lines(["RuntimeError: Error 804: forward compatibility was attempted on non supported HW"], "804")
    assert lead(other) == "CUDA-DRIVER-MISMATCH", ids(other)
    unrelated = diagnose_lines(["HTTP Error 803: something else"], "x")
    assert "CUDA-DRIVER-MISMATCH" not in ids(unrelated)


def test_nccl_connect_to_loopback_is_a_peer_that_advertised_loopback() -> None:
    """NCCL's socket layer connects to the address a peer advertised ("Connect to
    <addr><<port>> failed", misc/socket.cc); a failed connect to 127.0.0.1 (here inside
    srun --label's joined lines) is a rank bootstrapping on lo, which explains the generic
    connect failure.  The same failure to a routable address keeps BOOT-CONN."""
    d = excerpt("i-interface-awsome-distributed-ai-192")
    assert lead(d) == "AR-BOOT-LOOPBACK", ids(d)
    assert "BOOT-CONN" in ids(d)
    assert "127.0.0.1<45069>" in d.first.evidence[0]
    routable = excerpt("i-iface-gitcode-c78323ca")
    assert lead(routable) == "BOOT-CONN", ids(routable)
    assert "AR-BOOT-LOOPBACK" not in ids(routable)


def test_cuda_failure_while_creating_a_dev_shm_segment_is_dev_shm_too_small() -> None:
    """NCCL's shmutils maps /dev/shm/nccl-<id> and registers it with CUDA; a "Cuda failure"
    followed by "Error while creating shared memory segment /dev/shm/nccl-<id> (size N)"
    is that registration failing on pages /dev/shm cannot back (a 64 MB container).  A
    CUDA failure alone stays BOOT-CUDA, and the older segment name without /dev/shm (the
    permission threads) keeps its reading."""
    d = excerpt("i-shm-gitcode-b8ec7f55")
    assert lead(d) == "SHM-SIZE", ids(d)
    assert any("/dev/shm/nccl-NzwJ7O" in e for e in d.first.evidence)
    alone = diagnose_lines(["node1:1234:1300 [0] NCCL WARN Cuda failure 'invalid argument'"], "cuda")
    assert lead(alone) == "BOOT-CUDA", ids(alone)
    assert "SHM-SIZE" not in ids(alone)
    assert lead(excerpt("c-shm-perm-pytorch-37004")) == "SHM-PERM"


def test_two_nccl_tests_headers_before_any_device_are_independent_jobs() -> None:
    """nccl-tests prints "# Using devices" and its device list once per run, from rank 0
    only under MPI; two headers before any device line (two processes starting at once)
    are one job per process: mpirun of a binary whose MPI does not fit (nccl-tests#213).
    The real H100 nccl-tests capture pasted twice (header, devices, table, summary, then
    the same again) is two runs one after the other and stays silent."""
    d = excerpt("i-launcher-nccl-tests-213")
    assert lead(d) == "LAUNCH-INDEPENDENT-JOBS", ids(d)
    assert all("Using devices" in e for e in d.first.evidence)
    run = (GPU / "ddptui" / "nccl-tests.txt").read_text(encoding="utf-8").splitlines()
    twice = diagnose_lines(run + run, "nccl-tests-twice")
    assert "LAUNCH-INDEPENDENT-JOBS" not in ids(twice), ids(twice)
    assert not [f for f in twice.findings if f.severity == "error"], ids(twice)
