"""Nodes that hang, vanish or answer garbage are findings, never a traceback or a hang;
Ctrl-C stops cleanly; no config value is ever run as shell code."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest
from checkrun import assert_nodes_quiet, check, interrupt, start_check
from testbed import Testbed

from ddptui.checklist.runner import Session
from ddptui.config import load_config

pytestmark = pytest.mark.testbed


def test_ctrl_c_mid_step_exits_130_and_leaves_nothing(testbed: Testbed) -> None:
    # A dropped master port keeps the port step busy (connect timeouts) when we interrupt.
    testbed.block_port(0)
    proc = start_check(testbed.write_config(), "ssh,port")
    time.sleep(0.8)  # the master listener and the connect probes are running now
    assert any(testbed.pids(0)), "expected ddptui's probes to be running on node0"
    out = interrupt(proc, within=6)
    assert "interrupted" in out
    # What was diagnosed before the interrupt is saved: the ssh step at least.
    saved = json.loads(Path(out.split("session saved: ", 1)[1].split()[0]).read_text())
    assert saved["steps"][0]["id"] == "ssh" and saved["steps"][0]["status"] == "pass"
    assert_nodes_quiet(testbed, timeout=5)


def test_no_config_value_is_run_by_a_shell(testbed: Testbed, tmp_path: Path) -> None:
    marks = [tmp_path / f"pwned{i}" for i in range(4)]
    evil = {
        "env": {
            "GLOO_SOCKET_IFNAME": "eth0",
            "X": f"$(touch {marks[1]})",
            "Y": f"'; touch {marks[2]}; '",
        },
        "nodes": [
            {
                "host": n.ip,
                "name": f"n{n.index}$(touch {marks[3]})",
                "user": "root",
                "port": 22,
                "env": {"Z": f"`touch {marks[3]}`"},
            }
            for n in testbed.nodes
        ],
    }
    cfg = testbed.write_config(python=f"{testbed.python}; touch {marks[0]}", **evil)
    run = check(cfg, "--steps", "ssh,inventory")
    assert run.rc == 1
    assert run.first is not None and run.first["finding"] == "NODE-NO-PYTHON"
    good = testbed.write_config(tmp_path / "good.yaml", **evil)
    run = check(good, "--steps", "ssh,env")
    env = run.step("env")["nodes"]
    assert run.step("env")["status"] in ("pass", "warn"), run.stdout
    assert not [m for m in marks if m.exists()], "a config value was executed"
    assert env  # audited, with the literal values kept as data


def test_hanging_node_is_a_timeout_finding(testbed: Testbed, tmp_path: Path) -> None:
    hang = tmp_path / "hang-python"
    # Looks like python to ddptui, but never answers on node1 (a hung NFS home, say).
    hang.write_text(
        f'#!/bin/sh\nif [ "$(hostname)" = "{testbed.nodes[1].hostname}" ]; '
        f'then exec sleep 1000; fi\nexec {testbed.python} "$@"\n'
    )
    hang.chmod(0o755)
    run = check(
        testbed.write_config(python=str(hang), timeouts={"step": 3}),
        "--steps",
        "ssh,inventory,ping",
    )
    assert run.rc == 1
    assert run.first is not None
    assert (run.first["step"], run.first["nodes"], run.first["finding"]) == (
        "inventory",
        ["node1"],
        "NODE-TIMEOUT",
    )
    assert run.step("inventory")["nodes"]["node0"]["status"] == "pass"
    assert run.seconds < 20
    assert_nodes_quiet(testbed)


def test_garbage_answer_is_a_finding(testbed: Testbed, tmp_path: Path) -> None:
    junk = tmp_path / "junk-python"
    junk.write_text("#!/bin/sh\necho 'Welcome to the cluster! MOTD...'\necho '{not json'\n")
    junk.chmod(0o755)
    run = check(testbed.write_config(python=str(junk)), "--steps", "ssh,inventory")
    assert run.rc == 1
    f = run.finding("inventory", "NODE-PROBE-FAILED")
    assert set(f["nodes"]) <= {"node0", "node1", "node2"}
    assert any("Welcome to the cluster" in e for e in f["evidence"]) or "Welcome" in f["cause"]


def test_node_vanishing_mid_run_is_reported_lost(testbed: Testbed) -> None:
    cfg = load_config(testbed.write_config(ssh={"keepalive_interval": 1}, timeouts={"step": 15}))

    async def scenario() -> Session:
        session = Session(cfg, "cluster.yaml")
        try:
            await session.run_step("ssh")
            testbed.link_down(2)  # node2 drops off the network after connecting
            await session.run_step("inventory")
        finally:
            await session.close()
        return session

    started = time.monotonic()
    session = asyncio.run(scenario())
    took = time.monotonic() - started
    inv = session.results["inventory"]
    assert inv.status == "fail"
    (f,) = [f for f in inv.findings if "node2" in f.nodes]
    assert f.id in ("NODE-LOST", "NODE-TIMEOUT"), f.cause
    assert inv.nodes["node0"].status == "pass"
    assert took < 20
    testbed.link_up(2)
    assert_nodes_quiet(testbed)


def test_secret_in_login_env_never_leaves_the_node(testbed: Testbed) -> None:
    canary = "hf_" + "Zq" * 18 + "CANARY"
    testbed.set_env(
        1, {"HF_TOKEN": canary, "MY_PASSWORD": "s3cr3t-CANARY-pw", "NCCL_DEBUG": "WARN"}
    )
    cfg = testbed.write_config(
        env={"GLOO_SOCKET_IFNAME": "eth0", "DATABASE_URL": "postgres://u:CANARYDB@db/x"}
    )
    run = check(cfg)
    blob = run.stdout + run.stderr + Path(str(cfg.with_suffix(".report.json"))).read_text()
    for secret in (canary, "s3cr3t-CANARY-pw", "CANARYDB"):
        assert secret not in blob
    assert os.environ.get("HF_TOKEN") != canary
