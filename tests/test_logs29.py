"""Round logs29 (blind batch U, documentation): each reading on the real excerpt it came
from (tests/fixtures/corpus/round10u.yaml), through the real log diagnosis."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "corpus"))

from score import Excerpt, load_corpus, score

from ddptui.logs.diagnose import diagnose_lines

U = {e.id: e for e in load_corpus() if e.id.startswith("u1-")}


def _got(eid: str) -> str | None:
    [v] = score([U[eid]])
    return v.got


def test_a_requeue_the_job_announced_itself_is_no_preemption() -> None:
    e = U["u1-healthy-sherlock-docs-self-requeue"]
    d = diagnose_lines(list(e.lines), source="sherlock")
    assert d.first is None
    assert all(f.severity != "error" for f in d.findings)
    assert _got(e.id) is None


def test_a_requeue_or_preemption_nobody_in_the_job_announced_stays_an_error() -> None:
    lines = [ln for ln in U["u1-healthy-sherlock-docs-self-requeue"].lines if "re-queueing" not in ln]
    d = diagnose_lines(lines, source="sherlock")
    assert d.first is not None and d.first.id == "SLURM-PREEMPTED"
    preempted = [ln.replace("DUE TO JOB REQUEUE", "DUE TO PREEMPTION") for ln in U["u1-healthy-sherlock-docs-self-requeue"].lines]
    d = diagnose_lines(preempted, source="sherlock")
    assert d.first is not None and d.first.id == "SLURM-PREEMPTED"
    assert d.first.severity == "error"


def test_the_schedulers_older_words_for_an_unplaceable_pod() -> None:
    assert _got("u1-k8s-kubernetes-docs-insufficient-memory") == "K8S-UNSCHEDULABLE"
    assert _got("u1-k8s-jobset-docs-follower-no-node-selector") == "K8S-UNSCHEDULABLE"


def test_failing_programs_of_unknown_causes_are_honest_unknowns() -> None:
    for eid in (
        "u1-scheduler-slurm-docs-gres-core-affinity",  # a daemon's "error: " at start-up
        "u1-scheduler-slurm-docs-cgroup2-manual-startup",  # slurmd's "fatal: "
        "u1-interface-ompi-docs-tcp-errno113",  # Open MPI's btl_tcp connect() failed
        "u1-k8s-jobset-docs-webhook-no-endpoints",  # an admission webhook not callable
        "u1-k8s-kueue-docs-localqueue-missing",  # Kueue's missing LocalQueue
    ):
        d = diagnose_lines(list(U[eid].lines), source=eid)
        assert d.first is not None and d.first.id == "LOGS-UNRECOGNIZED", eid
        assert d.first.severity == "error", eid


def test_the_healthy_noise_of_batch_u_stays_silent() -> None:
    healthy = [e for e in U.values() if not e.expected]
    assert len(healthy) == 5
    for v in score(healthy):
        assert v.outcome == "healthy-silent", (v.excerpt.id, v.got)


def test_a_user_program_printing_error_mid_line_is_not_a_daemon_error() -> None:
    e = Excerpt("h", "u", "r", "healthy", "c", (), ("step 10: loss 1.2, no error: all good", "epoch done"), "h")
    [v] = score([e])
    assert v.got is None


def test_gits_own_fatal_in_a_working_run_is_not_a_daemon_failing() -> None:
    # a training script that records its commit outside a clone: git says "fatal:", the
    # run goes on; a daemon's fatal at start-up stays a failure line (u1 slurmd cgroup v2)
    ok = diagnose_lines(
        [
            "epoch 1 loss 0.52",
            "fatal: not a git repository (or any of the parent directories): .git",
            "fatal: No names found, cannot describe anything.",
            "epoch 2 loss 0.41",
        ],
        "x",
    )
    assert ok.first is None, [f.id for f in ok.findings]
    bad = diagnose_lines(["slurmd: fatal: Unable to initialize cgroup plugin"], "x")
    assert bad.first is not None and bad.first.id == "LOGS-UNRECOGNIZED"
