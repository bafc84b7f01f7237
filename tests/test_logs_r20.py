"""Round 20's readings from its blind batch AR3 (tests/fixtures/corpus/round20ar.yaml, scored
once before them): two MLPerf result logs of runs that reached their target got
LOGS-UNRECOGNIZED's soft warning. The SHARP library's own "No Aggregation Manager
(sharp_am)" errors are the in-network reduction NCCL could not set up and fell back from
(NCCL-COLLNET-FALLBACK, a warning that says so); a library's advice about what may happen
("you may encounter an out-of-memory (OOM) error") is no failure. Twins keep a real failure
beside them."""

from __future__ import annotations

from corpus_excerpts import excerpt, ids

from ddptui.logs.diagnose import diagnose_lines

SHARP = "ar3-mlperf11-azure-rnnt16-sharp-am-error"
ADVICE = "ar3-mlperf11-azure-maskrcnn4-oom-advice-warning"


def test_sharps_missing_aggregation_manager_is_the_collnet_fallback() -> None:
    d = excerpt(SHARP)
    assert ids(d) == ["NCCL-COLLNET-FALLBACK"]
    assert d.first is not None and d.first.severity == "warning"


def test_an_advice_about_out_of_memory_is_no_failure() -> None:
    assert excerpt(ADVICE).first is None


def test_a_real_out_of_memory_beside_the_advice_still_reads() -> None:
    advice = (
        "When using more than one image per GPU you may encounter an out-of-memory (OOM) error "
        "if your GPU does not have sufficient memory."
    )
    d = diagnose_lines([advice, "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"])
    assert d.first is not None and d.first.severity == "error", ids(d)
