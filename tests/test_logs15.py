"""Round logs15 (issue 15): general readings of blind batch J's misses that name an id,
each read from the printing program's own message format (torch's TCPStore, NCCL, Ray,
UCX, Python's os.environ) and checked on the real excerpt as pasted, and on the
neighbours it must leave alone."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from corpus_excerpts import CORPUS, excerpt, ids, lead

from ddptui.logs.diagnose import diagnose_lines


def test_tcpstore_client_names_a_host_that_does_not_resolve() -> None:
    """torch's TCPStore.cpp: "TCP client failed to connect/validate to host {host}:{port} -
    ...": with getaddrinfo's own text ("Name or service not known") the host name did not
    resolve (PING-GAI leads the rendezvous wrapper); a timeout keeps its reading."""
    d = excerpt("j1-hostname-ai-on-eks-240")
    assert lead(d) == "PING-GAI", ids(d)
    assert "slinky-0" in d.first.cause
    timeout = diagnose_lines(
        ["[W728 15:01:59.562622567 TCPStore.cpp:340] [c10d] TCP client failed to connect/validate to host 127.0.0.1:48315 - retrying (try=0, timeout=600000ms, delay=33924ms): The client socket has timed out after 600000ms while trying to connect to (127.0.0.1, 48315)."],
        "t",
    )
    assert "PING-GAI" not in ids(timeout), ids(timeout)


def test_nccl_socket_devices_pasted_without_nccl_prefix() -> None:
    """NCCL's "NET/Socket : Using [0]if:addr<0> [1]if:addr<0>" pasted without its
    "host:pid:tid [dev] NCCL INFO" prefix still states the devices NCCL chose; the connect
    refused to the link-local one (port elided as "<...>") names the interface that failed."""
    d = excerpt("j1-interface-podid-linklocal-aws-do-eks-54")
    assert lead(d) == "LOGS-IF-LINKLOCAL", ids(d)
    assert "pod-id-link0" in d.first.cause
    healthy = diagnose_lines(
        [
            "NET/Socket : Using [0]enp73s0:10.1.216.156<0> [1]pod-id-link0:169.254.170.23<0>",
            "Connected all rings",
        ],
        "ok",
    )
    assert all(f.severity != "error" for f in healthy.findings), ids(healthy)


def test_ray_worker_gone_without_a_crash_of_its_own_is_the_oom_killer() -> None:
    """Ray's "Worker unexpectedly exits with a connection error code 2. End of file." (exit
    type SYSTEM_ERROR) with no crash of the worker in the log: a SIGKILL, the OOM killer.
    The same message beside the worker's own segmentation fault is no OOM kill."""
    d = excerpt("j2-oom-ray-31828")
    assert lead(d) == "HOST-OOM-KILL", ids(d)
    lines = [*CORPUS["j2-oom-ray-31828"].lines, "Fatal Python error: Segmentation fault"]
    crashed = diagnose_lines(lines, "segv")
    assert "HOST-OOM-KILL" not in ids(crashed), ids(crashed)


def test_torch_without_nccl_with_the_apostrophe_escaped_by_the_paste() -> None:
    """torch's "Distributed package doesn't have NCCL built in" with the paste's \\'."""
    assert lead(excerpt("j2-nonccl-windows-accelerate-141")) == "ENV-NO-NCCL"


def test_keyerror_on_a_launcher_variable_is_a_run_without_the_launcher() -> None:
    """os.environ["RANK"] raising KeyError: 'RANK' (os.py __getitem__) is env:// without
    torchrun; a key that is no launcher variable keeps its reading."""
    d = excerpt("j2-envmissing-pytorch-ddp-2")
    assert lead(d) == "ENV-MISSING", ids(d)
    assert "RANK" in d.first.cause
    for key in ("RANKING", "rank", "MASTER"):
        other = diagnose_lines(["Traceback (most recent call last):", f"KeyError: '{key}'"], "k")
        assert "ENV-MISSING" not in ids(other), (key, ids(other))


def test_ray_dials_gcs_at_an_empty_host() -> None:
    """`ray start --address=:6379` and Ray's gcs_rpc_client "Failed to connect to GCS at
    address :6379": the script's $MASTER_ADDR expanded to nothing.  A real address is not
    an empty one."""
    d = excerpt("j2-emptyaddr-ray-mm-eureka-54")
    assert lead(d) == "LAUNCH-EMPTY-ADDR", ids(d)
    real = diagnose_lines(
        ["[2025-07-23 10:05:49,679 W 51000 51000] gcs_rpc_client.h:151: Failed to connect to GCS at address 10.0.0.1:6379 within 5 seconds."],
        "r",
    )
    assert "LAUNCH-EMPTY-ADDR" not in ids(real), ids(real)


def test_ib_hcas_named_but_none_found_runs_over_sockets() -> None:
    """NCCL's "NCCL_IB_HCA set to mlx5_0:1,..." then "NET/IB : No device found." and "Using
    network Socket": IB the job asked for and NCCL does not use (never clean).  An
    exclusion list (^mlx5_bond) names no device to expect."""
    d = excerpt("j3-ib-rdma-off-llamafactory-6111")
    assert lead(d) == "AR-IB-UNUSED", ids(d)
    line = CORPUS["j3-ib-rdma-off-llamafactory-6111"].lines[0]
    excluded = diagnose_lines([line.replace("set to mlx5_0:1", "set to ^mlx5_0:1")], "x")
    assert "AR-IB-UNUSED" not in ids(excluded), ids(excluded)


def test_cuda_failure_inside_nccls_p2p_transport_is_p2p_ipc() -> None:
    """A CUDA failure NCCL reports from transport/p2p.cc is its P2P (CUDA IPC / cuMem)
    transport failing; out of memory there, or a CUDA failure elsewhere, stays BOOT-CUDA."""
    d = excerpt("j3-p2p-cumem-off-nemo-rl-564")
    assert lead(d) == "P2P-IPC", ids(d)
    for line in (
        "transport/p2p.cc:298 NCCL WARN Cuda failure 'out of memory'",
        "transport/net.cc:700 NCCL WARN Cuda failure 'invalid argument'",
    ):
        assert lead(diagnose_lines([line], "c")) == "BOOT-CUDA", line


def test_ucx_cannot_allocate_a_completion_queue_is_memlock() -> None:
    """UCX's "ibv_create_cq(cqe=4096) failed: Cannot allocate memory" without a device
    prefix: the locked-memory limit (a container without IPC_LOCK)."""
    d = excerpt("j3-ib-ipc-lock-mscclpp-335")
    assert lead(d) == "IB-MEMLOCK", ids(d)
    assert "IPC_LOCK" in d.first.fix
