"""Round logs22 (issue 15, blind batch O).  New ids for causes that recur across the
corpus and whose pasted lines carry them (the watchdog's event query refused during a
HIP/CUDA graph capture; pyxis/enroot failing under Slurm; NCCL's IB transport with
GPUDirect RDMA off for want of a detected peer-memory module), and O's misses whose id
exists (ROCm torch's "No HIP GPUs are available"; a SIGKILL while rank 0's model state is
copied to every rank).  Each is checked on every real excerpt that establishes it and on
a healthy neighbour that must stay silent."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from pathlib import Path

from corpus_excerpts import CORPUS, excerpt, ids, lead

from ddptui.logs.diagnose import diagnose_lines

H100 = Path(__file__).parent / "fixtures" / "gpu-h100" / "nccl-env" / "algo.log"


def test_the_watchdog_dying_during_graph_capture_is_its_event_query_refused() -> None:
    """vLLM#31259 (the watchdog's exception in one line) and SGLang#29235 (HIP's
    hipErrorCapturedEvent, then the watchdog's death): C10D-WATCHDOG-CAPTURE leads the
    abort and the unrecognized lines."""
    for name in ("o1-hipcapture-vllm-31259", "o1-hipcapture-sglang-29235"):
        d = excerpt(name)
        assert lead(d) == "C10D-WATCHDOG-CAPTURE", (name, ids(d))
        assert d.first is not None and d.first.severity == "error"
        assert "TORCH_NCCL_BLOCKING_WAIT=1" in d.first.fix


def test_graph_capture_alone_or_a_refusal_without_the_watchdog_is_not_it() -> None:
    healthy = [
        "Capturing CUDA graphs (decode, FULL): 100%|██████████| 67/67 [00:05<00:00, 12.1it/s]",
        "INFO 11-26 10:00:00 [gpu_model_runner.py:2000] Graph capturing finished in 6 secs, took 0.52 GiB",
    ]
    assert diagnose_lines(healthy, "x").first is None
    own = ["RuntimeError: CUDA error: operation not permitted when stream is capturing"]
    assert "C10D-WATCHDOG-CAPTURE" not in ids(diagnose_lines(own, "x"))


def test_pyxis_not_running_enroot_is_the_container_plugin_failing() -> None:
    """awsome-distributed-ai#141 (the epilog's "pyxis: couldn't execute enroot command",
    enroot's mkdir permission denied: the node drains) and NeMo Gym#2781 (enroot's
    98-nvidia.sh hook exiting 1 after nvidia-container-cli's ldcache error)."""
    for name, said in (
        ("o2-enroot-dir-perm-drain-awsome-distributed-ai-141", "Permission denied"),
        ("o2-enroot-ldconfig-hook-Gym-2781", "ldcache error"),
    ):
        d = excerpt(name)
        assert lead(d) == "SLURM-PYXIS-ENROOT", (name, ids(d))
        assert d.first is not None and said in " ".join(d.first.evidence), d.first.evidence


def test_pyxis_importing_an_image_is_healthy() -> None:
    ok = [
        "pyxis: importing docker image: nvcr.io/nvidia/pytorch:24.01-py3",
        "pyxis: imported docker image: nvcr.io/nvidia/pytorch:24.01-py3",
        "0: [rank0]: step 10 loss 2.31",
    ]
    assert diagnose_lines(ok, "x").findings == ()
    # nvidia-container-cli under Docker (no pyxis, no enroot hook) is not pyxis's failure
    docker = ["nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown"]
    assert "SLURM-PYXIS-ENROOT" not in ids(diagnose_lines(docker, "x"))


def test_gpudirect_rdma_disabled_on_every_hca_is_no_peermem_detected() -> None:
    """NCCL#1676 (NCCL <= 2.22.3 missing the renamed nvidia-peermem) and the gitcode case
    (NCCL 2.19.4): NCCL's topo.cc "NET/IB : GPU Direct RDMA Disabled for HCA" and no HCA
    enabled; no longer called clean.  An NCCL the log states below 2.23.4 is named."""
    for name in ("o2-gdr-peermem-detect-nccl-1676", "i-gdr-gitcode-1bdf37a7"):
        d = excerpt(name)
        assert lead(d) == "NCCL-GDR-NOPEERMEM", (name, ids(d))
        assert d.first is not None and d.first.severity == "warning"
    lines = ["learn01:1:1 [3] NCCL INFO NCCL version 2.22.3+cuda12.4", *CORPUS["o2-gdr-peermem-detect-nccl-1676"].lines]
    d = diagnose_lines(lines, "x")
    assert d.first is not None and "NCCL 2.22.3 predates 2.23.4" in d.first.summary, d.first.summary
    newer = ["learn01:1:1 [3] NCCL INFO NCCL version 2.23.4+cuda12.4", *CORPUS["o2-gdr-peermem-detect-nccl-1676"].lines]
    d = diagnose_lines(newer, "x")
    assert d.first is not None and "predates" not in d.first.summary


