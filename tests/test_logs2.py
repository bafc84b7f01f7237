"""Round logs2 (issue 15): mechanisms tuned on blind batch B, each checked on the real
excerpt it came from (tests/fixtures/corpus/round3b.yaml, quoted from public threads)."""

from __future__ import annotations

from pathlib import Path

from ruamel.yaml import YAML

from ddptui.logs.diagnose import LogDiagnosis, diagnose_lines

B = YAML(typ="safe").load(
    (Path(__file__).parent / "fixtures" / "corpus" / "round3b.yaml").read_text()
)["excerpts"]


def excerpt(name: str) -> LogDiagnosis:
    e = next(x for x in B if x["id"] == name)
    return diagnose_lines(str(e["lines"]).splitlines(), name)


def test_a_rank_announced_twice_is_a_failure_without_any_error_line() -> None:
    d = excerpt("b-duprank-slurm-ntasks-lightning-4389")
    assert d.first is not None and d.first.id == "LOGS-DUP-RANK"
    assert "(process 2)" in d.first.summary and "4, 5, 6, 7" in d.first.cause


def test_watchdog_header_or_stack_without_the_operation() -> None:
    for name in (
        "b-desync-gated-dataset-simpletuner-3099",  # glog E line, WorkNCCL on the next line
        "b-timeout-rank0-test-particleflow-390",  # WorkNCCL::checkTimeout stack frames
        "b-rank0-only-work-timeout-bergson-444",  # the bare header, indented
    ):
        d = excerpt(name)
        assert "WATCHDOG-BARE" in [f.id for f in d.findings], name
        # since round logs7 the ranks elsewhere lead (tests/test_logs7.py)
        assert d.first is not None and d.first.id == "LOGS-NOT-IN-COLLECTIVE", name
    # "[Rank 0] " prefix only, after Lightning's "`Trainer.fit` stopped": the others had
    # finished (round logs3, tests/test_logs3.py)
    d = excerpt("b-desync-save-ckpt-rank0-autocast-381")
    assert d.first is not None and d.first.id == "LOGS-NOT-IN-COLLECTIVE"
    assert "WATCHDOG-BARE" in [f.id for f in d.findings]


def test_ranks_timing_out_at_one_seqnum_in_different_operations() -> None:
    d = excerpt("b-desync-timelimit-anemoi-core-1064")
    assert d.first is not None and d.first.id == "DESYNC-MISMATCH"
    assert "ALLREDUCE" in d.first.summary and "BROADCAST" in d.first.summary
    # "Timeout at NCCL work: 19" names no operation: not a mismatch with ALLREDUCE at 19
    d = excerpt("b-desync-iterable-uneven-pytorch-141069")
    assert d.first is not None and d.first.id == "LOGS-NOT-IN-COLLECTIVE"


def test_store_barrier_counting_more_workers_than_the_world() -> None:
    d = excerpt("b-stale-filestore-wenet-1097")
    assert d.first is not None and d.first.id == "LOGS-STORE-STALE"
    assert "287" in d.first.cause and "6" in d.first.cause


def test_oom_inside_another_logger_line_and_a_bare_traceback() -> None:
    d = excerpt("b-rank-cuda-oom-2node-metaseq-314")
    assert d.first is not None and d.first.id == "RANK-CUDA-OOM"
    d = excerpt("b-firewall-2node-sglang-3794")  # "Scheduler hit an exception: Traceback"
    assert d.first is not None and d.first.id == "LOGS-UNRECOGNIZED"
    assert d.first.severity == "warning"
