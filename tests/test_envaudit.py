"""The env audit's rules, each with a case that fires and a healthy one that does not.

Facts are shaped like the env probe's real records (probes/env.py, _common.interfaces()).
"""

from __future__ import annotations

from typing import Any

import pytest

from ddptui.diagnosis.envaudit import (
    EXPECTED_TO_DIFFER,
    GIB,
    EnvFacts,
    audit_env,
    env_diff,
    nccl_ifname_match,
    visible_gpu_count,
)
from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.kb import kb_entry

MASTER = "10.0.0.1"


def iface(name: str, *cidrs: str, up: bool = True, kind: str = "ether") -> dict[str, Any]:
    addrs = [
        {
            "family": "inet6" if ":" in c else "inet",
            "addr": c.split("/")[0],
            "prefixlen": int(c.split("/")[1]),
        }
        for c in cidrs
    ]
    state = "unknown" if kind == "loopback" else ("up" if up else "down")
    return {
        "name": name,
        "state": state,
        "up": up,
        "lower_up": up,
        "mtu": 1500,
        "mac": "02:00:00:00:00:01",
        "speed_mbps": None,
        "kind": kind,
        "addrs": addrs,
    }


LO = iface("lo", "127.0.0.1/8", "::1/128", kind="loopback")


def node(
    rank: int,
    env: dict[str, str] | None = None,
    *,
    source: str = "config",
    ifaces: list[dict[str, Any]] | None = None,
    route: dict[str, Any] | None = None,
    shm: int | None = 8 * GIB,
    gpus: int | None = None,
) -> EnvFacts:
    """node<rank> at 10.0.0.<rank+1>/24 on eth0; node0 is the master (its route is via lo)."""
    addr = f"10.0.0.{rank + 1}"
    env = {"PATH": "/usr/bin:/bin", "HOME": "/home/alice", **(env or {})}
    if route is None:
        route = {
            "dev": "lo" if rank == 0 else "eth0",
            "src": addr,
            "via": None,
            "method": "ip route get",
        }
    return EnvFacts(
        name=f"node{rank}",
        rank=rank,
        env=env,
        sources={k: ("login" if k in ("PATH", "HOME") else source) for k in env},
        interfaces=ifaces if ifaces is not None else [LO, iface("eth0", f"{addr}/24")],
        route=route,
        shm_bytes=shm,
        gpu_count=gpus,
    )


def audit(
    nodes: list[EnvFacts], nproc: int | str = 1, addr: str = MASTER, port: int = 29500
) -> list[Finding]:
    return audit_env(nodes, master_addr=addr, master_port=port, nproc_per_node=nproc)


def only(findings: list[Finding], id_: str) -> Finding:
    hits = [f for f in findings if f.id == id_]
    assert len(hits) == 1, [f.to_dict() for f in findings]
    return hits[0]


def ids(findings: list[Finding]) -> list[str]:
    return [f.id for f in findings]


# --------------------------------------------------------------------------- nccl_ifname_match

NAMES = ["lo", "eth0", "eth1", "eth10", "ens5", "docker0", "ib0"]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("eth", ["eth0", "eth1", "eth10"]),  # prefix match
        ("eth1", ["eth1", "eth10"]),  # a prefix, so eth10 too
        ("=eth1", ["eth1"]),  # exact
        ("=eth1,ens5", ["eth1", "ens5"]),  # exact list
        ("^docker,lo", ["eth0", "eth1", "eth10", "ens5", "ib0"]),  # exclusion by prefix
        ("^=eth1", ["lo", "eth0", "eth10", "ens5", "docker0", "ib0"]),  # exact exclusion
        ("eth0,ens", ["eth0", "ens5"]),  # prefix list
        ("eth0:1234,ib:1", ["eth0", "ib0"]),  # ':port' ignored for matching
        ("=eth0:1234", ["eth0"]),
        ("eth9", []),  # no such interface
        ("eth0, ens5", ["eth0"]),  # NCCL does not trim: " ens5" never matches
        (",,eth0,", ["eth0"]),  # empty items dropped
        ("^=", []),  # empty exclusion list excludes everything
        ("=,", NAMES),  # empty list: everything
    ],
)
def test_nccl_ifname_match(spec: str, expected: list[str]) -> None:
    assert nccl_ifname_match(spec, NAMES) == expected


