"""Round logs20 (issue 15: no failing log called clean; fewer wrong causes).  Each reading
is a printing program's own message format, checked on the real excerpts as pasted and on
the healthy neighbours it must leave alone."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from corpus_excerpts import CORPUS, excerpt, ids, lead

from ddptui.logs.diagnose import diagnose_lines


def _errors(lines: list[str]) -> list[str]:
    return [f.id for f in diagnose_lines(lines, "x").findings if f.severity == "error"]


def test_the_loaders_version_error_is_a_failure_even_inside_nccls_plugin_line() -> None:
    """glibc's "version `X' not found (required by LIB)" (a library built against a newer
    one) is no longer called clean, whether NCCL's plugin dlerror quotes it
    (awsome-distributed-ai#292) or it was pasted alone (#284); NCCL's ordinary "No plugin
    found" line stays silent.  Since logs22 a FABRIC_/EFA_ version of the OFI plugin stack
    has its own id (NCCL-OFI-LIBFABRIC); another library's version stays an honest unknown."""
    for name in ("k2-plugin-libfabric-awsome-distributed-ai-292", "l2-ofi-plugin-libfabric-skew-awsome-distributed-ai-284"):
        d = excerpt(name)
        assert lead(d) == "NCCL-OFI-LIBFABRIC", (name, ids(d))
        assert d.first is not None and d.first.severity == "error"
        assert "not found (required by" in " ".join(d.first.evidence), d.first.evidence
    other = "ImportError: /lib/x86_64-linux-gnu/libm.so.6: version `GLIBC_2.29' not found (required by /opt/conda/lib/libtorch_cpu.so)"
    d = diagnose_lines([other], "x")
    assert lead(d) == "LOGS-UNRECOGNIZED" and d.first is not None and d.first.severity == "error", ids(d)
    quiet = "host:1:1 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation"
    assert diagnose_lines([quiet], "x").first is None
    # the loader's harmless note about a library without version tags is no failure
    note = "/bin/bash: /opt/conda/lib/libtinfo.so.6: no version information available (required by /bin/bash)"
    assert _errors([note]) == [] and diagnose_lines([note], "x").first is None


def test_torchs_legacy_cuda_check_failure_is_a_failure() -> None:
    """THCudaCheck FAIL file=F line=N error=E : msg (torch <= 1.x's CUDA check): an honest
    unknown where no signature knows the message (maskrcnn-benchmark#423), the known
    message's own id where one does ("invalid device ordinal")."""
    d = excerpt("l2-bad-install-maskrcnn-benchmark-423")
    assert lead(d) == "LOGS-UNRECOGNIZED" and d.first is not None and d.first.severity == "error", ids(d)
    ordinal = [e for e in CORPUS.values() if any("THCudaCheck FAIL" in x and "invalid device ordinal" in x for x in e.lines)]
    assert ordinal
    for e in ordinal:
        got = lead(excerpt(e.id))
        assert got in e.expected, (e.id, got)


def test_envoys_rbac_denial_keeps_a_log_from_being_clean() -> None:
    """Envoy's (Istio's sidecar) "rbac_access_denied_matched_policy[none]": a connection
    the mesh refused (kubeflow/trainer#1634) leads as an honest unknown, a warning (the
    sidecar's log is not the job's failure line).  Since logs22 it has its own id,
    K8S-ISTIO-SIDECAR, still a warning."""
    d = excerpt("l2-istio-sidecar-kubeflow-trainer-1634")
    assert lead(d) == "K8S-ISTIO-SIDECAR", ids(d)
    assert _errors(["RBAC: access denied"]) == []
    d = diagnose_lines(["RBAC: access denied"], "x")
    assert lead(d) == "K8S-ISTIO-SIDECAR" and d.first is not None and d.first.severity == "warning"
    assert diagnose_lines(["envoy rbac  enforced allowed, matched policy ns[x]"], "x").first is None


# Each program's own words when it stops (the formats their sources print), one line each.
_FATAL_FORMATS = (
    "python: error while loading shared libraries: libcudart.so.11.0: cannot open shared object file: No such file or directory",
    "Tue Nov 27 13:49:06 2018[1,10]<stdout>:F1127 13:49:06.743296 17418 hl_cuda_device.cc:565] Check failed: cudaSuccess == cudaStat (0 vs. 35) Cuda Error: out of memory",
    "*** Check failure stack trace: ***",
    "python: malloc.c:2379: sysmalloc: Assertion `(old_top == initial_top (av) && old_size == 0)' failed.",
    "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [0,0,0], thread: [0,0,0] Assertion `index >= -sizes[i] && index < sizes[i] && \"index out of bounds\"` failed.",
    "Fatal glibc error: malloc.c:4376 (_int_malloc): assertion failed: (unsigned long) (size) >= (unsigned long) (nb)",
    "terminate called without an active exception",
    "goroutine 1 [running]:",
    "nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown.",
    "docker: Error response from daemon: could not select device driver \"\" with capabilities: [[gpu]].",
    "Error: failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process",
    "collect2: error: ld returned 1 exit status",
    "exec /usr/local/bin/python: exec format error",
    "/usr/bin/env: 'python': No such file or directory",
    "[rank0]:[E ProcessGroupNCCL.cpp:1191] [PG 0 Rank 0] ProcessGroupNCCL's watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered",
    "[W socket.cpp:464] [c10d] The server socket has failed to listen on any local network address.",
    "mlx5: node3: got completion with error:",
    "cudaErrorNoDevice: no CUDA-capable device is detected",
    "RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR",
    "[proxy:0:0@node1] HYDU_sock_write (utils/sock/sock.c:256): write error (Bad file descriptor)",
    "Fatal error in PMPI_Init_thread: Other MPI error, error stack:",
    "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES",
    "cp: cannot create regular file '/ckpt/model.pt': No space left on device",
)


def test_programs_fatal_formats_are_failures_not_clean() -> None:
    """A log whose only failure line is a program's fatal format no signature knows is an
    honest unknown with exit 1, never "Nothing wrong found"; where a signature knows the
    message (a CUDA error torch names), that one may lead instead."""
    for line in _FATAL_FORMATS:
        d = diagnose_lines([line], "x")
        assert d.first is not None and d.first.severity == "error", (line, ids(d))


def test_their_healthy_neighbours_stay_silent() -> None:
    """What healthy runs print beside those formats: a CUDA poll's answer, glog's INFO and
    WARNING lines, a goroutine dump's other states, torch's socket retry note."""
    for line in (
        "cudaErrorNotReady",
        "W1127 13:49:06.743296 17418 f.cc:565] Check the config",
        "I1127 13:49:06.743296 17418 f.cc:565] Check failed: 0 tasks",
        "goroutine 12 [select]:",
        "/usr/bin/env python3 train.py",
        "cuBLAS: CUBLAS_STATUS_SUCCESS",
    ):
        assert _errors([line]) == [], (line, _errors([line]))
    for soft in (
        "UserWarning: CUDA initialization: CUDA driver initialization failed, you might not have a CUDA gpu.",
        "OSError: [Errno 5] Input/output error: '/nfs/data/shard-3.bin'",
        "Exception in thread Thread-3:",
    ):
        d = diagnose_lines([soft], "x")
        assert lead(d) == "LOGS-UNRECOGNIZED" and d.first is not None, (soft, ids(d))
    d = diagnose_lines(["UserWarning: CUDA initialization: CUDA driver initialization failed, you might not have a CUDA gpu."], "x")
    assert d.first is not None and d.first.severity == "warning", ids(d)
