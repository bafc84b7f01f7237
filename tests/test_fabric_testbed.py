"""The fabric step on the 8-node testbed, as a user runs it (`ddptui check` in a
subprocess): one node at 50 Mbit/s is named alone, and the allreduce before it is a pass
with a bandwidth finding (not AR-HANG); one link at 50 Mbit/s is named as that pair; a
healthy fabric names nothing; a node that vanishes mid-test is named and the step ends.
Nothing is left running on any node."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from checkrun import assert_nodes_quiet, check, start_check
from testbed import Testbed

TIMEOUTS = {"step": 20, "allreduce": 60, "fabric": 60}
NAMING = ("FABRIC-SLOW-NODE", "FABRIC-SLOW-LINK", "FABRIC-NODE-GONE", "FABRIC-PAIR-HUNG")


def _blamed(step: dict[str, object]) -> list[tuple[str, list[str]]]:
    return [(f["id"], f["nodes"]) for f in step["findings"] if f["id"] in NAMING]  # type: ignore[attr-defined,index]


@pytest.mark.testbed
def test_one_slow_node_is_named_alone_and_allreduce_is_no_hang(
    make_testbed: Callable[..., Testbed],
) -> None:
    tb = make_testbed(8, stem="fabn", subnet_base="10.183")
    tb.slow_node(3)
    run = check(
        # a shorter allreduce deadline cuts the sweep sooner (its share of the deadline):
        # the cut is what is asserted, and 10 s of the suite are saved
        tb.write_config(timeouts={**TIMEOUTS, "allreduce": 40}),
        "--steps",
        "ssh,allreduce,fabric",
        "--no-metrics",
        timeout=200,
    )
    assert run.seconds < 150, run.seconds
    ar = run.step("allreduce")
    assert ar["status"] == "pass", run.stdout
    ids = {f["id"] for f in ar["findings"]}
    assert "AR-HANG" not in ids and "AR-SWEEP-CUT" in ids, ids
    fabric = run.step("fabric")
    assert _blamed(fabric) == [("FABRIC-SLOW-NODE", ["node3"])], run.stdout
    assert run.first is not None and run.first["nodes"] == ["node3"]
    data = fabric["data"]
    assert data["nodes"]["node3"] < 0.1 * min(v for k, v in data["nodes"].items() if k != "node3")
    assert data["expected_gbs"] and data["expected_gbs"] > 0  # from eth0's sysfs speed
    assert {tuple(sorted((p["a"], p["b"]))) for p in data["pairs"]} == {
        (f"node{a}", f"node{b}") for a in range(8) for b in range(a + 1, 8)
    }
    assert [s for n, s in fabric["nodes"].items() if s["status"] == "fail"] and all(
        s["status"] == "pass" for n, s in fabric["nodes"].items() if n != "node3"
    )
    assert_nodes_quiet(tb)


@pytest.mark.testbed
def test_one_slow_link_is_named_as_that_pair_and_a_hung_pair_as_hung(
    make_testbed: Callable[..., Testbed],
) -> None:
    tb = make_testbed(8, stem="fabl", subnet_base="10.185")
    tb.slow_link(2, 5)
    # and, elsewhere, a pair whose packets are dropped (MASTER_PORT stays open)
    tb.block_peer(6, 1)
    tb.block_peer(1, 6)
    run = check(tb.write_config(timeouts=TIMEOUTS), "--steps", "ssh,fabric", "--no-metrics")
    assert run.rc == 1 and run.seconds < 150, run.stdout
    fabric = run.step("fabric")
    assert sorted(_blamed(fabric)) == [
        ("FABRIC-PAIR-HUNG", ["node1", "node6"]),
        ("FABRIC-SLOW-LINK", ["node2", "node5"]),
    ], run.stdout
    retest = [(p["a"], p["b"]) for p in fabric["data"]["pairs"] if p["confirm"]]
    assert sorted(retest) == [("node1", "node6"), ("node2", "node5")]
    assert fabric["duration_s"] < TIMEOUTS["fabric"]
    assert_nodes_quiet(tb)


def _loads_torch(tb: Testbed, i: int) -> bool:
    """A process on node i has mapped torch's library (the fabric worker importing it)."""
    for pid in tb.pids(i):
        try:
            if b"libtorch" in Path(f"/proc/{pid}/maps").read_bytes():
                return True
        except OSError:
            continue
    return False


@pytest.mark.testbed
def test_healthy_fabric_names_nothing_then_a_vanished_node_is_named(
    make_testbed: Callable[..., Testbed],
) -> None:
    tb = make_testbed(8, stem="fabh", subnet_base="10.187")
    cfg = tb.write_config(timeouts=TIMEOUTS)
    run = check(cfg, "--steps", "ssh,fabric", "--no-metrics")
    assert run.rc == 0, run.stdout
    fabric = run.step("fabric")
    assert fabric["status"] == "pass" and not _blamed(fabric), run.stdout
    planned = [p for p in fabric["data"]["pairs"] if not p["confirm"]]  # re-tests: flukes
    assert len(planned) == 28 and len(fabric["data"]["nodes"]) == 8
    assert_nodes_quiet(tb)

    # A node that goes away while the pairs run: named, the step ends, nothing left.
    proc = start_check(cfg, "ssh,fabric")
    # The step is under way once node6's fabric worker loads torch; a fixed sleep missed it
    # on an idle machine, where the whole step ended within 6 s.
    deadline = time.monotonic() + 60
    while not _loads_torch(tb, 6):
        assert time.monotonic() < deadline and proc.poll() is None, "no fabric worker on node6"
        time.sleep(0.05)
    tb.link_down(6)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, out
    assert "node6" in out and ("FABRIC-NODE-GONE" in out or "NODE-LOST" in out), out
    for name in ("FABRIC-SLOW-NODE", "FABRIC-SLOW-LINK"):
        assert name not in out, out
    tb.link_up(6)
    assert_nodes_quiet(tb)