@pytest.mark.parametrize("spec", ["", "e", "^", "="])
def test_nccl_ifname_match_ignores_length_one(spec: str) -> None:
    assert nccl_ifname_match(spec, NAMES) is None


# --------------------------------------------------------------------------- healthy cluster


def test_healthy_cluster_has_no_findings() -> None:
    env = {
        "NCCL_SOCKET_IFNAME": "=eth0",
        "GLOO_SOCKET_IFNAME": "eth0",
        "MASTER_ADDR": MASTER,
        "MASTER_PORT": "29500",
        "NCCL_IB_DISABLE": "1",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "WORLD_SIZE": "4",
    }
    nodes = [node(0, {**env, "NODE_RANK": "0"}, gpus=2), node(1, {**env, "NODE_RANK": "1"}, gpus=2)]
    assert audit(nodes, nproc=2) == []


def test_every_finding_names_nodes_cause_fix_and_evidence() -> None:
    env0 = {
        "NCCL_SOCKET_IFNAME": "eth9",
        "NCCL_COMM_ID": "10.0.0.1:1234",
        "NCCL_BLOCKING_WAIT": "1",
        "NODE_RANK": "1",
        "PET_NNODES": "4",
    }
    nodes = [
        node(0, env0, shm=64 << 20),
        node(1, {"NCCL_PROTO": "LL", "GLOO_SOCKET_IFNAME": "^lo", "MASTER_PORT": "1"}),
    ]
    findings = audit(nodes, nproc=4, addr="127.0.0.1")
    assert len(findings) >= 8
    for f in findings:
        assert kb_entry(f.id).cause and f.nodes and f.cause and f.fix and f.evidence
        unfilled = [p for p in kb_entry(f.id).placeholders if f"<{p}>" in f.cause + f.fix]
        assert not unfilled, (f.id, unfilled)  # the audit fills every fact its text names
        assert any(n in f.summary for n in f.nodes), f.summary


# --------------------------------------------------------------------------- master


def test_master_addr_differs_from_config() -> None:
    f = only(audit([node(0), node(1, {"MASTER_ADDR": "10.0.0.9"})]), "ENV-MASTER-MISMATCH")
    assert (f.severity, f.nodes) == ("error", ("node1",))
    assert "node1" in f.summary and "MASTER_ADDR" in f.summary
    assert "node1: MASTER_ADDR=10.0.0.9 (from config env)" in f.evidence


def test_master_port_differs_across_nodes() -> None:
    nodes = [node(0, {"MASTER_PORT": "29500"}), node(1, {"MASTER_PORT": "29501"}, source="node")]
    f = only(audit(nodes), "ENV-MASTER-MISMATCH")
    assert f.nodes == ("node1",) and f.severity == "error"
    assert "under node1's `env:`" in f.fix


def test_master_name_vs_address_is_only_a_warning() -> None:
    f = only(
        audit([node(0), node(1, {"MASTER_ADDR": "10.0.0.1"})], addr="head"), "ENV-MASTER-MISMATCH"
    )
    assert f.severity == "warning"


def test_master_matching_config_passes() -> None:
    env = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    assert audit([node(0, env), node(1, env)]) == []


def test_master_loopback_in_env() -> None:
    findings = audit([node(0), node(1, {"MASTER_ADDR": "localhost"})])
    f = only(findings, "ENV-MASTER-LOOPBACK")
    assert f.nodes == ("node1",) and f.severity == "error"
    assert "ENV-MASTER-MISMATCH" not in ids(findings)  # one root cause, one finding


def test_master_loopback_in_config() -> None:
    f = only(audit([node(0), node(1)], addr="127.0.0.1"), "ENV-MASTER-LOOPBACK")
    assert f.nodes == ("node0", "node1")


def test_master_loopback_fine_on_one_node() -> None:
    assert audit([node(0, {"MASTER_ADDR": "127.0.0.1"})], addr="127.0.0.1") == []


