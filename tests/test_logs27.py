"""Round logs27 (issue 15, blind batch S: HPC centres' documentation, NCCL's User Guide,
AWS HyperPod, Determined).  The printing programs' own words name the cause: Kueue's
preemption of a workload, NCCL RAS's Errors section (data missing from a job process;
its MISMATCH warning of a running job stays silent), nvidia-container-cli's unsatisfied
image requirement on the driver, a CUDA import refused in NCCL's P2P transport (the IMEX
channel); a new id, CONTAINER-GPU-ACCESS-LOST, for NVML's "Unknown Error" in a container
whose cgroup systemd rewrote (two threads establish it).  Each on the real excerpt, and a neighbour that must not be read the same way."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from pathlib import Path

import pytest
from corpus_excerpts import excerpt, ids, lead

from ddptui.job.ras import split_capture
from ddptui.logs.diagnose import diagnose_lines

RAS = Path(__file__).parent / "fixtures" / "job"


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("s1-k8s-hyperpod-kueue-preempted", "K8S-PREEMPTED"),
        ("s1-rank-crash-nccl-ras-incomplete-stopped", "JOB-RAS-PROBLEM"),
        ("s1-device-determined-nvidia-container-cuda10", "CUDA-DRIVER-OLD"),
        ("s1-p2p-nccl-docs-imex-channel-perm", "NCCL-MNNVL-IMEX"),
    ],
)
def test_the_printing_programs_words_name_the_cause(name: str, want: str) -> None:
    d = excerpt(name)
    assert lead(d) == want, (name, ids(d))
    assert d.first is not None and d.first.severity == "error"


def test_ras_names_the_process_node_gpu_and_rank_it_misses() -> None:
    f = excerpt("s1-rank-crash-nccl-ras-incomplete-stopped").first
    assert f is not None
    assert "172.16.64.213" in f.summary and "GPU 5" in f.summary and "rank 21" in f.summary
    assert any("The missing rank: 21" in e for e in f.evidence)


def test_ras_mismatch_warning_of_a_running_job_is_silent() -> None:
    d = excerpt("s1-healthy-nccl-ras-mismatch-opcount")
    assert d.first is None and not d.findings, ids(d)


@pytest.mark.parametrize("name", ["nccl-ras-healthy-job.txt", "nccl-ras-during-hang.txt"])
def test_the_real_h100_ras_answers_with_nothing_missing_raise_no_ras_problem(name: str) -> None:
    # real RAS replies recorded on an H100 (../shared/reference/gpu-h100/job-hang): every
    # communicator RUNNING/OK, no missing rank
    text = (RAS / name).read_text()
    assert split_capture(text)  # the capture is what the job view reads too
    d = diagnose_lines(text.splitlines(), name)
    assert "JOB-RAS-PROBLEM" not in ids(d)
    assert not [f for f in d.findings if f.severity == "error"], ids(d)


def test_kueue_pending_for_quota_alone_is_not_a_preemption() -> None:
    lines = [
        "    Message:               couldn't assign flavors to pod set worker: borrowing limit for nvidia.com/gpu in flavor ml.g5.8xlarge exceeded",
        "    Reason:                Pending",
        "    Type:                  QuotaReserved",
    ]
    assert "K8S-PREEMPTED" not in ids(diagnose_lines(lines, "x"))


def test_an_unsatisfied_gpu_arch_requirement_is_not_an_old_driver() -> None:
    line = "nvidia-container-cli: requirement error: unsatisfied condition: arch >= 7.0"
    assert "CUDA-DRIVER-OLD" not in ids(diagnose_lines([line], "x"))


def test_another_cuda_failure_in_the_p2p_transport_is_not_imex() -> None:
    line = "node1:1234:1300 [0] transport/p2p.cc:275 NCCL WARN Cuda failure 'out of memory'"
    assert lead(diagnose_lines([line], "x")) != "NCCL-MNNVL-IMEX"


def test_mps_is_named_where_cuda_says_every_device_is_busy() -> None:
    f = excerpt("s1-device-determined-slurm-mps-busy").first
    assert f is not None and f.id == "GPU-EXCLUSIVE"
    assert "MPS" in f.cause and "CUDA_MPS_PIPE_DIRECTORY" in f.fix


@pytest.mark.parametrize(
    "name",
    ["q2-nvml-cgroup-daemon-reload-nvidia-docker-1730", "s1-device-nvct-nvml-unknown-daemon-reload"],
)
def test_nvml_unknown_error_is_a_container_that_lost_its_gpus(name: str) -> None:
    # two threads (NVIDIA's NOTICE in nvidia-docker#1730, the Container Toolkit's
    # troubleshooting page) establish it: a systemd cgroup reload took the GPUs away
    d = excerpt(name)
    assert lead(d) == "CONTAINER-GPU-ACCESS-LOST", ids(d)
    assert d.first is not None and d.first.severity == "error"
    assert "daemon-reload" in d.first.cause and "create-dev-char-symlinks" in d.first.fix


def test_nvml_failing_for_another_reason_is_not_a_lost_container() -> None:
    line = "Failed to initialize NVML: Driver/library version mismatch"
    assert "CONTAINER-GPU-ACCESS-LOST" not in ids(diagnose_lines([line], "x"))
