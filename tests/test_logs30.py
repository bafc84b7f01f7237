"""Round logs30 (blind batch V: the Slurm FAQ, NeMo, torchtitan, Megatron-LM, nanotron,
aws-ofi-nccl, kubeflow, HPC centres' and projects' docs): each reading on the real excerpt
it came from (tests/fixtures/corpus/round11v.yaml), through the real log diagnosis."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "corpus"))

from score import load_corpus, score

from ddptui.logs.diagnose import diagnose_lines

V = {e.id: e for e in load_corpus() if e.source == "round11v.yaml"}


def _got(eid: str) -> str | None:
    [v] = score([V[eid]])
    return v.got


def test_the_loggers_eoferror_after_the_last_checkpoint_is_teardown() -> None:
    e = V["v3-healthy-chinese-clip-eoferror-after-save"]
    d = diagnose_lines(list(e.lines), source="clip")
    assert d.first is None
    assert not d.findings or all(f.id != "LOGS-UNRECOGNIZED" for f in d.findings)
    assert _got(e.id) is None


def test_the_same_eoferror_after_a_training_step_stays_an_honest_unknown() -> None:
    lines = list(V["v3-healthy-chinese-clip-eoferror-after-save"].lines)
    at = next(i for i, ln in enumerate(lines) if ln.startswith("Exception in thread"))
    mid_run = [*lines[:at], "2023-01-14,21:18:40 | INFO | Rank 0 | Global Steps: 120/5215 | Train Epoch: 1 | Loss: 0.41", *lines[at:]]
    d = diagnose_lines(mid_run, source="clip")
    assert d.first is not None and d.first.id == "LOGS-UNRECOGNIZED" and d.first.severity == "error"
    # another thread's EOFError (not the logging QueueListener's) after a save stays one too
    other = [ln.replace("logging/handlers.py", "myapp/reader.py") for ln in lines]
    d = diagnose_lines(other, source="clip")
    assert d.first is not None and d.first.id == "LOGS-UNRECOGNIZED"


def _ids(lines: list[str]) -> tuple[str | None, set[str]]:
    d = diagnose_lines(lines, source="v")
    return (d.first.id if d.first else None), {f.id for f in d.findings}


def test_ncclinvalidusage_with_a_bare_no_net_plugin_line_is_net_noplugin() -> None:
    assert _got("v2-doc-torchtitan-learnings-ib-disable-no-net-plugin") == "NET-NOPLUGIN"
    # NCCL 2.28's fallback from its IB plugin to sockets ("NET plugin IB", no "any") stays quiet
    first, ids = _ids(["node1:12:12 [0] NCCL INFO Failed to initialize NET plugin IB", "node1:12:12 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>"])
    assert "NET-NOPLUGIN" not in ids and first is None


def test_a_watchdog_timeout_pasted_without_its_ran_for_tail_is_a_timeout() -> None:
    e = V["v2-doc-torchtitan-learnings-p2p-cuda-memcpy-hang"]
    first, ids = _ids(list(e.lines))
    assert first is not None and "WATCHDOG" in ids
    # the whole line reads the same
    first2, ids2 = _ids([e.lines[0] + " ran for 300123 milliseconds before timing out."])
    assert (first2, "WATCHDOG" in ids2) == (first, True)


def test_srun_ending_a_step_with_nothing_else_failing_leads_itself() -> None:
    assert _got("v2-slurm-faq-force-terminated") == "SLURM-CANCELLED"
    assert _got("v2-slurm-faq-first-task-exited") == "SLURM-TASK-EXIT"
    # a failure line of the job's own before it: Slurm's words are its wrapper again
    lines = ["ValueError: bad shape in batch 12", *V["v2-slurm-faq-first-task-exited"].lines]
    first, ids = _ids(lines)
    assert first == "LOGS-APP-EXCEPTION" and "SLURM-TASK-EXIT" in ids  # logs39: the code's own
    first, ids = _ids(["srun: error: gpu3: task 1: Exited with exit code 1", "Traceback (most recent call last):"])
    assert first == "LOGS-UNRECOGNIZED"


def test_an_expired_credential_is_the_clock() -> None:
    for eid in ("v2-slurm-faq-credential-expired", "v2-slurm-faq-munge-clock"):
        assert _got(eid) == "FABRIC-CLOCK-SKEW", eid
    d = diagnose_lines(["srun: error: Task launch for 1466614.0 failed on node compute-0-1: Job credential expired"], source="v")
    assert d.first is not None and d.first.id == "FABRIC-CLOCK-SKEW" and d.first.severity == "error"
    assert "compute-0-1" in d.first.summary
    # another launch failure is not the clock
    first, _ = _ids(["srun: error: Task launch for 1466614.0 failed on node compute-0-1: Invalid node name specified"])
    assert first == "SLURM-LAUNCH-FAILED"


def test_ib_the_job_asked_for_and_ncc_found_none_is_ib_unused() -> None:
    e = V["v3-ib-container-pytorch-111424"]
    assert _got(e.id) == "AR-IB-UNUSED"
    d = diagnose_lines(list(e.lines), source="v")
    assert d.first is not None and d.first.severity == "warning"  # a fact: a warning, exit 0
    # without the job asking for IB, NCCL's "no device" on an Ethernet host stays quiet
    first, ids = _ids([ln for ln in e.lines if "NCCL_IB_DISABLE" not in ln])
    assert first is None and "AR-IB-UNUSED" not in ids


def test_nvml_in_use_and_megatron_checkpoint_validation_are_failures() -> None:
    for eid in ("v2-slurm-faq-mig-pmix-in-use", "v2-doc-megatron-nano-eval-dcp-global-world-validation"):
        d = diagnose_lines(list(V[eid].lines), source="v")
        assert d.first is not None and d.first.id == "LOGS-UNRECOGNIZED" and d.first.severity == "error", eid


def test_a_run_stopped_on_a_preemption_signal_is_not_clean() -> None:
    e = V["v2-doc-nemo-resiliency-preemption-sigterm"]
    d = diagnose_lines(list(e.lines), source="v")
    # the framework stopped early and saved: an honest unknown as a warning (the job said SUCCEEDED)
    assert d.first is not None and d.first.id == "LOGS-UNRECOGNIZED" and d.first.severity == "warning"
    baseline = V["v2-healthy-doc-nemo-resiliency-baseline"]
    assert _got(baseline.id) is None