# --------------------------------------------------------------------------- ranks and world size


def test_duplicate_node_rank() -> None:
    findings = audit([node(0, {"NODE_RANK": "0"}), node(1, {"NODE_RANK": "0"}, source="login")])
    f = only(findings, "ENV-DUPRANK")
    assert f.nodes == ("node1",)
    assert "node1: NODE_RANK=0" in f.summary and "also claimed by node0" in f.summary
    assert "node1: NODE_RANK=0 (from login env)" in f.evidence


def test_node_rank_out_of_range_and_group_rank() -> None:
    findings = audit([node(0, {"GROUP_RANK": "0"}), node(1, {"GROUP_RANK": "5"})])
    f = only(findings, "ENV-DUPRANK")
    assert f.nodes == ("node1",) and "out of range 0..1" in f.summary


def test_node_rank_not_an_integer() -> None:
    assert "not an integer" in only(audit([node(0, {"NODE_RANK": "zero"})]), "ENV-DUPRANK").summary


def test_correct_node_ranks_pass() -> None:
    assert audit([node(0, {"NODE_RANK": "0"}), node(1, {"NODE_RANK": "1"})]) == []


def test_duplicate_and_out_of_range_rank() -> None:
    nodes = [node(0, {"RANK": "0"}), node(1, {"RANK": "0"}), node(2, {"RANK": "7"})]
    dup, rng = [f for f in audit(nodes, nproc=2) if f.id == "ENV-DUPRANK"]
    assert dup.nodes == ("node0", "node1") and "same on several nodes" in dup.summary
    assert rng.nodes == ("node2",) and "0..5" in rng.summary


def test_distinct_ranks_in_range_pass() -> None:
    assert audit([node(0, {"RANK": "0"}), node(1, {"RANK": "2"})], nproc=2) == []


def test_world_size_differs_from_config() -> None:
    nodes = [node(0, {"WORLD_SIZE": "4"}), node(1, {"WORLD_SIZE": "2"})]
    f = only(audit(nodes, nproc=2), "ENV-WORLDSIZE")
    assert f.nodes == ("node1",) and "2 x 2 = 4" in f.summary


def test_world_size_differs_across_nodes_with_gpus_nproc() -> None:
    nodes = [
        node(0, {"WORLD_SIZE": "16"}),
        node(1, {"WORLD_SIZE": "16"}),
        node(2, {"WORLD_SIZE": "8"}),
    ]
    f = only(audit(nodes, nproc="gpus"), "ENV-WORLDSIZE")
    assert f.nodes == ("node2",)


def test_world_size_consistent_passes() -> None:
    assert audit([node(0, {"WORLD_SIZE": "8"}), node(1, {"WORLD_SIZE": "8"})], nproc=4) == []


# --------------------------------------------------------------------------- NCCL_SOCKET_IFNAME


def test_ifname_matches_nothing() -> None:
    f = only(audit([node(0), node(1, {"NCCL_SOCKET_IFNAME": "eth9"})]), "ENV-IFNAME-NOMATCH")
    assert (f.severity, f.nodes) == ("error", ("node1",))
    assert "BOOT-NOIF" in f.cause
    assert f.evidence[0] == (
        "node1: NCCL_SOCKET_IFNAME=eth9 (from config env); interfaces: "
        "lo(up,127.0.0.1,::1), eth0(up,10.0.0.2)"
    )
    assert 'NCCL_SOCKET_IFNAME: "=eth0"' in f.fix


def test_ifname_with_space_is_explained() -> None:
    f = only(audit([node(0), node(1, {"NCCL_SOCKET_IFNAME": " eth0"})]), "ENV-IFNAME-NOMATCH")
    assert "does not trim" in f.summary


ENS = [LO, iface("ens5", "10.0.0.2/24")]
ENS_ROUTE = {"dev": "ens5", "src": "10.0.0.2", "via": None}


def test_ifname_names_differ_between_nodes_but_list_covers_both() -> None:
    env = {"NCCL_SOCKET_IFNAME": "=eth0,ens5"}
    assert audit([node(0, env), node(1, env, ifaces=ENS, route=ENS_ROUTE)]) == []


