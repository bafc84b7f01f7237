"""The ddp step's judgement without a cluster: the scaling projection's arithmetic, the
cross-rank rules on rank reports shaped like the worker's, and the `ddp:` config."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ddptui.checklist.ddp_analysis import RankReport, cross_rank_findings, shard_problems
from ddptui.checklist.ddp_projection import (
    allreduce_seconds,
    efficiency,
    measured_overlap,
    project,
    step_seconds,
)
from ddptui.config import ConfigError, parse_config

# ---------------------------------------------------------------- projection arithmetic


def test_allreduce_time_follows_the_busbw_definition() -> None:
    # 100M fp32 gradients on 4 ranks at 10 GB/s busbw: 400 MB * 2*3/4 / 10 GB/s = 60 ms.
    assert allreduce_seconds(400e6, 4, 10.0) == pytest.approx(0.060)
    # 2 ranks: factor 1; 64 ranks: factor 2*63/64.
    assert allreduce_seconds(1e9, 2, 1.0) == pytest.approx(1.0)
    assert allreduce_seconds(1e9, 64, 1.0) == pytest.approx(2 * 63 / 64)
    assert allreduce_seconds(1e9, 1, 1.0) == 0.0  # one rank: nothing to reduce


def test_overlap_hides_at_most_the_backward() -> None:
    assert step_seconds(1.0, 0.5, overlap=0.0) == pytest.approx(1.5)
    assert step_seconds(1.0, 0.5, overlap=1.0) == pytest.approx(1.0)
    # Full overlap cannot hide more than the backward (2/3 of the compute).
    assert step_seconds(1.0, 2.0, overlap=1.0) == pytest.approx(1.0 + 2.0 - 2 / 3)
    assert efficiency(1.0, 0.5, overlap=0.0) == pytest.approx(2 / 3)
    assert efficiency(1.0, 0.0, overlap=0.0) == 1.0


def test_projection_for_100m_params_and_what_would_fix_it() -> None:
    p = project(100_000_000, "fp32", world=3, busbw_gbps=1.1, compute_s=0.5, overlap=0.5)
    assert p.grad_bytes == 400_000_000
    comm = 400e6 * 2 * 2 / 3 / 1.1e9
    assert p.comm_s == pytest.approx(comm)
    assert p.step_s == pytest.approx(0.5 + comm - min(0.5 * comm, 0.5 * 2 / 3))
    assert p.efficiency == pytest.approx(0.5 / p.step_s)
    # Each remedy helps, and the "what it takes" figures reach 90% exactly.
    assert p.accumulation_efficiency > p.efficiency
    assert p.bf16_efficiency is not None and p.bf16_efficiency > p.efficiency
    assert p.compute_for_target_s is not None and p.busbw_for_target_gbps is not None
    assert efficiency(p.compute_for_target_s, comm, 0.5) == pytest.approx(0.9, abs=1e-3)
    faster = allreduce_seconds(400e6, 3, p.busbw_for_target_gbps)
    assert efficiency(0.5, faster, 0.5) == pytest.approx(0.9, abs=1e-3)
    assert p.busbw_for_target_gbps > 1.1


def test_bf16_gradients_halve_the_bytes() -> None:
    fp32 = project(7_000_000_000, "fp32", 16, 20.0, 2.0, 0.3)
    bf16 = project(7_000_000_000, "bf16", 16, 20.0, 2.0, 0.3)
    assert bf16.grad_bytes * 2 == fp32.grad_bytes
    assert bf16.comm_s == pytest.approx(fp32.comm_s / 2)
    assert bf16.bf16_efficiency is None  # already bf16: no such advice
    assert fp32.bf16_efficiency == pytest.approx(bf16.efficiency)


def test_measured_overlap_is_clamped() -> None:
    # exposed = 12 - 10 = 2 ms of a 4 ms allreduce: half hidden.
    assert measured_overlap(0.012, 0.010, 0.004) == pytest.approx(0.5)
    assert measured_overlap(0.020, 0.010, 0.004) == 0.0  # noisier than the allreduce
    assert measured_overlap(0.009, 0.010, 0.004) == 1.0
    assert measured_overlap(0.010, 0.010, 0.0) == 1.0


# ---------------------------------------------------------------- sampler shards


def test_shards_disjoint_and_complete() -> None:
    assert shard_problems({0: [0, 2, 4], 1: [1, 3, 5]}, 6) == ([], [])
    overlaps, missing = shard_problems({0: [0, 1, 2], 1: [2, 3, 3]}, 6)
    assert overlaps == [(0, 1, 1), (1, 1, 1)]  # rank 1 also saw sample 3 twice
    assert missing == [4, 5]


# ---------------------------------------------------------------- cross-rank rules


def _healthy(world: int = 3) -> dict[int, RankReport]:
    out = {}
    for r in range(world):
        out[r] = RankReport(
            r,
            f"node{r}",
            {"init_sha": "i" * 64, "wrapped_sha": "w" * 64, "params": 144138, "planted": None},
            {
                "steps": 16,
                "params_sha": "p" * 64,
                "grads_sha": "g" * 64,
                "buffers_sha": "b" * 64,
                "post_forward_buffers_sha": "f" * 64,
                "stamps_seen": [0.0],
                "hook": {
                    "buckets_per_step": [1] + [3] * 15,
                    "bytes_per_step": [576552] * 16,
                    "bucket_bytes": [275496, 265216, 35840],
                    # local sums differ per rank; the reduced one is their mean
                    "sums": [
                        [2.0 + r - (world - 1) / 2, 2.0, "aa"],
                        [-1.0 - r + (world - 1) / 2, -1.0, "bb"],
                    ],
                },
                "indices": {
                    "0": list(range(r, 6 * world, world)),
                    "1": list(range(r, 6 * world, world)),
                },
                "samples_total": 6 * world,
            },
        )
    return out


def _ids(reports: dict[int, RankReport]) -> list[str]:
    return [f.id for f in cross_rank_findings(reports)]


def test_healthy_ranks_give_no_finding() -> None:
    assert _ids(_healthy()) == []


def test_diverged_rank_is_named_with_its_node() -> None:
    reports = _healthy()
    reports[2].result["params_sha"] = "q" * 64
    reports[2].model["wrapped_sha"] = "v" * 64
    (f,) = cross_rank_findings(reports)
    assert f.id == "DDP-PARAMS-DIVERGED" and f.severity == "error"
    assert f.nodes == ("node2",) and f.rank == 2
    assert "rank 2 (node2)" in f.summary
    assert "initial broadcast" in f.cause  # it differed already when DDP wrapped it
    assert any("rank 2 on node2: params sha qqqqqqqq" in e for e in f.evidence)


def test_diverged_params_with_equal_gradients_say_outside_ddp() -> None:
    reports = _healthy()
    reports[1].result["params_sha"] = "q" * 64
    (f,) = cross_rank_findings(reports)
    assert f.nodes == ("node1",) and "outside DDP" in f.cause


def test_two_ranks_that_disagree_are_both_named() -> None:
    reports = _healthy(2)
    reports[1].result["params_sha"] = "q" * 64
    (f,) = cross_rank_findings(reports)
    assert f.nodes == ("node0", "node1") and f.rank is None
    assert f.summary.startswith("parameters differ between rank 0 (node0) and")  # no majority


def test_gradients_not_reduced() -> None:
    silent = _healthy()
    silent[1].result["hook"]["buckets_per_step"] = [0] * 16
    assert _ids(silent) == ["DDP-GRADS-NOT-REDUCED"]
    differ = _healthy()
    differ[0].result["grads_sha"] = "h" * 64
    (f,) = cross_rank_findings(differ)
    assert f.id == "DDP-GRADS-NOT-REDUCED" and f.nodes == ("node0",)
    wrong_mean = _healthy()
    for rep in wrong_mean.values():
        rep.result["hook"]["sums"][0][1] = 6.0  # the sum, not the mean
    (f,) = cross_rank_findings(wrong_mean)
    assert f.id == "DDP-GRADS-NOT-REDUCED" and "not the average" in f.summary


def test_buffers_not_broadcast_and_syncbn_not_synced() -> None:
    stamp = _healthy()
    stamp[2].result["stamps_seen"] = [2.0]  # rank 2 saw its own value in a forward
    (f,) = cross_rank_findings(stamp)
    assert f.id == "DDP-BUFFERS-DIFFER" and f.nodes == ("node2",)
    bn = _healthy()
    bn[1].result["post_forward_buffers_sha"] = "e" * 64
    (f,) = cross_rank_findings(bn)
    assert f.id == "DDP-SYNCBN-NOT-SYNCED" and f.nodes == ("node1",)


def test_sampler_overlap_and_gaps() -> None:
    same = _healthy()
    same[1].result["indices"] = copy.deepcopy(same[0].result["indices"])  # rank 1 = rank 0
    ids = _ids(same)
    assert ids.count("DDP-SAMPLER-OVERLAP") == 2  # both epochs
    assert "DDP-SAMPLER-INCOMPLETE" in ids
    f = next(f for f in cross_rank_findings(same) if f.id == "DDP-SAMPLER-OVERLAP")
    assert set(f.nodes) == {"node0", "node1"} and "rank 0 and 1: 6 shared" in f.summary


def test_garbage_fields_do_not_crash() -> None:
    reports = _healthy()
    bad: dict[str, Any] = reports[1].result
    bad["hook"] = "nonsense"
    bad["indices"] = {"0": ["x", None]}
    ids = _ids(reports)
    assert "DDP-GRADS-NOT-REDUCED" in ids  # no bucket counted on rank 1
    assert "DDP-SAMPLER-INCOMPLETE" in ids


# ---------------------------------------------------------------- config


def _cfg(extra: str) -> Any:
    return parse_config("master: {addr: 10.0.0.1}\nnodes: [{host: a}]\n" + extra, "c.yaml")


def test_ddp_config_defaults_and_suffixes() -> None:
    cfg = _cfg("")
    assert cfg.ddp.model_params == 100_000_000 and cfg.ddp.grad_dtype == "fp32"
    assert cfg.timeouts.ddp == 90
    assert _cfg("ddp: {model_params: 7B}\n").ddp.model_params == 7_000_000_000
    assert _cfg("ddp: {model_params: 125M, grad_dtype: bf16}\n").ddp.model_params == 125_000_000
    assert _cfg("ddp: {model_params: 1.3e9, compute_s: 0.4}\n").ddp.model_params == 1_300_000_000


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("ddp: {model_params: lots}\n", "c.yaml:3:7: ddp.model_params"),
        ("ddp: {grad_dtype: fp8}\n", "c.yaml:3:7: ddp.grad_dtype"),
        ("ddp: {compute_s: -1}\n", "c.yaml:3:7: ddp.compute_s"),
        ("ddp: {model_param: 5}\n", "c.yaml:3:7: ddp.model_param: unknown key"),
    ],
)
def test_ddp_config_errors_name_the_key(text: str, where: str) -> None:
    with pytest.raises(ConfigError) as err:
        _cfg(text)
    assert where in str(err.value), str(err.value)
