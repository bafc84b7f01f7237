"""Round logs26 (issue 15, blind batch R: NVIDIA's and the clouds' repositories, HPC
centres' trackers and documentation).  The schedulers' and launchers' own noise stays
silent (slurmstepd's accounting and CPU-binding errors, srun's memory options, PMIx's
error-log trace, a log cut while other ranks were still in NCCL's init); the printing
programs' own words name the cause (NCCL's allocator missing a driver entry point, HIP's
"no binary for this GPU", the container runtime's driver check, c10d waiting on port 0,
slurmstepd unable to exec the spooled batch script); failure formats no signature knows
make an honest unknown, never a clean log.  Each on the real excerpt, and a neighbour
that must not be read the same way."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

import pytest
from corpus_excerpts import excerpt, ids, lead

from ddptui.logs.diagnose import diagnose_lines

HEALTHY = [
    "r2-healthy-srun-mem-flag-mila-faq-docs",
    "r2-healthy-slurmstepd-pss-uppmax-docs",
    "r2-healthy-ib-after-fix-dstack-2712",
    "r2-healthy-pmix-dstore-alcf-aurora-docs",
    "r2-healthy-slurmstepd-cgroup-shine-cluster-29",
]


@pytest.mark.parametrize("name", HEALTHY)
def test_scheduler_and_launcher_noise_on_a_working_run_is_silent(name: str) -> None:
    d = excerpt(name)
    assert d.first is None and not d.findings, (name, ids(d))


def test_the_same_scheduler_lines_beside_a_failure_do_not_hide_it() -> None:
    # the noise line is not the cause; a task that failed still fails the log
    d = diagnose_lines(
        [
            "slurmstepd: error: _get_pss: ferror() indicates error on file /proc/$$/smaps",
            "PMIX ERROR: PMIX_ERROR in file dstore_base.c at line 2334",
            "slurmstepd: error: execve(): /scratch/u/run.sh: Permission denied",
        ],
        "x",
    )
    assert lead(d) == "LOGS-UNRECOGNIZED" and d.first is not None and d.first.severity == "error"
    assert "execve" in d.first.summary or any("execve" in e for e in d.first.evidence)


def test_a_log_that_stops_at_init_start_with_no_one_else_in_init_still_stalls() -> None:
    lines = [
        "node1:697:739 [0] NCCL INFO Using network IB",
        "node1:697:739 [0] NCCL INFO NCCL version 2.26.2+cuda12.2",
        "node1:697:739 [0] NCCL INFO ncclCommInitRankConfig comm 0x171265c0 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 8d000 commId 0x1735d44e93dd5631 - Init START",
    ]
    assert lead(diagnose_lines(lines, "x")) == "LOGS-UNRECOGNIZED"


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("r1-nccl-incompat-dlc-3964", "NCCL-DRIVER-SYMBOLS"),
        ("r1-nemorun-rdzv-localhost0-run-292", "TORCHRUN-RDZV-ENDPOINT"),
        ("r2-slurm-execve-arjunausers-46", "SLURM-LAUNCH-FAILED"),
        ("r2-driver-old-jade-24", "CUDA-DRIVER-OLD"),
        ("r2-nokernel-xnack-olcf-frontier-docs", "CUDA-NO-KERNEL"),
    ],
)
def test_the_printing_programs_own_words_name_the_cause(name: str, want: str) -> None:
    d = excerpt(name)
    assert lead(d) == want, ids(d)


def test_their_neighbours_keep_their_own_reading() -> None:
    # NCCL's 'named symbol not found' outside its allocator: no kernel for the GPU (i-old-build-5090)
    assert lead(excerpt("i-old-build-5090-pytorch-152077")) == "CUDA-NO-KERNEL"
    # a launcher's own command missing is still that, not Slurm's spool
    d = diagnose_lines(["slurmstepd: error: execve(): torchrun: No such file or directory"], "x")
    assert lead(d) == "LAUNCH-CMD-NOTFOUND"
    # c10d waiting for a real port is torch's healthy retry, not an endpoint fault
    d = diagnose_lines(["[W socket.cpp:872] [c10d] No socket on (node0, 29500) is listening yet, will retry."], "x")
    assert "TORCHRUN-RDZV-ENDPOINT" not in ids(d)


# (r1-nccl1-multinode-nccl-33 left this list in logs36: NCCL 1's WARN format is read as
# LOGS-NCCL1, tests/test_logs36.py)
@pytest.mark.parametrize(
    "name",
    ["r1-te-ub-init-TransformerEngine-994", "r1-pcie-atomics-rccl-rocm-6520"],
)
def test_a_failure_format_no_signature_knows_is_an_honest_unknown(name: str) -> None:
    assert lead(excerpt(name)) == "LOGS-UNRECOGNIZED"


def test_every_task_srun_reports_killed_is_the_step_killed_at_its_time_limit() -> None:
    d = excerpt("r2-slurm-killed-timelimit-csc4005-51")
    assert lead(d) == "SLURM-TIMELIMIT", ids(d)
    assert d.first is not None and "node25" in d.first.cause


def test_one_task_killed_or_a_task_ending_otherwise_is_not_the_time_limit() -> None:
    one = diagnose_lines(["srun: error: node25: task 11: Killed"], "x")
    assert "SLURM-TIMELIMIT" not in ids(one), ids(one)
    mixed = diagnose_lines(
        ["srun: error: node25: task 11: Killed", "srun: error: node25: task 3: Out Of Memory", "srun: error: node25: task 9: Killed"],
        "x",
    )
    assert "SLURM-TIMELIMIT" not in ids(mixed), ids(mixed)
    ranged = diagnose_lines(["srun: error: node25: tasks 0-3: Killed"], "x")
    assert lead(ranged) == "SLURM-TIMELIMIT", ids(ranged)


def test_a_replica_pod_with_two_containers_failing_is_a_sidecar() -> None:
    d = excerpt("r2-k8s-istio-pytorch-operator-258")
    assert lead(d) == "K8S-ISTIO-SIDECAR", ids(d)
    one = diagnose_lines(["pytorch-dist-mnist-gloo-worker-0   0/1     CrashLoopBackOff   11         33m"], "x")
    assert "K8S-ISTIO-SIDECAR" not in ids(one), ids(one)


def test_an_uncorrectable_ecc_error_is_the_gpus_hardware() -> None:
    # jade-hpc-gpu#194 (torch's words) and MFC#1748 (the driver API's): one node's GPU
    for name in ("i-device-ecc-jade-194", "r2-device-ecc-node-mfc-1748"):
        d = excerpt(name)
        assert lead(d) == "GPU-ECC-UNCORRECTABLE", (name, ids(d))
    other = diagnose_lines(["RuntimeError: CUDA error: an illegal memory access was encountered"], "x")
    assert lead(other) == "RANK-CUDA-ERROR", ids(other)


def test_a_row_remapping_the_driver_made_is_not_a_failure() -> None:
    # ml-engineering's nvidia debug notes (blind T): Xid 63 records a row remapping (or a
    # page retirement) the driver made; training goes on past it. Xid 95 (uncontained) and
    # CUDA's own "uncorrectable ECC error" are the fault.
    d = excerpt("t1-healthy-xid63-row-remap-ml-engineering-nvidia-debug")
    assert [f.id for f in d.findings if f.severity == "error"] == [], ids(d)
    assert lead(excerpt("t1-ecc-uncorrectable-ml-engineering-nvidia-debug")) == "GPU-ECC-UNCORRECTABLE"
    fatal = diagnose_lines(["NVRM: Xid (PCI:0000:ca:00): 95, pid=1234, name=python, Uncontained: FBHUB."], "x")
    assert lead(fatal) == "GPU-ECC-UNCORRECTABLE", ids(fatal)