def test_ifname_repeated_equals_sign_is_explained() -> None:
    # NCCL reads '=' once, at the start: "=eth0,=ens5" looks for an interface named "=ens5".
    env = {"NCCL_SOCKET_IFNAME": "=eth0,=ens5"}
    f = only(audit([node(0, env), node(1, env, ifaces=ENS, route=ENS_ROUTE)]), "ENV-IFNAME-NOMATCH")
    assert f.nodes == ("node1",) and "apply to the whole list" in f.summary


def test_ifname_selects_a_down_interface() -> None:
    ifaces = [LO, iface("eth0", "10.0.0.2/24", up=False), iface("eth1", "10.1.0.2/24")]
    f = only(
        audit([node(0), node(1, {"NCCL_SOCKET_IFNAME": "eth"}, ifaces=ifaces)]), "ENV-IFNAME-DOWN"
    )
    assert "eth0, which is down" in f.summary and "eth0(down,10.0.0.2)" in f.evidence[0]


def test_ifname_selects_interfaces_without_address() -> None:
    ifaces = [LO, iface("eth0", "10.0.0.2/24"), iface("eth1")]
    f = only(
        audit([node(0), node(1, {"NCCL_SOCKET_IFNAME": "=eth1"}, ifaces=ifaces)]), "ENV-IFNAME-DOWN"
    )
    assert "none of which has an address" in f.summary


def test_ifname_only_loopback_on_multi_node() -> None:
    f = only(audit([node(0), node(1, {"NCCL_SOCKET_IFNAME": "lo"})]), "ENV-IFNAME-LOOPBACK")
    assert f.severity == "error" and f.nodes == ("node1",)


def test_ifname_loopback_fine_on_single_node() -> None:
    assert audit([node(0, {"NCCL_SOCKET_IFNAME": "lo"})]) == []


def test_ifname_ipv6_loopback_is_skipped_like_nccl() -> None:
    lo6 = iface("lo", "::1/128", kind="loopback")
    f = only(
        audit([node(0), node(1, {"NCCL_SOCKET_IFNAME": "lo"}, ifaces=[lo6])]), "ENV-IFNAME-DOWN"
    )
    assert "none of which has an address" in f.summary


def test_ifname_not_on_route_to_master() -> None:
    ifaces = [LO, iface("eth0", "10.0.0.2/24"), iface("docker0", "172.17.0.1/16", kind="virtual")]
    f = only(
        audit([node(0), node(1, {"NCCL_SOCKET_IFNAME": "docker"}, ifaces=ifaces)]),
        "ENV-IFNAME-NOROUTE",
    )
    assert f.severity == "warning" and "reached through eth0" in f.summary
    assert "node1: route to 10.0.0.1: dev eth0 src 10.0.0.2 via -" in f.evidence


def test_ifname_on_master_node_whose_route_is_lo_passes() -> None:
    # `ip route get <own address>` says dev lo; eth0 still holds the master's address.
    assert audit([node(0, {"NCCL_SOCKET_IFNAME": "eth0"}), node(1)]) == []


def test_ifname_subnet_of_master_passes_even_if_route_differs() -> None:
    ifaces = [LO, iface("eth0", "192.168.1.2/24"), iface("eth1", "10.0.0.2/24")]
    route = {"dev": "eth0", "src": "192.168.1.2", "via": "192.168.1.1"}
    assert (
        audit([node(0), node(1, {"NCCL_SOCKET_IFNAME": "=eth1"}, ifaces=ifaces, route=route)]) == []
    )


def test_ifname_length_one_is_ignored() -> None:
    f = only(audit([node(0), node(1, {"NCCL_SOCKET_IFNAME": "e"})]), "ENV-IFNAME-IGNORED")
    assert f.severity == "warning" and "ignored by NCCL" in f.summary


