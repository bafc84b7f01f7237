"""The ddp step's verdict from the records its launchers stream, without a cluster: a
rank that raised is named with its error, the projection takes the allreduce step's
slowest busbw and the configured model, and a healthy run states its proof."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ddptui.checklist.base import StepContext
from ddptui.checklist.steps.ddp import DdpRun, judge, node_result
from ddptui.config import parse_config
from ddptui.diagnosis.model import StepResult
from ddptui.transport.base import NodeTarget

NODES = ("node0", "node1", "node2")


def _ctx(extra: str = "") -> StepContext:
    cfg = parse_config(
        "master: {addr: 10.0.0.1}\nnodes: [{host: a, name: node0}, {host: b, name: node1}, "
        "{host: c, name: node2}]\n" + extra,
        "c.yaml",
    )
    targets = [NodeTarget(n, n, i, "python3") for i, n in enumerate(NODES)]
    return StepContext(config=cfg, targets=targets, transports={}, salt="s")


def _worker(rank: int, kind: str, **fields: Any) -> dict[str, Any]:
    return {"kind": "worker", "record": {"kind": kind, "rank": rank, "local_rank": 0, **fields}}


def _healthy_records(rank: int, world: int = 3) -> list[dict[str, Any]]:
    total = 4 * world
    return [
        {"kind": "launch", "nproc": 1},
        _worker(rank, "phase", phase="start"),
        _worker(
            rank,
            "ddp_model",
            params=1000,
            init_sha="i" * 64,
            wrapped_sha="w" * 64,
            sync_bn="torch.nn.SyncBatchNorm",
            planted=None,
        ),
        _worker(
            rank,
            "ddp_result",
            steps=2,
            params_sha="p" * 64,
            grads_sha="g" * 64,
            buffers_sha="b" * 64,
            post_forward_buffers_sha="f" * 64,
            stamps_seen=[0.0],
            hook={
                "buckets_per_step": [1, 2],
                "bytes_per_step": [4000, 4000],
                "bucket_bytes": [3000, 1000],
                "sums": [[1.0 + rank - 1, 1.0, "a"], [2.0, 2.0, "b"]],
            },
            indices={"0": list(range(rank, total, world))},
            samples_total=total,
            loss_first=2.3,
            loss_last=1.1,
            timing={
                "fwd_bwd_s": 0.012,
                "fwd_bwd_local_s": 0.010,
                "compute_s": 0.008,
                "comm_s": 0.004,
            },
        ),
        _worker(rank, "phase", phase="done"),
        {"kind": "exit", "code": 0},
    ]


def _run(records: dict[str, list[dict[str, Any]]]) -> DdpRun:
    run = DdpRun("gloo", 90.0, {}, [], started=time.monotonic())
    for node, recs in records.items():
        for rec in recs:
            run.take(node, rec, time.monotonic(), None)
    run.finished = time.monotonic()
    return run


def test_healthy_run_states_its_proof_and_projects_from_the_allreduce_busbw() -> None:
    ctx = _ctx("ddp: {model_params: 1B}\n")
    ctx.results["allreduce"] = StepResult(
        "allreduce",
        "t",
        "pass",
        1.0,
        {},
        data={"bandwidth": [{"busbw_gbps": 2.0}, {"busbw_gbps": 1.5}, {"busbw_gbps": 1.8}]},
    )
    run = _run({n: _healthy_records(i) for i, n in enumerate(NODES)})
    findings, data = judge(ctx, run)
    ids = [f.id for f in findings]
    assert ids[:2] == ["DDP-VERIFIED", "DDP-SCALING"], ids
    assert findings[0].summary.startswith("ranks saw disjoint shards covering all 12 samples")
    proj = data["projection"]
    assert proj["busbw_gbps"] == 1.5 and "allreduce step" in proj["busbw_source"]
    # compute: the probe's 8 ms for 1000 params, scaled to 1B params; overlap 50%
    assert proj["compute_s"] == pytest.approx(0.008 * 1e6)
    assert proj["overlap"] == pytest.approx(0.5)
    assert ("DDP-SCALING-LOW" in ids) == (proj["efficiency"] < 0.8)
    status, summary, _ = node_result(run, "node1", findings)
    assert status in ("pass", "warn") and summary.startswith("rank 1: 4 of 12 samples per epoch")


def test_measured_compute_from_the_config_wins() -> None:
    run = _run({n: _healthy_records(i) for i, n in enumerate(NODES)})
    _, data = judge(_ctx("ddp: {model_params: 1B, compute_s: 2.5}\n"), run)
    assert data["projection"]["compute_s"] == 2.5
    assert data["projection"]["compute_source"] == "ddp.compute_s"
    # no allreduce step in this run: the busbw comes from the step's own buckets
    assert "this step's own" in data["projection"]["busbw_source"]


def test_a_rank_that_raised_is_named_with_its_error() -> None:
    records = {n: _healthy_records(i) for i, n in enumerate(NODES)}
    records["node1"] = [
        {"kind": "launch", "nproc": 1},
        _worker(1, "phase", phase="train"),
        _worker(1, "error", phase="train", error="RuntimeError: CUDA out of memory"),
        {"kind": "exit", "code": 1},
    ]
    run = _run(records)
    findings, data = judge(_ctx(), run)
    failed = next(f for f in findings if f.id == "DDP-FAILED")
    assert failed.nodes == ("node1",) and failed.rank == 1
    assert "CUDA out of memory" in failed.summary and "CUDA out of memory" in failed.cause
    assert data["projection"] is None  # nothing is projected from a failed run
    assert node_result(run, "node1", findings)[0] == "fail"
