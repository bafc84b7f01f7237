"""Round logs32 (blind batch X: inference-serving and NVIDIA stacks' troubleshooting pages,
published run logs): each reading on the real excerpt it came from
(tests/fixtures/corpus/round11x.yaml), through the real log diagnosis, both feeds (lines
held in memory, and the byte chunks a file or a node gives)."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "corpus"))

from logchunks import first_via_chunks
from score import load_corpus, score

from ddptui.logs.diagnose import diagnose_lines

X = {e.id: e for e in load_corpus() if e.source == "round11x.yaml"}


def _got(eid: str) -> str | None:
    [v] = score([X[eid]])
    return v.got


def _via_chunks(lines: list[str]) -> str | None:
    """The CLI's path: the excerpt as a file's bytes, cut into small chunks."""
    return first_via_chunks(lines, "x.log")


def _errors(lines: list[str]) -> list[str]:
    return [f.id for f in diagnose_lines(lines).findings if f.severity == "error"]


def test_another_jobs_slurm_lines_spliced_into_a_run_that_goes_on_are_not_its_failure() -> None:
    eid = "x2-healthy-unimatch-voc1464-run2-interleaved-cancel"
    lines = list(X[eid].lines)
    assert _errors(lines) == []
    assert _got(eid) is None and _via_chunks(lines) is None
    # the same Slurm lines where they start their line: the run was cancelled
    cut = lines.index("phoenix-srun: Job step aborted: Waiting up to 2 seconds for job step to finish.")
    own = [*lines[: cut - 1], "[2022-07-31 01:59:32,811][    INFO] Iters: 284, Total loss: 0.034", "phoenix-srun: Force Terminated job 5480", *lines[cut:]]
    assert "SLURM-CANCELLED" in _errors(own)
    # spliced, but the file ends with them (nothing of the run after): still a failure
    ends = lines[: cut + 5]
    assert _errors(ends) != [] and _via_chunks(ends) is not None
    # spliced, and a failure line of the run comes after them: still a failure
    failing = [*lines, "RuntimeError: CUDA error: an illegal memory access was encountered"]
    assert _errors(failing) != []


def test_open_mpi_without_slurms_pmi_under_srun_is_an_honest_unknown_not_clean() -> None:
    eid = "x1-slurm-pmi-ompi-trtllm-troubleshooting"
    lines = list(X[eid].lines)
    d = diagnose_lines(lines)
    assert d.first is not None and d.first.id == "LOGS-UNRECOGNIZED"
    assert "PMI2_Init failed to initialize" in d.first.cause
    assert _via_chunks(lines) == "LOGS-UNRECOGNIZED"


def test_a_kubernetes_startup_probe_kill_is_read_like_a_liveness_kill() -> None:
    eid = "x1-k8s-startup-probe-vllm-k8s-troubleshooting"
    assert _got(eid) == "K8S-LIVENESS-KILL"
    assert _via_chunks(list(X[eid].lines)) == "K8S-LIVENESS-KILL"
    # the kubelet's event as `kubectl describe pod` prints it
    d = diagnose_lines(["  Warning  Unhealthy  12s (x30 over 5m)  kubelet  Startup probe failed: Get \"http://10.0.0.5:8000/health\": dial tcp 10.0.0.5:8000: connect: connection refused"])
    assert d.first is not None and d.first.id == "K8S-LIVENESS-KILL"


def test_python_etcds_failed_machine_list_is_the_etcd_connection_not_a_bare_dns_error() -> None:
    eid = "x1-rdzv-etcd-dns-elastic-k8s-troubleshooting"
    assert _got(eid) == "TORCHRUN-ETCD-CONN"
    assert _via_chunks(list(X[eid].lines)) == "TORCHRUN-ETCD-CONN"
    # the name-resolution error alone (no etcd client line) stays what it was
    d = diagnose_lines(["socket.gaierror: [Errno -2] Name or service not known"])
    assert d.first is not None and d.first.id == "PING-GAI-PY"


def test_argparses_local_rank_rejection_pasted_without_its_program_name() -> None:
    eid = "x2-local-rank-arg-nerv-readme"
    assert _got(eid) == "LAUNCH-LOCAL-RANK-ARG"
    assert _via_chunks(list(X[eid].lines)) == "LAUNCH-LOCAL-RANK-ARG"
    # another argument rejected without the program name is no --local-rank case
    d = diagnose_lines(["error: unrecognized arguments: --epochs=3"])
    assert d.first is None or d.first.id != "LAUNCH-LOCAL-RANK-ARG"


def test_the_first_collectives_timeout_names_no_rank_elsewhere_by_its_number_alone() -> None:
    # ALCF's nccl-tests write-up: ranks 1 and 2 time out in SeqNum 1 (the process group's
    # first all-reduce, which also connects NCCL's communicator); rank 0 aborted (code 134)
    # like them.  "Ranks 1, 2 wait, so rank 0 was elsewhere" is not read there
    eid = "x2-timeout-gdr-phb-ofi-alcf-nccl-tests"
    lines = list(X[eid].lines)
    d = diagnose_lines(lines)
    assert d.first is not None and d.first.id == "WATCHDOG"
    assert "LOGS-NOT-IN-COLLECTIVE" not in {f.id for f in d.findings}
    assert _via_chunks(lines) == "WATCHDOG"
    # the same timeouts at a later collective: rank 0, below them, was elsewhere
    later = [line.replace("SeqNum=1,", "SeqNum=7,").replace("NCCL work: 1,", "NCCL work: 7,") for line in lines]
    d = diagnose_lines(later)
    assert d.first is not None and d.first.id == "LOGS-NOT-IN-COLLECTIVE" and d.first.rank == 0


def test_a_tracebacks_quoted_raise_source_line_is_code_and_the_exception_line_is_quoted() -> None:
    # vLLM's troubleshooting page: ncclCommInitRank's "unhandled system error" (the lines do
    # not say which system call: an honest unknown), quoted from its exception line
    eid = "x1-ib-ipclock-shm-vllm-troubleshooting"
    d = diagnose_lines(list(X[eid].lines))
    assert d.first is not None and d.first.id == "LOGS-UNRECOGNIZED"
    assert "RuntimeError: NCCL error: unhandled system error" in d.first.cause
    assert "raise RuntimeError" not in d.first.cause
    # the same message where a program prints it is still torch's NCCL error
    d = diagnose_lines(["RuntimeError: NCCL error: unhandled system error, NCCL version 2.18.1"])
    assert "C10D-NCCLERR" in {f.id for f in d.findings}