def test_ifname_socket_family_limits_addresses() -> None:
    ifaces = [LO, iface("eth0", "10.0.0.2/24"), iface("eth1", "fd00::2/64")]
    env = {"NCCL_SOCKET_IFNAME": "=eth1", "NCCL_SOCKET_FAMILY": "AF_INET"}
    assert "ENV-IFNAME-DOWN" in ids(audit([node(0, env), node(1, env, ifaces=ifaces)]))


# --------------------------------------------------------------------------- GLOO_SOCKET_IFNAME


def test_gloo_given_nccl_syntax() -> None:
    f = only(audit([node(0), node(1, {"GLOO_SOCKET_IFNAME": "^docker,lo"})]), "ENV-GLOO-SYNTAX")
    assert f.nodes == ("node1",) and "NCCL syntax" in f.summary
    assert "no interface is named 'docker'" in f.summary
    assert any("dev eth0" in line for line in f.evidence)  # the interface to use instead


def test_gloo_prefix_is_not_a_name() -> None:
    f = only(audit([node(0, {"GLOO_SOCKET_IFNAME": "eth"})]), "ENV-GLOO-SYNTAX")
    assert "no interface is named 'eth'" in f.summary


def test_gloo_interface_without_address() -> None:
    ifaces = [LO, iface("eth0", "10.0.0.1/24"), iface("eth1")]
    f = only(audit([node(0, {"GLOO_SOCKET_IFNAME": "eth1"}, ifaces=ifaces)]), "ENV-GLOO-SYNTAX")
    assert "eth1 has no address" in f.summary


def test_gloo_exact_names_pass() -> None:
    ifaces = [LO, iface("eth0", "10.0.0.1/24"), iface("eth1", "10.1.0.1/24")]
    env = {"GLOO_SOCKET_IFNAME": "eth0,eth1"}
    assert (
        audit(
            [
                node(0, env, ifaces=ifaces),
                node(
                    1, env, ifaces=[LO, iface("eth0", "10.0.0.2/24"), iface("eth1", "10.1.0.2/24")]
                ),
            ]
        )
        == []
    )


def test_gloo_count_differs() -> None:
    ifaces = [LO, iface("eth0", "10.0.0.1/24"), iface("eth1", "10.1.0.1/24")]
    nodes = [
        node(0, {"GLOO_SOCKET_IFNAME": "eth0,eth1"}, ifaces=ifaces),
        node(1, {"GLOO_SOCKET_IFNAME": "eth0"}),
        node(2, {"GLOO_SOCKET_IFNAME": "eth0"}),
    ]
    f = only(audit(nodes), "ENV-GLOO-COUNT")
    assert (f.severity, f.nodes) == ("warning", ("node0",))


def test_gloo_one_name_vs_unset_is_the_same_count() -> None:
    assert audit([node(0, {"GLOO_SOCKET_IFNAME": "eth0"}), node(1)]) == []


# --------------------------------------------------------------------------- NCCL_* consistency


def test_nccl_proto_differs_is_an_error() -> None:
    nodes = [node(0, {"NCCL_PROTO": "Simple"}), node(1, {"NCCL_PROTO": "Simple"}), node(2)]
    f = only(audit(nodes), "ENV-NCCL-DIFF")
    assert (f.severity, f.nodes) == ("error", ("node2",))
    assert "node2: NCCL_PROTO unset" in f.evidence and "Message truncated" in f.cause


def test_other_nccl_difference_is_a_warning() -> None:
    f = only(
        audit([node(0, {"NCCL_P2P_DISABLE": "1"}), node(1, {"NCCL_P2P_DISABLE": "0"})]),
        "ENV-NCCL-DIFF",
    )
    assert f.severity == "warning" and f.nodes == ("node0", "node1")


def test_per_node_nccl_selectors_may_differ() -> None:
    env0 = {"NCCL_SOCKET_IFNAME": "=eth0", "NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5_0"}
    env1 = {"NCCL_SOCKET_IFNAME": "=ens5", "NCCL_IB_HCA": "=mlx5_1:1"}
    nodes = [node(0, env0), node(1, env1, ifaces=ENS, route=ENS_ROUTE)]
    assert audit(nodes) == []