def test_gpudirect_rdma_enabled_or_sockets_never_doing_it_is_silent() -> None:
    on = [
        "node1:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'",
        "node1:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_bond_0'",
    ]
    assert "NCCL-GDR-NOPEERMEM" not in ids(diagnose_lines(on, "x"))
    # a real healthy H100 capture: NET/Socket's "Disabled for HCA 0 'eth0'" (sockets)
    text = H100.read_text(encoding="utf-8", errors="replace").splitlines()
    assert "GPU Direct RDMA Disabled" in "\n".join(text)
    assert "NCCL-GDR-NOPEERMEM" not in ids(diagnose_lines(text, str(H100)))


def test_rocm_torch_seeing_no_gpu_and_a_sigkill_in_model_sync() -> None:
    """vLLM#29556: ROCm's torch says HIP where CUDA's says CUDA; cosmos-predict2.5#72: a
    SIGKILL while rank 0's model state is copied to every rank is the OOM killer; the
    same step with no kill, or a kill a scheduler names, is not."""
    d = excerpt("o1-nohipgpu-vllm-29556")
    assert lead(d) == "ENV-NOGPU-VISIBLE", ids(d)
    d = excerpt("o2-host-ram-sigkill-cosmos-predict2.5-72")
    assert lead(d) == "HOST-OOM-KILL", ids(d)
    sync = "[sync_model_states] Synchronizing model states from rank 0 to all ranks"
    assert diagnose_lines([sync, "step 1 loss 0.5"], "x").findings == ()
    slurm = [sync, "slurmstepd: error: Detected 1 oom_kill event in StepId=12.0. Some of the step tasks have been OOM Killed.", "exitcode  : -9 (SIGKILL)"]
    assert lead(diagnose_lines(slurm, "x")) != "HOST-OOM-KILL"


def test_rccls_iommu_warning_alone_is_quiet_but_not_beside_a_failure() -> None:
    """ROCm/rocm-systems#7916: RCCL's "Missing iommu=pt" warning is a false positive
    where passthrough is the kernel's default: alone it is not reported; beside a
    watchdog timeout it still reads as P2P-IOMMU."""
    d = excerpt("o1-healthy-iommu-warn-rocm-systems-7916")
    assert d.findings == (), ids(d)
    warn = CORPUS["o1-healthy-iommu-warn-rocm-systems-7916"].lines[0]
    hang = "[rank1]:[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out."
    assert "P2P-IOMMU" in ids(diagnose_lines([warn, hang], "x"))


def test_rccls_scratch_reclaim_hint_is_healthy_its_fatal_refusal_is_not() -> None:
    """rccl#1683: RCCL's "HSA_NO_SCRATCH_RECLAIM is not set ... perf impact!" warning on a
    run that went on is silent; ATOM#913's "[FATAL ERROR]: ... must be set" is not clean."""
    assert excerpt("o1-healthy-scratchwarn-rccl-1683").findings == ()
    assert lead(excerpt("o1-scratchreclaim-atom-913")) is not None


def test_the_loader_refusing_a_libfabric_symbol_version_is_the_ofi_plugin_mismatch() -> None:
    """awsome-distributed-ai#292 (aws-ofi-nccl 1.9.0 wants FABRIC_1.7) and #284 (libfabric
    wants EFA_1.2): glibc's "version `X' not found (required by ...)" for the OFI stack."""
    for name, ver in (
        ("k2-plugin-libfabric-awsome-distributed-ai-292", "FABRIC_1.7"),
        ("l2-ofi-plugin-libfabric-skew-awsome-distributed-ai-284", "EFA_1.2"),
    ):
        d = excerpt(name)
        assert lead(d) == "NCCL-OFI-LIBFABRIC", (name, ids(d))
        assert d.first is not None and ver in d.first.summary, d.first.summary


def test_no_plugin_at_all_or_another_librarys_version_is_not_the_ofi_mismatch() -> None:
    absent = [
        "::16674:16674 [0] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object file: No such file or directory",
        "::16674:16674 [0] NCCL INFO NET/Plugin : No plugin found, using internal implementation",
    ]
    assert diagnose_lines(absent, "x").findings == ()
    assert excerpt("o1-healthy-netplugin-rccl-92").findings == ()
    cxx = ["ImportError: /lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.30' not found (required by /opt/conda/lib/libnccl-net.so)"]
    assert "NCCL-OFI-LIBFABRIC" not in ids(diagnose_lines(cxx, "x"))


def test_envoys_own_words_are_an_istio_sidecar_in_the_rendezvous() -> None:
    """kubeflow/trainer#1634 (Envoy's RBAC denial, the only line) and #1636 (istio-proxy's
    debug log dropping the inbound|23456 cluster): no longer unrecognized or clean."""
    for name, said in (
        ("l2-istio-sidecar-kubeflow-trainer-1634", "RBAC"),
        ("j3-rdzv-istio-sidecar-kubeflow-trainer-1636", "port 23456"),
    ):
        d = excerpt(name)
        assert lead(d) == "K8S-ISTIO-SIDECAR", (name, ids(d))
        assert d.first is not None and said in d.first.summary, d.first.summary
        assert 'sidecar.istio.io/inject: "false"' in d.first.fix


def test_envoy_flushing_its_stats_is_not_a_sidecar_in_the_way() -> None:
    lines = [
        "2022-07-19T18:01:59.198872Z\tdebug\tenvoy main\tflushing stats",
        "[rank0]: step 10 loss 0.52",
    ]
    assert diagnose_lines(lines, "x").findings == ()
