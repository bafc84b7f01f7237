"""`ddptui diagnose --config CONFIG NODE:GLOB` on the testbed: log files are read on the
nodes over SSH (the logread probe), bounded, redacted there, and leave nothing behind."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from ddptui.cli import main

GPU = Path(__file__).parent / "fixtures" / "gpu-h100"
SECRET = "hf_Zq8vTn3LwR5kP2mX9cY7bJ4dF6gH1sA0"  # noqa: S105 - a fake token to be redacted


def test_logs_read_on_the_nodes_redacted_bounded_and_nothing_left(make_testbed) -> None:  # type: ignore[no-untyped-def]
    tb = make_testbed(2, stem="dgtb", subnet_base="10.91")
    cfg = tb.write_config()
    logs = tb.workdir / "joblogs"
    # Node 1's log: a healthy start, then the real H100 ordinal failure, a secret on the
    # failing line (as a user's print might put it).
    failing = (GPU / "raw-torchrun/nproc2-on-1gpu.log").read_text().splitlines()
    at = next(i for i, ln in enumerate(failing) if "invalid device ordinal" in ln)
    failing[at] += f" HF_TOKEN={SECRET}"
    tb.exec(1, ["mkdir", "-p", str(logs / "node1")])
    tb.exec(1, ["sh", "-c", f"cat > {logs / 'node1' / 'train.log'}"], input="\n".join(failing) + "\n")
    tb.exec(0, ["mkdir", "-p", str(logs / "node0")])
    healthy = (GPU / "raw-torchrun/healthy-1gpu.log").read_text()
    tb.exec(0, ["sh", "-c", f"cat > {logs / 'node0' / 'train.log'}"], input=healthy)
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in logs.rglob("*.log")}
    names = [n["name"] for n in json.loads(cfg.read_text())["nodes"]]

    result = CliRunner().invoke(
        main,
        [
            "diagnose", "--config", str(cfg),
            f"{names[0]}:{logs}/node0/*.log", f"{names[1]}:{logs}/node1/*.log",
            f"*:{logs}/nothing-*.log", "--json", "-",
        ],
    )
    doc = json.loads(result.stdout)
    # A glob that matches nothing is an unreadable input: said, and exit 2.
    assert result.exit_code == 2, result.output
    assert f"no file matches '{logs}/nothing-*.log'" in result.stderr
    first = doc["first_failure"]
    assert first["finding"] == "ENV-ORDINAL"
    assert first["nodes"] == [f"{names[1]}:{logs}/node1/train.log"]
    labels = {n["name"]: n["host"] for n in doc["nodes"]}
    assert labels == {
        f"{names[0]}:{logs}/node0/train.log": names[0],
        f"{names[1]}:{logs}/node1/train.log": names[1],
    }
    text = json.dumps(doc)
    assert SECRET not in text and SECRET not in result.output
    evidence = doc["steps"][0]["findings"][0]["evidence"]
    assert any("invalid device ordinal" in e and "HF_TOKEN=" in e for e in evidence)
    # Read-only: the files are as they were; nothing of ddptui runs on the nodes.
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in logs.rglob("*.log")} == before
    for i in range(2):
        assert tb.wait_quiet(i, 10) == [], tb.pids(i)

    # Bounded: only the last --max-mb of a file is read (its cut line dropped).
    big = logs / "node0" / "big.log"
    filler = "[I1123 07:38:31.551532465 TCPStore.cpp:271] [c10d - debug] heartbeat\n" * 40000
    big.write_text("RuntimeError: No CUDA GPUs are available\n" + filler)
    result = CliRunner().invoke(
        main, ["diagnose", "--config", str(cfg), f"{names[0]}:{big}", "--max-mb", "1", "--json", "-"]
    )
    doc = json.loads(result.stdout)
    assert result.exit_code == 0, result.output  # the failure was in the part not read
    assert doc["steps"][0]["data"]["bytes"] <= 1 << 20


def test_a_node_that_cannot_be_reached_is_said_and_the_others_are_diagnosed(make_testbed) -> None:  # type: ignore[no-untyped-def]
    tb = make_testbed(1, stem="dgtb", subnet_base="10.91")
    conf = tb.config_dict()
    dead = {**conf["nodes"][0], "host": tb.nodes[0].ip.rsplit(".", 1)[0] + ".250", "name": "gone"}
    conf["nodes"].append(dead)
    conf["ssh"]["connect_timeout"] = 2
    cfg = tb.workdir / "two.yaml"
    cfg.write_text(json.dumps(conf))
    log = tb.workdir / "train.log"
    log.write_text((GPU / "nccl-env/cvd_empty.log").read_text())
    result = CliRunner().invoke(main, ["diagnose", "--config", str(cfg), f"*:{log}", "--json", "-"])
    assert result.exit_code == 2, result.output
    assert "gone: cannot connect" in result.stderr
    assert "Traceback" not in result.output
    doc = json.loads(result.stdout)
    assert doc["first_failure"]["finding"] == "ENV-NOGPU-VISIBLE"
    unreadable = [f for f in doc["steps"][0]["findings"] if f["id"] == "LOGS-UNREADABLE"]
    assert unreadable and "gone: cannot connect" in unreadable[0]["evidence"][0]