def test_a_host_id_per_node_is_no_mismatch() -> None:
    # NCCL_HOSTID is meant to differ per machine (seen on a lent H200: two local nodes
    # with their own host ids were told to "set it to one value")
    nodes = [node(0, {"NCCL_HOSTID": "gpuA"}), node(1, {"NCCL_HOSTID": "gpuB"})]
    assert "ENV-NCCL-DIFF" not in ids(audit(nodes))


def test_redacted_values_compare_as_opaque_strings() -> None:
    a, b = "<redacted:0123456789>", "<redacted:abcdefabcd>"
    f = only(audit([node(0, {"NCCL_NET": a}), node(1, {"NCCL_NET": b})]), "ENV-NCCL-DIFF")
    assert f"node0: NCCL_NET={a} (from config env)" in f.evidence
    assert audit([node(0, {"NCCL_NET": a}), node(1, {"NCCL_NET": a})]) == []


def test_torch_error_handling_differs_counting_the_old_name() -> None:
    nodes = [node(0, {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}), node(1)]
    f = only(audit(nodes), "ENV-NCCL-DIFF")
    assert f.severity == "warning" and "TORCH_NCCL_ASYNC_ERROR_HANDLING" in f.summary
    same = [node(0, {"TORCH_NCCL_BLOCKING_WAIT": "1"}), node(1, {"NCCL_BLOCKING_WAIT": "1"})]
    assert "ENV-NCCL-DIFF" not in ids(audit(same))


# --------------------------------------------------------------------------- deprecated, COMM_ID


def test_deprecated_name_set() -> None:
    env = {"NCCL_ASYNC_ERROR_HANDLING": "1"}
    f = only(audit([node(0, env), node(1, env)]), "ENV-DEPRECATED")
    assert f.nodes == ("node0", "node1") and "TORCH_NCCL_ASYNC_ERROR_HANDLING" in f.fix


def test_deprecated_and_new_name_disagree() -> None:
    env = {"NCCL_BLOCKING_WAIT": "1", "TORCH_NCCL_BLOCKING_WAIT": "0"}
    f = only(audit([node(0, env)]), "ENV-DEPRECATED")
    assert any("TORCH_ name wins" in line for line in f.evidence)


def test_new_names_only_pass() -> None:
    assert audit([node(0, {"TORCH_NCCL_BLOCKING_WAIT": "1", "TORCH_NCCL_DESYNC_DEBUG": "1"})]) == []


def test_comm_id_set() -> None:
    f = only(
        audit([node(0), node(1, {"NCCL_COMM_ID": "10.0.0.1:6000"}, source="login")]), "BOOT-COMMID"
    )
    assert (f.severity, f.nodes) == ("warning", ("node1",)) and "Unset NCCL_COMM_ID" in f.fix


def test_comm_id_unset_passes() -> None:
    assert "BOOT-COMMID" not in ids(audit([node(0), node(1)]))


# --------------------------------------------------------------------------- GPUs


@pytest.mark.parametrize(
    ("value", "gpus", "count"),
    [
        ("0,1,2,3", 8, 4),
        ("", 8, 0),
        ("-1", 8, 0),
        ("none", 8, 0),
        ("NoDevFiles", 8, 0),
        ("0,1,-1,2", 8, 2),
        ("0,1,5", 4, 2),
        ("0,0,1", 8, 1),
        ("3", None, 1),
        ("GPU-8b1f6a2e-1234-5678-9abc-def012345678,GPU-11111111-2222-3333-4444-555555555555", 2, 2),
        ("MIG-GPU-8b1f6a2e-1234-5678-9abc-def012345678/1/0", 1, 1),
        (" 0 , 1 ", 2, 2),
    ],
)
def test_visible_gpu_count(value: str, gpus: int | None, count: int) -> None:
    assert visible_gpu_count(value, gpus) == count


def test_ordinal_fewer_visible_than_nproc() -> None:
    f = only(
        audit([node(0, {"CUDA_VISIBLE_DEVICES": "0,1"}, gpus=8), node(1, gpus=8)], nproc=4),
        "ENV-ORDINAL",
    )
    assert (f.severity, f.nodes) == ("error", ("node0",)) and "exposes 2 GPU(s)" in f.summary


