"""The port step at scale, on real testbed nodes: 64 healthy nodes pass the five steps
with no false finding; one blocked edge among 64 is named, and only it; a peer that does
not answer ARP is told apart from a firewall.  Marked `scale`: these run in CI (about a
minute), never skipped there."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from checkrun import assert_nodes_quiet, check
from testbed import Testbed, start_testbed

pytestmark = [pytest.mark.testbed, pytest.mark.scale]

N = 64
FIVE = "ssh,inventory,ping,port,env"
BUDGET_S = 45  # the five steps on 64 nodes, on a quiet 2-core machine (README figure)
QUIET_LOAD = 4.0  # 1-minute load average up to which the machine counts as quiet


def budget_s() -> float:
    """45 s on a quiet machine; on one whose cores other work is sharing (the load
    average above QUIET_LOAD), proportionally more, up to 120 s."""
    load = os.getloadavg()[0]
    return BUDGET_S if load <= QUIET_LOAD else min(120.0, BUDGET_S * load / QUIET_LOAD)


@pytest.fixture(scope="module")
def bed64(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    t0 = time.monotonic()
    tb = start_testbed(N, stem="ddpl", subnet_base="10.83", workdir=tmp_path_factory.mktemp("tb64"))
    print(f"\n{N}-node testbed up in {time.monotonic() - t0:.2f}s")
    try:
        yield tb
    finally:
        tb.down()


def above_info(run_report: dict[str, Any]) -> list[str]:
    return [
        f"{s['id']}:{f['id']}: {f['summary']}"
        for s in run_report["steps"]
        for f in s["findings"]
        if f["severity"] != "info"
    ]


def test_64_healthy_nodes_pass_the_five_steps(bed64: Testbed) -> None:
    tb = bed64
    # A fresh cluster: no node has resolved its peers yet.
    neigh = tb.exec(5, ["ip", "-4", "neigh", "show", "dev", "eth0"]).stdout
    assert not {n.ip for n in tb.nodes} & {line.split()[0] for line in neigh.splitlines()}
    budget, load = budget_s(), os.getloadavg()[0]
    run = check(tb.write_config(), "--steps", FIVE, timeout=300)
    took = {s["id"]: s["duration_s"] for s in run.report.get("steps", [])}
    print(
        f"\n{N} nodes, five steps: {run.seconds:.1f}s end to end (load {load:.1f}, "
        f"budget {budget:.0f}s); per step {took}"
    )
    assert run.rc == 0, run.stdout[-3000:]
    assert above_info(run.report) == []
    port = run.step("port")["data"]
    assert port["schedule"]["rounds"] == 16 and port["schedule"]["full_mesh"]
    assert sum(len(row) for row in port["matrix"].values()) == N * (N - 1)
    assert {r for row in port["matrix"].values() for r in row.values()} == {"connected"}
    assert set(port["master_port"].values()) == {"connected"}
    assert run.seconds <= budget, f"{run.seconds:.1f}s > {budget:.0f}s (load {load:.1f}): {took}"
    assert_nodes_quiet(tb)


def test_one_blocked_edge_among_64_is_named(bed64: Testbed) -> None:
    tb = bed64
    src, dst = 5, 40
    rule = ["INPUT", "-i", "eth0", "-s", tb.nodes[src].ip, "-p", "tcp", "--syn", "-j", "DROP"]
    tb.iptables(dst, "-A", *rule)
    try:
        run = check(tb.write_config(), "--steps", "ssh,port", timeout=300)
    finally:
        tb.iptables(dst, "-D", *rule)
    print(f"\n{N} nodes, one blocked edge, ssh+port: {run.seconds:.1f}s")
    assert run.rc == 1
    (problem,) = above_info(run.report)
    f = run.finding("port", "PORT-PAIR-TIMEOUT")
    assert f["nodes"] == ["node5", "node40"]
    assert "node5 -> node40:" in f["summary"] and f["summary"].count("->") == 1, problem
    # The peer's address resolved, and the edge was tried twice: a DROP, said so.
    assert "(tried twice)" in f["evidence"][0]
    assert any(s in f["evidence"][0] for s in ("REACHABLE", "STALE", "DELAY", "PROBE"))
    matrix = run.step("port")["data"]["matrix"]
    bad = [(s, d, r) for s, row in matrix.items() for d, r in row.items() if r != "connected"]
    assert bad == [("node5", "node40", "timeout")]
    assert_nodes_quiet(tb)


def test_unanswered_arp_is_not_called_a_firewall(make_testbed: Callable[..., Testbed]) -> None:
    tb = make_testbed(3)
    tb.block_arp(2, 1)  # node2 ignores node1's ARP: neither resolves the other
    run = check(tb.write_config(), "--steps", "ssh,port", timeout=120)
    assert run.rc == 1
    f = run.finding("port", "PORT-NEIGH-UNRESOLVED")
    assert sorted(f["nodes"]) == ["node1", "node2"]
    assert "node1 -> node2" in f["summary"] and "node2 -> node1" in f["summary"]
    ids = [x["id"] for x in run.step("port")["findings"] if x["severity"] != "info"]
    assert ids == ["PORT-NEIGH-UNRESOLVED"]  # no PORT-PAIR-* firewall blame
    assert "arping" in f["fix"]
    assert_nodes_quiet(tb)


def test_scale_marker_is_registered(pytestconfig: pytest.Config) -> None:
    assert any(m.startswith("scale:") for m in pytestconfig.getini("markers"))
