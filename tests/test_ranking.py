"""Ranking that knows the topology (ranking.yaml): loopback is no fault when every node
is one host, and a real cause leads its consequences. The acceptance case is a real
H100 session (tests/fixtures/gpu-h100/check-2nodes-1gpu.json, copied unedited
from the shared GPU captures): two `host: local` nodes on one GPU, where ddptui had
made AR-BOOT-LOOPBACK the first failure instead of the duplicate GPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.model import StepResult
from ddptui.diagnosis.ranking import (
    RankingError,
    Topology,
    load_ranking,
    order_findings,
    parse_ranking,
    primary,
    rank_findings,
)
from ddptui.report.json_report import first_failure
from ddptui.report.load import results_from_report

H100_TWO_NODES = Path(__file__).parent / "fixtures" / "gpu-h100" / "check-2nodes-1gpu.json"


def _report() -> dict[str, Any]:
    return json.loads(H100_TWO_NODES.read_text(encoding="utf-8"))


def _step_findings(report: dict[str, Any], step: str) -> list[Finding]:
    (s,) = [s for s in report["steps"] if s["id"] == step]
    return [Finding.from_dict(f) for f in s["findings"]]


def _topology(report: dict[str, Any]) -> Topology:
    (inv,) = [s for s in report["steps"] if s["id"] == "inventory"]
    rows = []
    for n in report["nodes"]:
        data = inv["nodes"][n["name"]].get("data") or {}
        rows.append((n["name"], n["host"], n.get("port"), data.get("boot_id"), data.get("netns")))
    return Topology.from_nodes(rows)


def f(fid: str, severity: str = "error", nodes: tuple[str, ...] = ("n0",)) -> Finding:
    return Finding(fid, severity, nodes, f"{fid} seen", "cause", "fix")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the real session


def test_real_h100_session_as_recorded_led_with_loopback() -> None:
    """The fixture is the bug: what ddptui said then."""
    report = _report()
    assert report["first_failure"]["finding"] == "AR-BOOT-LOOPBACK"
    ids = [x.id for x in _step_findings(report, "allreduce")]
    assert ids == ["AR-BOOT-LOOPBACK", "ENV-DUPGPU"]


def test_real_h100_session_reranked_leads_with_the_duplicate_gpu() -> None:
    report = _report()
    topo = _topology(report)
    assert topo.one_host  # both nodes are `host: local`, MASTER_ADDR 127.0.0.1
    ranked = rank_findings(_step_findings(report, "allreduce"), topo)
    assert [x.id for x in ranked] == ["ENV-DUPGPU", "AR-BOOT-LOOPBACK"]
    lead, loop = ranked
    assert lead.severity == "error" and "Duplicate GPU detected" in " ".join(lead.evidence)
    assert loop.severity == "info"
    assert "every configured node (gpuA, gpuB) is this one host" in loop.cause
    assert primary(ranked) is lead


def test_real_h100_session_replayed_names_the_duplicate_gpu_first() -> None:
    """Even from the saved report (severities as recorded, no topology), precedence
    alone puts the duplicate GPU first: what `ddptui report` and replay show."""
    results = results_from_report(_report())
    first = first_failure(results)
    assert first is not None and (first.step, first.finding) == ("allreduce", "ENV-DUPGPU")
    assert first.to_dict()["nodes"] == ["gpuA", "gpuB"]


# --------------------------------------------------------------------------- topology


def test_one_host_from_boot_id_and_network_namespace() -> None:
    same = Topology.from_nodes(
        [("a", "h1", None, "boot1", "net:[1]"), ("b", "h2", None, "boot1", "net:[1]")]
    )
    assert same.one_host and same.same_host_groups() == [["a", "b"]]


def test_namespaces_on_one_kernel_are_not_one_host() -> None:
    """Containers (and the testbed's namespaces) share the boot id, not the loopback."""
    topo = Topology.from_nodes(
        [("a", "10.0.0.1", None, "boot1", "net:[1]"), ("b", "10.0.0.2", None, "boot1", "net:[2]")]
    )
    assert not topo.one_host and topo.same_host_groups() == []


def test_without_probe_facts_the_config_decides() -> None:
    local = Topology.from_nodes(
        [("a", "local", None, None, None), ("b", "local", None, None, None)]
    )
    assert local.one_host
    ports = Topology.from_nodes(
        [
            ("a", "host", 2201, None, None),
            ("b", "host", 2202, None, None),
            ("c", "host", 2201, "x", None),
        ]
    )
    assert not ports.one_host and ports.same_host_groups() == [["a", "c"]]


def test_loopback_stays_an_error_across_hosts() -> None:
    topo = Topology.from_nodes([("a", "h1", None, None, None), ("b", "h2", None, None, None)])
    ranked = rank_findings([f("PING-LOOPBACK"), f("ENV-MASTER-LOOPBACK")], topo)
    assert [x.severity for x in ranked] == ["error", "error"]
    assert all(x.cause == "cause" for x in ranked)


def test_every_loopback_finding_is_info_on_one_host() -> None:
    topo = Topology.from_nodes([("a", "local", None, None, None), ("b", "local", None, None, None)])
    ids = ["PING-LOOPBACK", "ENV-MASTER-LOOPBACK", "ENV-IFNAME-LOOPBACK", "GLOO-LOOPBACK"]
    ranked = rank_findings([f(i) for i in ids] + [f("AR-HANG")], topo)
    assert {x.id: x.severity for x in ranked} == dict.fromkeys(ids, "info") | {"AR-HANG": "error"}


# --------------------------------------------------------------------------- precedence


def test_a_cause_leads_its_consequences_else_order_is_kept() -> None:
    found = [f("C10D-RESET"), f("AR-HANG"), f("ENV-ORDINAL", nodes=("n1",)), f("SHM-SIZE")]
    assert [x.id for x in order_findings(found)] == [
        "ENV-ORDINAL",
        "C10D-RESET",
        "AR-HANG",
        "SHM-SIZE",
    ]
    plain = [f("C10D-RESET"), f("SHM-SIZE"), f("AR-HANG")]
    assert order_findings(plain) == plain


def test_an_info_cause_does_not_lead_and_errors_still_beat_warnings() -> None:
    assert primary([f("AR-HANG"), f("ENV-ORDINAL", "info")]).id == "AR-HANG"  # type: ignore[union-attr]
    found = [f("AR-BANDWIDTH", "info"), f("ENV-DUPGPU", "warning"), f("AR-FAILED")]
    assert primary(found).id == "AR-FAILED"  # type: ignore[union-attr]
    assert primary([f("AR-BANDWIDTH", "info")]) is None


def test_step_primary_uses_the_ranking() -> None:
    step = StepResult("allreduce", "t", "fail", 1.0, {}, (f("AR-BOOT-LOOPBACK"), f("ENV-DUPGPU")))
    assert step.primary is not None and step.primary.id == "ENV-DUPGPU"


# --------------------------------------------------------------------------- the file


def test_shipped_rules_load_and_name_real_findings() -> None:
    rules = load_ranking()
    assert any(r.when == "one_host" and r.matches("AR-BOOT-LOOPBACK") for r in rules.topology)
    assert any(
        p.is_cause("ENV-DUPGPU") and p.is_consequence("AR-BOOT-LOOPBACK") for p in rules.precedence
    )


GOOD = """\
topology:
- {id: T, when: one_host, findings: [AR-HANG], severity: info, note: 'n'}
precedence:
- {id: P, why: 'w', causes: [ENV-ORDINAL], before: [C10D-*]}
"""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("topology: [", "not valid YAML"),
        ("rules: []", "expected top-level 'topology:' and 'precedence:'"),
        (GOOD.replace("one_host", "sunny"), "topology rule T: when 'sunny' is not one of"),
        (GOOD.replace("severity: info", "severity: low"), "topology rule T: severity 'low'"),
        (GOOD.replace("note: 'n'", "nope: 'n'"), "topology rule T: missing keys note"),
        (GOOD.replace("causes: [ENV-ORDINAL]", "causes: []"), "precedence rule P: causes must be"),
        (GOOD.replace("C10D-*", "C10X-*"), "precedence rule P: 'C10X-\\*' names no finding"),
        (GOOD.replace("[AR-HANG]", "[AR-HNAG]"), "topology rule T: 'AR-HNAG' names no finding"),
    ],
)
def test_a_malformed_ranking_file_is_a_clear_error(text: str, message: str) -> None:
    from ddptui.diagnosis.kb import load_kb

    with pytest.raises(RankingError, match=message):
        parse_ranking(text, load_kb())


