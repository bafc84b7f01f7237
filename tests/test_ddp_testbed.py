"""The ddp step on the namespace testbed (3 nodes, gloo on CPU): a healthy cluster passes
within the deadline with its shards, checksums, buckets and the scaling projection; a
rank whose parameters diverge is named with its node; the deadline stops everything.
Nothing is left on any node."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from checkrun import assert_nodes_quiet, check, interrupt, start_check
from testbed import Testbed

pytestmark = pytest.mark.testbed  # CI without a testbed stops the run (conftest)
DEADLINE = 90  # the default timeouts.ddp: torch imports on two shared cores are slow


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """One healthy 3-node testbed for the module: the faults here live in the config."""
    tb = Testbed(3, prefix="dd", subnet="10.94.1", workdir=tmp_path_factory.mktemp("dd")).up()
    try:
        yield tb
    finally:
        tb.down()


def _config(tb: Testbed, name: str, **overrides: object) -> Path:
    overrides.setdefault("timeouts", {"step": 20, "allreduce": 90, "ddp": DEADLINE})
    return tb.write_config(tb.workdir / name, **overrides)


def test_ddp_passes_with_proof_and_projection(bed: Testbed) -> None:
    cfg = _config(bed, "healthy.yaml", ddp={"model_params": "1B", "grad_dtype": "bf16"})
    run = check(cfg, "--steps", "ssh,allreduce,ddp", timeout=2 * DEADLINE + 120)
    assert run.rc == 0, run.stdout
    step = run.step("ddp")
    assert step["status"] in ("pass", "warn"), run.stdout
    assert step["duration_s"] < DEADLINE
    data = step["data"]
    assert data["world_size"] == 3 and data["backend"] == "gloo" and not data["timed_out"]
    ranks = data["ranks"]
    assert sorted(ranks) == ["0", "1", "2"]
    assert len({r["params_sha"] for r in ranks.values()}) == 1  # bit-identical
    assert {r["node"] for r in ranks.values()} == {"node0", "node1", "node2"}
    # Each rank trained on a third of the 768 samples per epoch; DDP split the
    # gradients into several buckets and all-reduced all of them every step.
    assert all(r["samples"] == {"0": 256, "1": 256} for r in ranks.values())
    assert all(r["buckets_per_step"] >= 2 for r in ranks.values())
    assert all(r["bytes_per_step"] == 4 * r["params"] for r in ranks.values())
    ok = run.finding("ddp", "DDP-VERIFIED")
    assert "disjoint shards covering all 768 samples" in ok["summary"]
    assert "params identical" in ok["summary"]
    # The projection uses the allreduce step's busbw and the configured model.
    proj = data["projection"]
    slowest = min(r["busbw_gbps"] for r in run.step("allreduce")["data"]["bandwidth"])
    assert proj["busbw_gbps"] == pytest.approx(slowest, rel=1e-3)
    assert proj["params"] == 1_000_000_000 and proj["grad_bytes"] == 2_000_000_000
    assert proj["world"] == 3 and 0 < proj["efficiency"] <= 1
    scaling = run.finding("ddp", "DDP-SCALING")
    assert scaling["summary"].startswith("projection for 1B params at")
    assert f"{proj['efficiency']:.0%} efficiency" in scaling["summary"]
    low = [f for f in step["findings"] if f["id"] == "DDP-SCALING-LOW"]
    assert bool(low) == (proj["efficiency"] < 0.8)
    for name, node in step["nodes"].items():
        assert "of 768 samples per epoch" in node["summary"], name
    assert_nodes_quiet(bed)


def test_planted_divergence_is_named(bed: Testbed) -> None:
    # Test only: every rank skips DDP's initial broadcast and rank 2 (node2) builds its
    # model with another seed, so its parameters stay different for good.
    cfg = _config(bed, "planted.yaml", env={"DDPTUI_DDP_TEST_SEED_RANK": "2"})
    run = check(cfg, "--steps", "ssh,ddp", timeout=DEADLINE + 60)
    assert run.rc == 1, run.stdout
    assert run.first is not None and run.first["step"] == "ddp"
    assert run.first["finding"] == "DDP-PARAMS-DIVERGED"
    assert run.first["nodes"] == ["node2"]
    f = run.finding("ddp", "DDP-PARAMS-DIVERGED")
    assert f["rank"] == 2 and "rank 2 (node2)" in f["summary"]
    assert "initial broadcast" in f["cause"]
    assert run.step("ddp")["nodes"]["node2"]["status"] == "fail"
    assert run.step("ddp")["nodes"]["node0"]["status"] != "fail"
    # Gradients were still all-reduced (equal everywhere): only the parameters differ.
    ids = {x["id"] for x in run.step("ddp")["findings"]}
    assert "DDP-GRADS-NOT-REDUCED" not in ids and "DDP-TEST-PLANTED" in ids
    assert run.seconds < DEADLINE + 30
    assert_nodes_quiet(bed)


def test_deadline_stops_every_rank(bed: Testbed) -> None:
    # 3 s is shorter than three nodes need to import torch here: the deadline fires first.
    cfg = _config(bed, "deadline.yaml", timeouts={"ddp": 3})
    run = check(cfg, "--steps", "ssh,ddp", timeout=60)
    assert run.rc == 1, run.stdout
    hang = run.finding("ddp", "DDP-HANG")
    assert hang["severity"] == "error" and "deadline (3 s)" in hang["summary"]
    assert run.step("ddp")["data"]["timed_out"] is True
    assert run.seconds < 3 + 30
    assert_nodes_quiet(bed)


def test_ctrl_c_during_ddp_leaves_nothing(bed: Testbed) -> None:
    proc = start_check(_config(bed, "ctrl-c.yaml"), "ssh,ddp")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(bed.pids(1)) < 3:
        time.sleep(0.1)  # torchrun and its worker are up on node1
    assert len(bed.pids(1)) >= 3
    interrupt(proc, within=10)
    assert_nodes_quiet(bed, timeout=8)
