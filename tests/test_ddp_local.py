"""The ddp step on two local "nodes" (host: local, as in the embedded demo): no SSH, no
root, CPU/gloo. A newcomer's laptop sees DDP's data sharding and gradient sync proven."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from checkrun import check

from ddptui.demo import DEMO_YAML, demo_config
from ddptui.stepmeta import ORDER


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _local_config(tmp_path: Path, **extra: str) -> Path:
    text = DEMO_YAML.replace("port: 29500", f"port: {_free_port()}")
    text += f"python: {sys.executable}\n"
    text += "".join(f"{k}: {v}\n" for k, v in extra.items())
    path = tmp_path / "local.yaml"
    path.write_text(text)
    return path


def test_demo_runs_the_ddp_step_after_allreduce() -> None:
    assert ORDER[-3:] == ("allreduce", "fabric", "ddp")
    assert demo_config().timeouts.ddp == 90


def test_two_local_nodes_prove_sharding_and_sync(tmp_path: Path) -> None:
    run = check(_local_config(tmp_path, ddp="{model_params: 125M}"), "--steps", "ssh,ddp")
    assert run.rc == 0, run.stdout
    step = run.step("ddp")
    assert step["status"] in ("pass", "warn"), run.stdout
    ok = run.finding("ddp", "DDP-VERIFIED")
    assert ok["summary"].startswith("ranks saw disjoint shards covering all 512 samples")
    assert "params identical (sha " in ok["summary"] and "all-reduced per step" in ok["summary"]
    ranks = step["data"]["ranks"]
    assert [ranks[r]["node"] for r in ("0", "1")] == ["node0", "node1"]
    assert ranks["0"]["params_sha"] == ranks["1"]["params_sha"]
    assert ranks["0"]["loss_last"] < ranks["0"]["loss_first"]  # it really trained
    for name in ("node0", "node1"):
        assert "256 of 512 samples per epoch" in step["nodes"][name]["summary"]
    # Without the allreduce step, the projection uses this step's own buckets.
    proj = step["data"]["projection"]
    assert proj["params"] == 125_000_000 and proj["world"] == 2
    assert "this step's own" in proj["busbw_source"]
    assert "projection for 125M params" in run.finding("ddp", "DDP-SCALING")["summary"]
    assert "DDP training steps" in run.stdout
