"""The allreduce step on the namespace testbed (gloo, CPU): a verified result and
bandwidth on a healthy cluster; each fault diagnosed within the deadline with the
right node and fix; nothing left on any node, on success, failure, deadline and Ctrl-C."""

from __future__ import annotations

import time

import pytest
from checkrun import assert_nodes_quiet, check, interrupt, start_check
from testbed import Testbed

pytestmark = pytest.mark.testbed
DEADLINE = 30


def test_full_checklist_passes_with_verified_allreduce(testbed: Testbed) -> None:
    # The whole checklist, the ddp step included (it has its own deadline, timeouts.ddp).
    run = check(testbed.write_config(timeouts={"step": 20, "allreduce": DEADLINE}), timeout=240)
    assert run.rc == 0, run.stdout
    assert [s["id"] for s in run.report["steps"]] == [
        "ssh",
        "inventory",
        "ping",
        "port",
        "env",
        "allreduce",
        "fabric",
        "ddp",
    ]
    ar = run.step("allreduce")
    assert ar["status"] == "pass", run.stdout
    assert ar["data"]["backend"] == "gloo"
    assert ar["data"]["world_size"] == 3
    assert set(ar["data"]["forced_env"]) >= {"NCCL_DEBUG", "TORCH_DISTRIBUTED_DEBUG"}
    rows = ar["data"]["bandwidth"]
    assert sorted(r["rank"] for r in rows) == [0, 1, 2]
    assert all(r["busbw_gbps"] > 0 for r in rows)
    for name, node in ar["nodes"].items():
        (rank,) = node["data"]["ranks"].values()
        assert rank["verify"]["ok"] is True and rank["verify"]["got"] == 6.0, name
        assert rank["phase"] == "done"
    assert "busbw" in ar["nodes"]["node0"]["summary"]
    # The report's tables and metrics timeline: during the allreduce, eth0 (the NIC that
    # carries it) is busy on every node, at well over the idle SSH chatter.
    table = run.report["tables"]["allreduce"]
    assert [r["rank"] for r in table["ranks"]] == [0, 1, 2]
    for name, series in run.report["metrics"]["nodes"].items():
        peak = max(
            (s["nics"].get("eth0", {}).get("rx_Bps") or 0) + (s["nics"]["eth0"].get("tx_Bps") or 0)
            for s in series["samples"]
            if "eth0" in s.get("nics", {})
        )
        assert peak > 1e6, (name, peak)
    assert_nodes_quiet(testbed)


def test_blocked_master_port_is_diagnosed_at_allreduce_in_time(testbed: Testbed) -> None:
    testbed.block_port(0)
    run = check(testbed.write_config(timeouts={"allreduce": DEADLINE}), "--steps", "ssh,allreduce")
    assert run.rc == 1
    assert run.first is not None and run.first["step"] == "allreduce"
    assert set(run.first["nodes"]) <= {"node1", "node2"} and run.first["nodes"]
    assert "29500" in run.first["fix"] or "port" in run.first["fix"].lower()
    assert run.seconds < DEADLINE + 30
    assert_nodes_quiet(testbed)


def test_master_port_in_use_fails_fast(testbed: Testbed) -> None:
    testbed.hold_port(0, 29500)
    run = check(testbed.write_config(timeouts={"allreduce": DEADLINE}), "--steps", "ssh,allreduce")
    assert run.rc == 1
    assert run.first is not None and run.first["step"] == "allreduce"
    assert run.first["nodes"] == ["node0"]
    assert "in use" in (run.first["summary"] + run.first["fix"]).lower()
    # the master fails at once; the workers would hang forever on the foreign listener
    # diagnosed from the failing node's own error, not by waiting for the deadline
    assert run.step("allreduce")["data"]["timed_out"] is False
    assert run.seconds < DEADLINE + 30
    assert_nodes_quiet(testbed)


def test_missing_gloo_interface_names_the_node(testbed: Testbed) -> None:
    nodes = testbed.config_dict()["nodes"]
    nodes[1]["env"] = {"GLOO_SOCKET_IFNAME": "eth9"}
    run = check(
        testbed.write_config(nodes=nodes, timeouts={"allreduce": DEADLINE}),
        "--steps",
        "ssh,allreduce",
    )
    assert run.rc == 1
    assert run.first is not None and run.first["step"] == "allreduce"
    assert run.first["nodes"] == ["node1"]
    assert "eth9" in str(run.finding("allreduce", run.first["finding"])["evidence"])
    # diagnosed from the failing node's own error, not by waiting for the deadline
    assert run.step("allreduce")["data"]["timed_out"] is False
    assert run.seconds < DEADLINE + 30
    assert_nodes_quiet(testbed)


def test_blocked_peers_are_named(testbed: Testbed) -> None:
    testbed.block_peer(1, src=2)
    run = check(testbed.write_config(timeouts={"allreduce": 20}), "--steps", "ssh,allreduce")
    assert run.rc == 1
    assert run.first is not None and run.first["step"] == "allreduce"
    assert set(run.first["nodes"]) & {"node1", "node2"}
    assert run.seconds < 20 + 30
    assert_nodes_quiet(testbed)


def test_ctrl_c_during_allreduce_leaves_nothing(testbed: Testbed) -> None:
    proc = start_check(testbed.write_config(timeouts={"allreduce": DEADLINE}), "ssh,allreduce")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and len(testbed.pids(1)) < 3:
        time.sleep(0.1)  # torchrun and its worker are up on node1
    assert len(testbed.pids(1)) >= 3
    interrupt(proc, within=10)
    assert_nodes_quiet(testbed, timeout=8)


def test_deadline_stops_everything_and_says_where_ranks_were(testbed: Testbed) -> None:
    # 4 s is shorter than 3 nodes need to import torch here: the deadline fires mid-start.
    run = check(testbed.write_config(timeouts={"allreduce": 4}), "--steps", "ssh,allreduce")
    assert run.rc == 1
    assert run.first is not None and run.first["step"] == "allreduce"
    hang = run.finding("allreduce", "AR-HANG")
    assert hang["severity"] == "error" and "deadline (4 s)" in hang["summary"]
    assert run.step("allreduce")["data"]["timed_out"] is True
    assert run.seconds < 4 + 30
    assert_nodes_quiet(testbed)
