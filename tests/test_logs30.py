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