def test_ordinal_hidden_gpus_with_gpus_nproc() -> None:
    f = only(audit([node(0, {"CUDA_VISIBLE_DEVICES": ""})], nproc="gpus"), "ENV-ORDINAL")
    assert "hides every GPU" in f.summary


def test_ordinal_unset_uses_gpu_count() -> None:
    f = only(audit([node(0, gpus=2)], nproc=4), "ENV-ORDINAL")
    assert "has 2 GPU(s)" in f.summary and "GPUs found: 2" in f.evidence[0]


def test_ordinal_enough_gpus_or_cpu_node_pass() -> None:
    assert audit([node(0, {"CUDA_VISIBLE_DEVICES": "2,3"}, gpus=4)], nproc=2) == []
    assert audit([node(0, gpus=4)], nproc="gpus") == []
    assert audit([node(0, {"CUDA_VISIBLE_DEVICES": ""}, gpus=0)], nproc=2) == []


# --------------------------------------------------------------------------- shm, PET_*


def test_small_dev_shm() -> None:
    f = only(audit([node(0, shm=64 * 1024 * 1024)]), "SHM-SIZE")
    assert f.severity == "warning" and "64 MiB" in f.summary
    assert "--shm-size=1g" in f.fix and "NCCL_SHM_DISABLE=1" in f.fix


def test_big_or_unknown_dev_shm_passes() -> None:
    assert audit([node(0, shm=GIB), node(1, shm=None)]) == []


def test_pet_variables_disagree() -> None:
    env = {"PET_NNODES": "1", "PET_NODE_RANK": "0", "PET_MASTER_PORT": "29500"}
    f = only(audit([node(0), node(1, env)]), "ENV-PET-OVERRIDE")
    assert f.nodes == ("node1",) and "PET_NNODES=1" in f.summary
    assert "PET_NODE_RANK=1" in f.cause and "PET_MASTER_PORT" not in f.fix


def test_pet_variables_agree() -> None:
    def env(rank: int) -> dict[str, str]:
        return {
            "PET_NNODES": "2:2",
            "PET_NODE_RANK": str(rank),
            "PET_MASTER_ADDR": MASTER,
            "PET_MASTER_PORT": "29500",
            "PET_NPROC_PER_NODE": "gpu",
        }

    assert audit([node(0, env(0)), node(1, env(1))], nproc="gpus") == []


# --------------------------------------------------------------------------- env_diff, records


def test_env_diff_lists_differing_and_missing_variables() -> None:
    nodes = [node(0, {"A": "1", "B": "x", "HOSTNAME": "n0"}), node(1, {"A": "2", "HOSTNAME": "n1"})]
    assert env_diff(nodes) == {
        "A": {"node0": "1", "node1": "2"},
        "B": {"node0": "x", "node1": None},
        "HOSTNAME": {"node0": "n0", "node1": "n1"},
    }
    assert "HOSTNAME" not in env_diff(nodes, ignore=EXPECTED_TO_DIFFER)
    assert env_diff([node(0, {"A": "1"}), node(1, {"A": "1"})]) == {}


def test_from_records_reads_probe_records() -> None:
    env_rec = {
        "v": 1,
        "kind": "env",
        "env": {"NCCL_SOCKET_IFNAME": "eth9"},
        "sources": {"NCCL_SOCKET_IFNAME": "node"},
        "redacted": [],
    }
    net_rec = {
        "v": 1,
        "kind": "net",
        "interfaces": [LO, iface("eth0", "10.0.0.2/24")],
        "route": {"dev": "eth0", "src": "10.0.0.2", "via": None, "method": "ip route get"},
        "shm_bytes": 2 * GIB,
        "hostname": "n1",
        "cuda_visible_devices_raw_present": False,
    }
    facts = EnvFacts.from_records("node1", 1, env_rec, net_rec, gpu_count=0)
    f = only(audit([node(0), facts]), "ENV-IFNAME-NOMATCH")
    assert "(from node env)" in f.evidence[0] and "under node1's `env:`" in f.fix
