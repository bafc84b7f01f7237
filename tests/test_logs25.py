"""Round logs25 (issue 15, blind batch Q).  No failing log is called clean: a program's
"Failed to <start/initialize/load> X: reason" and a loader's "could not load X library"
(NVML's and the device plugin's), PBS/Torque/Moab/LSF ending a job, a shell that cannot run
a program by its path are failure lines; an honest unknown's verdict, words and exit code
agree (failure lines: an error, "a failure", exit 1; warnings only: a warning, "no failure
line", exit 0).  The pieces of a family the signatures did not read: a torch build
without torch.distributed, NCCL's WARN from its graph/ sources, pyxis printing enroot's
log.  Each is checked on the real excerpt and on a neighbour that must not read the same."""

from __future__ import annotations

import pytest
from corpus_excerpts import CORPUS, excerpt, ids, lead

from ddptui.logs.diagnose import diagnose_lines

UNRECOGNIZED = "LOGS-UNRECOGNIZED"


@pytest.mark.parametrize(
    "name",
    [
        # (q2-nvml-cgroup-daemon-reload-nvidia-docker-1730, NVML's "Unknown Error", is named
        # since logs27: CONTAINER-GPU-ACCESS-LOST, tests/test_logs27.py)
        "q2-device-plugin-nvml-default-runtime-k8s-dp-23",  # Failed to start nvml ... could not load NVML library
        "q2-pbs-mem-hard-limit-cbio-cluster-251",  # Torque/Moab deleted the job
    ],
)
def test_a_failing_log_of_a_family_no_signature_knows_is_not_called_clean(name: str) -> None:
    d = excerpt(name)
    assert lead(d) == UNRECOGNIZED, ids(d)
    assert d.failed  # exit 1
    assert d.first is not None and d.first.cause.startswith("The log shows a failure")


def test_each_family_line_alone_is_a_failure_line() -> None:
    for line in (
        "Failed to initialize NVML: Driver/library version mismatch",
        "nvidia-device-plugin: Failed to start nvml with error: could not load NVML library",
        "=>> PBS: job killed: walltime 3617 exceeded limit 3600",
        "TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.",
        "job 12 exceeded MEM usage hard limit (2528 > 1126)",
        "sh: line 1: /usr/local/bin/torchrun: No such file or directory",
    ):
        d = diagnose_lines([line], "x")
        assert d.failed, (line, ids(d))


def test_the_same_words_in_a_libraries_info_lines_stay_silent() -> None:
    # NCCL's plugin and IB probes on a healthy host (NCCL INFO), a failure with no reason
    for line in (
        "node1:1234:1234 [0] NCCL INFO Failed to open libibverbs.so[.1]",
        "node1:1234:1234 [0] NCCL INFO NET/Plugin: could not load libnccl-net.so plugin, using internal",
        "Failed to open libibverbs.so[.1]",
        "bash: module: command not found",
    ):
        d = diagnose_lines([line], "x")
        assert not d.failed and UNRECOGNIZED not in ids(d), (line, ids(d))
    healthy = excerpt("q2-healthy-collnet-symbol-dlc-2675")  # NET/Plugin: Failed to find ...
    assert healthy.first is None, ids(healthy)


def test_an_unknown_failure_quotes_its_first_failure_line_and_exits_1() -> None:
    # cloudai#720: bash could not run /usr/sbin/sshd (the image has none), then the
    # harness's [ERROR]: one verdict, an error, naming the shell's line first
    d = excerpt("q2-mpijob-no-sshd-cloudai-720")
    assert lead(d) == UNRECOGNIZED and d.failed, ids(d)
    assert d.first is not None
    assert d.first.evidence[0].endswith(
        "/bin/bash: line 1: /usr/sbin/sshd: No such file or directory"
    )
    assert "The first to fail" in d.first.cause


def test_warnings_alone_say_so_and_exit_0() -> None:
    # the harness's [ERROR] line alone: a logger's error level, no program's failure
    d = diagnose_lines(list(CORPUS["q2-mpijob-no-sshd-cloudai-720"].lines[1:]), "x")
    assert lead(d) == UNRECOGNIZED and not d.failed, ids(d)
    assert d.first is not None and d.first.severity == "warning"
    assert d.first.cause.startswith("The log shows no failure line")
    assert "a failure" not in d.first.cause and "The first to fail" not in d.first.cause


def test_a_torch_build_without_distributed() -> None:
    d = excerpt("q1-nodist-windows-fairchem-206")
    assert lead(d) == "C10D-BACKEND-MISSING", ids(d)
    # an attribute of a newer torch (not the process-group API) is not read so
    other = diagnose_lines(
        ["AttributeError: module 'torch.distributed' has no attribute 'tensor'"], "x"
    )
    assert "C10D-BACKEND-MISSING" not in ids(other), ids(other)


def test_nccl_warns_from_its_graph_sources_are_the_topology() -> None:
    d = excerpt("q2-topo-crash-containers-nccl-326")
    assert lead(d) == "NCCL-TOPO-GRAPH" and d.failed, ids(d)
    # the two it goes on past stay what they were (aws-ofi-nccl#64's healthy EFA run)
    healthy = excerpt("i-healthy-efa-pattern-warn-aws-ofi-nccl-64")
    assert "NCCL-TOPO-GRAPH" not in ids(healthy) and not healthy.failed, ids(healthy)


def test_pyxis_printing_enroots_log_is_the_container_plugin() -> None:
    d = excerpt("q2-pyxis-run-tmpfs-full-pyxis-41")
    assert lead(d) == "SLURM-PYXIS-ENROOT", ids(d)


@pytest.mark.parametrize(
    "name",
    [
        "q2-mpijob-no-sshd-cloudai-720",  # failure lines
        "b-firewall-2node-sglang-3794",  # warning lines only
        "c-node-rank-env-hang-lightning-5651",  # a log that stops in a step (a fact rule)
        "d-launcher-nompi-build-nccltests-27",  # nccl-tests' summary once per process
        "i-hostname-pytorch-159007",  # c10d's slow reverse lookups
    ],
)
def test_an_honest_unknowns_words_severity_and_exit_code_agree(name: str) -> None:
    d = excerpt(name)
    assert d.first is not None and d.first.id == UNRECOGNIZED, ids(d)
    failure = d.first.cause.startswith("The log shows a failure")
    assert failure == (d.first.severity == "error") == d.failed, (d.first.severity, d.first.cause)
    assert failure or d.first.cause.startswith("The log shows no failure line")
    assert ("The first to fail" in d.first.cause) == failure


def test_slurms_refusal_names_the_cores_it_keeps_for_the_system() -> None:
    # ArjunaUsers#112 (56 tasks on a node that offers jobs 54 cores): the refusal's cause
    # names the reserve, beside the other limits
    d = excerpt("q2-slurm-reserved-cores-arjuna-112")
    assert lead(d) == "SLURM-ALLOC-FAILED", ids(d)
    assert d.first is not None and "CoreSpecCount" in d.first.cause