# --------------------------------------------------------------------------- INV-SAME-MACHINE


def _inventory(boot: str | None, netns: str | None, mid: str = "m1") -> dict[str, Any]:
    return {"hostname": "h", "machine_id": mid, "boot_id": boot, "netns": netns}


def _same_machine(hosts: list[str], facts: dict[str, dict[str, Any]]) -> list[Finding]:
    from types import SimpleNamespace

    from ddptui.checklist.steps.inventory import same_machine_findings
    from ddptui.transport.base import NodeTarget

    targets = [NodeTarget(f"node{i}", h, i, "python3") for i, h in enumerate(hosts)]
    return same_machine_findings(SimpleNamespace(targets=targets), facts)  # type: ignore[arg-type]


def test_two_config_entries_on_one_machine_are_named() -> None:
    facts = {
        "node0": _inventory("b1", "net:[7]"),
        "node1": _inventory("b2", "net:[7]"),
        "node2": _inventory("b1", "net:[7]"),
    }
    (found,) = _same_machine(["10.0.0.1", "10.0.0.2", "gpu-a.example"], facts)
    assert (found.id, found.severity, found.nodes) == (
        "INV-SAME-MACHINE",
        "warning",
        ("node0", "node2"),
    )
    assert found.summary == "node0, node2 are the same machine"
    assert "config mistake" in found.cause and "node0, node2" in found.fix
    assert "machine-id m1, boot-id b1, network namespace net:[7]" in found.evidence[0]


def test_namespaces_on_one_kernel_are_not_the_same_machine() -> None:
    """The testbed (and containers on one host): one boot id, separate network stacks."""
    facts = {f"node{i}": _inventory("b1", f"net:[{i}]") for i in range(3)}
    assert _same_machine(["10.0.0.1", "10.0.0.2", "10.0.0.3"], facts) == []


def test_the_local_demo_is_one_machine_by_design() -> None:
    facts = {f"node{i}": _inventory("b1", "net:[1]") for i in range(2)}
    (found,) = _same_machine(["local", "local"], facts)
    assert found.severity == "info" and "expected: every node is `host: local`" in found.summary


def test_without_identity_distinct_hosts_are_not_flagged() -> None:
    facts = {"node0": _inventory(None, None), "node1": _inventory(None, None)}
    assert _same_machine(["10.0.0.1", "10.0.0.2"], facts) == []
