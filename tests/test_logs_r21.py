"""Round 21's readings from its blind batch AT3 (tests/fixtures/corpus/round21at.yaml, scored
once before them). NCCL before 2.10.3 stops when a GPU's PCI path is missing from /sys
(graph/xml.cc's WARN, then ncclSystemError): NCCL-TOPO-SYSFS, which also names round 7's
WSL2 excerpt; aws-ofi-nccl's "Unable to register memory ... RC: -22" is the EFA installer's
libfabric older than this NCCL (NCCL-OFI-LIBFABRIC, which also names round 8's
aws-ofi-nccl#584). Two MLPerf runs that trained were LOGS-UNRECOGNIZED: multiprocessing's
exit finalizers raising in sem_unlink, and Slurm's NVML accounting line. Twins keep the
failures beside them."""

from __future__ import annotations

from corpus_excerpts import CORPUS, excerpt, ids

from ddptui.logs.diagnose import diagnose_lines

MARIAN = "at3-marian-vertexai-a100-old-nccl-pci-realpath"
WSL2 = "j1-device-wsl2-sysfs-nccl-573"
EFA = "at3-efa-ofi-register-memory-einval-old-efa-installer"
EFA_584 = "k2-efa-libfabric-nccl219-aws-ofi-nccl-584"
FINALIZERS = "at3-mlperf-v40-hpe-ssd-finalizer-tracebacks-after-success"
NVML = "at3-mlperf-v41-lambda-llama2-slurmstepd-nvml-ucc-warn-after-success"

FINALIZER_TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/usr/lib/python3.10/multiprocessing/util.py", line 300, in _run_finalizers',
    "    finalizer()",
    '  File "/usr/lib/python3.10/multiprocessing/util.py", line 224, in __call__',
    "    res = self._callback(*self._args, **self._kwargs)",
    '  File "/usr/lib/python3.10/multiprocessing/synchronize.py", line 87, in _cleanup',
    "    sem_unlink(name)",
    "FileNotFoundError: [Errno 2] No such file or directory",
]


def test_a_gpus_pci_path_missing_from_sys_is_an_nccl_before_2_10_3() -> None:
    for name in (MARIAN, WSL2):
        d = excerpt(name)
        assert d.first is not None and d.first.id == "NCCL-TOPO-SYSFS", (name, ids(d))
        assert "2.10.3" in d.first.fix and "/sys" in d.first.cause


def test_a_missing_ib_device_path_or_a_newer_nccls_scan_is_no_failure() -> None:
    # NCCL's IB transport and 2.29's PCI scan print the words and go on
    ib = "node1:77:77 [0] NCCL WARN Could not find real path of mlx5_4 (/sys/class/infiniband/mlx5_4/device)"
    scan = (
        "node1:77:77 [0] os/linux.cc:637 NCCL WARN Could not find real path of "
        "/sys/class/pci_bus/0000:c1/../../0000:c1:00.0"
    )
    for line in (ib, scan):
        d = diagnose_lines(["NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>", line, "NCCL INFO Init COMPLETE"])
        assert not any(f.severity == "error" for f in d.findings), (line, ids(d))


def test_ofi_refusing_to_register_gpu_memory_is_the_efa_libfabric() -> None:
    for name in (EFA, EFA_584):
        d = excerpt(name)
        assert d.first is not None and d.first.id == "NCCL-OFI-LIBFABRIC", (name, ids(d))
        assert "register GPU memory" in d.first.summary and "RC -22" in d.first.summary
        assert "FI_EFA_SET_CUDA_SYNC_MEMOPS=0" in d.first.fix and "1.29.1" in d.first.fix


def test_multiprocessing_exit_finalizers_are_teardown() -> None:
    assert excerpt(FINALIZERS).first is None
    d = diagnose_lines(["Epoch 3 done", *FINALIZER_TRACEBACK, *FINALIZER_TRACEBACK])
    assert d.first is None, ids(d)


def test_a_failure_before_the_finalizers_still_leads() -> None:
    oom = "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
    d = diagnose_lines([oom, *FINALIZER_TRACEBACK])
    assert d.first is not None and d.first.severity == "error" and d.first.id != "LOGS-UNRECOGNIZED", ids(d)


def test_the_same_exception_outside_the_finalizers_is_the_codes_own() -> None:
    own = [x.replace("multiprocessing/util.py", "train/loop.py") for x in FINALIZER_TRACEBACK]
    d = diagnose_lines(own)
    # logs39: a rank's own exception (it was an honest unknown before round 22)
    assert d.first is not None and d.first.id == "LOGS-APP-EXCEPTION", ids(d)
    assert any("FileNotFoundError" in e for e in d.first.evidence)


def test_slurms_nvml_accounting_line_is_no_failure() -> None:
    assert not any(f.severity == "error" for f in excerpt(NVML).findings), ids(excerpt(NVML))
    line = " 0: slurmstepd: error: NVML: Failed to get Compute running procs(7): Insufficient Size"
    task = " 0: slurmstepd: error: *** STEP 1234.0 ON node1 CANCELLED AT 2024-09-28T17:00:00 DUE TO TIME LIMIT ***"
    d = diagnose_lines([line, task])
    assert d.first is not None and d.first.id == "SLURM-TIMELIMIT", ids(d)


STORE_RETRY = "au3-torchcomms-tcpstore-recvvalue-transient-warning"


def test_a_store_read_torch_warned_about_and_got_past_is_a_warning() -> None:
    # torch logs "recvValue failed" at warning level, then rethrows; a caller that retried
    # and got through leaves only the warning (torchcomms#2358: the test completed)
    d = excerpt(STORE_RETRY)
    assert not any(f.severity == "error" for f in d.findings), ids(d)
    assert "C10D-RESET" in ids(d)


def test_the_same_read_followed_by_its_raise_is_still_an_error() -> None:
    warned = list(CORPUS[STORE_RETRY].lines)
    raised = "torch.distributed.DistNetworkError: Connection reset by peer"
    d = diagnose_lines([*warned, "Traceback (most recent call last):", raised])
    assert d.first is not None and d.first.severity == "error", ids(d)
    # and on an error-level line of its own
    d = diagnose_lines([warned[0].replace("[W506 ", "[E506 ", 1)])
    assert any(f.id == "C10D-RESET" and f.severity == "error" for f in d.findings), ids(d)
