"""The headless checklist against a real namespace testbed: a healthy cluster passes,
each fault class yields the right first failing step, node and finding, and nothing
is left running on any node."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from checkrun import assert_nodes_quiet, check
from testbed import Testbed

from ddptui.report.autosave import sessions_dir

pytestmark = pytest.mark.testbed
STEPS5 = "ssh,inventory,ping,port,env"


def test_healthy_cluster_passes_every_step_fast(testbed: Testbed) -> None:
    run = check(testbed.write_config(), "--steps", STEPS5)
    assert run.rc == 0, run.stdout
    assert [s["id"] for s in run.report["steps"]] == STEPS5.split(",")
    assert all(s["status"] in ("pass", "warn") for s in run.report["steps"]), run.stdout
    assert run.first is None
    assert run.seconds < 10, f"took {run.seconds:.1f}s"
    inv = run.step("inventory")["nodes"]
    assert {inv[n.name]["data"]["hostname"] for n in testbed.nodes} == {
        n.hostname for n in testbed.nodes
    }
    assert "PASS" in run.stdout
    # The session saved itself, and the saved copy is the report.
    saved = Path(run.stdout.split("session saved: ", 1)[1].split()[0])
    assert saved.parent == sessions_dir()
    assert json.loads(saved.read_text()) == run.report
    assert run.report["session"]["autosave"] == str(saved)
    assert_nodes_quiet(testbed)


def test_report_json_matches_contract(testbed: Testbed) -> None:
    run = check(testbed.write_config(), "--steps", "ssh,ping")
    r = run.report
    assert set(r) >= {
        "ddptui_version",
        "config",
        "started_at",
        "finished_at",
        "nodes",
        "steps",
        "first_failure",
    }
    assert r["nodes"] == [{"name": n.name, "host": n.ip, "rank": n.index} for n in testbed.nodes]
    for step in r["steps"]:
        assert step["status"] in ("pass", "warn", "fail", "skip", "error")
        assert set(step) >= {"id", "title", "status", "duration_s", "nodes", "findings"}
        for node in step["nodes"].values():
            assert node["status"] in ("pass", "warn", "fail", "skip", "error")


# ------------------------------------------------------------------ ssh


def test_wrong_client_key_is_auth_failure(testbed: Testbed, tmp_path: Path) -> None:
    key = tmp_path / "other_key"
    import subprocess

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    run = check(testbed.write_config(ssh={"identity_file": str(key)}), "--steps", "ssh")
    assert run.rc == 1
    f = run.finding("ssh", "SSH-AUTH")
    assert f["nodes"] == ["node0", "node1", "node2"] or set(f["nodes"]) == {"node0"}
    assert run.first is not None and run.first["step"] == "ssh"
    assert "ssh-copy-id" in run.first["fix"]


def test_unknown_and_changed_host_keys(testbed: Testbed, tmp_path: Path) -> None:
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    run = check(testbed.write_config(ssh={"known_hosts": str(empty)}), "--steps", "ssh")
    assert run.rc == 1
    assert {n for f in run.step("ssh")["findings"] for n in f["nodes"]} == {
        "node0",
        "node1",
        "node2",
    }
    assert run.finding("ssh", "SSH-HOSTKEY-UNKNOWN")
    # node1's recorded key belongs to another machine: CHANGED, only for node1.
    lines = testbed.known_hosts.read_text().splitlines()
    other_key = lines[0].split(None, 1)[1]
    changed = tmp_path / "changed_known_hosts"
    changed.write_text(
        "\n".join(
            f"{ln.split()[0]} {other_key}" if ln.startswith(testbed.nodes[1].ip + " ") else ln
            for ln in lines
        )
        + "\n"
    )
    run = check(testbed.write_config(ssh={"known_hosts": str(changed)}), "--steps", "ssh")
    f = run.finding("ssh", "SSH-HOSTKEY-CHANGED")
    assert f["nodes"] == ["node1"]
    assert run.step("ssh")["nodes"]["node0"]["status"] == "pass"
    # Opting in to new keys records unknown ones, but never accepts a changed one.
    tofu = tmp_path / "tofu_known_hosts"
    tofu.write_text("")
    run = check(
        testbed.write_config(ssh={"known_hosts": str(tofu), "accept_new_host_keys": True}),
        "--steps",
        "ssh",
    )
    assert run.rc == 0, run.stdout
    assert len(tofu.read_text().splitlines()) == 3
    run = check(
        testbed.write_config(ssh={"known_hosts": str(changed), "accept_new_host_keys": True}),
        "--steps",
        "ssh",
    )
    assert run.finding("ssh", "SSH-HOSTKEY-CHANGED")["nodes"] == ["node1"]


def test_dead_refused_and_unroutable_nodes(testbed: Testbed) -> None:
    testbed.link_down(2)
    testbed.block_port(1, 22, "REJECT")
    cfg = testbed.write_config(ssh={"connect_timeout": 2})
    run = check(cfg, "--steps", STEPS5)
    assert run.rc == 1
    assert run.finding("ssh", "SSH-TIMEOUT")["nodes"] == ["node2"]
    assert run.finding("ssh", "SSH-REFUSED")["nodes"] == ["node1"]
    assert run.first is not None and run.first["step"] == "ssh"
    # later steps still run on the healthy node and skip the others
    assert run.step("inventory")["nodes"]["node0"]["status"] == "pass"
    assert run.step("inventory")["nodes"]["node2"]["status"] == "skip"
    assert run.seconds < 30
    testbed.iptables(1, "-F")
    testbed.block_port(1, 22, "REJECT", reject_with="icmp-host-prohibited")
    run = check(cfg, "--steps", "ssh")
    assert run.finding("ssh", "SSH-NOROUTE")["nodes"] == ["node1"]
    assert_nodes_quiet(testbed)


# ------------------------------------------------------------------ ping


def _hosts(tb: Testbed, i: int, master_ip: str) -> str:
    return tb.default_hosts(i) + f"{master_ip} master\n"


def test_master_name_resolving_to_loopback_on_one_node(testbed: Testbed) -> None:
    for i in range(3):
        testbed.set_hosts(i, _hosts(testbed, i, testbed.nodes[0].ip))
    testbed.set_hosts(1, testbed.default_hosts(1) + "127.0.1.1 master\n")
    run = check(testbed.write_config(master={"addr": "master"}), "--steps", "ssh,ping")
    assert run.rc == 1
    assert run.first == {
        **run.first,
        "step": "ping",
        "nodes": ["node1"],
        "finding": "PING-LOOPBACK",
    }
    assert "127.0.1.1 master" in json.dumps(run.finding("ping", "PING-LOOPBACK")["evidence"])


def test_master_name_unresolvable_or_different(testbed: Testbed) -> None:
    for i in range(3):
        testbed.set_hosts(i, _hosts(testbed, i, testbed.nodes[0].ip))
    testbed.set_hosts(2, testbed.default_hosts(2))
    run = check(testbed.write_config(master={"addr": "master"}), "--steps", "ssh,ping")
    assert run.first is not None
    assert (run.first["finding"], run.first["nodes"]) == ("PING-GAI", ["node2"])
    testbed.set_hosts(2, _hosts(testbed, 2, testbed.nodes[1].ip))
    run = check(testbed.write_config(master={"addr": "master"}), "--steps", "ssh,ping")
    assert run.finding("ping", "PING-MISMATCH")["nodes"] == ["node2"]


def test_master_addr_not_on_rank0(testbed: Testbed) -> None:
    run = check(testbed.write_config(master={"addr": testbed.nodes[1].ip}), "--steps", "ssh,ping")
    assert run.first is not None
    assert (run.first["finding"], run.first["nodes"]) == ("PING-NOT-MASTER", ["node0"])


def test_icmp_filtered_is_not_a_failure(testbed: Testbed) -> None:
    testbed.iptables(0, "-A", "INPUT", "-i", "eth0", "-p", "icmp", "-j", "DROP")
    run = check(testbed.write_config(), "--steps", "ssh,ping")
    assert run.rc == 0, run.stdout
    f = run.finding("ping", "PING-ICMP-FILTERED")
    assert f["severity"] == "info" and set(f["nodes"]) == {"node1", "node2"}


# ------------------------------------------------------------------ port


@pytest.mark.parametrize(
    ("target", "finding_id"),
    [("DROP", "PORT-TIMEOUT"), ("REJECT", "PORT-MASTER-REFUSED")],
)
def test_master_port_blocked(testbed: Testbed, target: str, finding_id: str) -> None:
    testbed.block_port(0, target=target)
    run = check(testbed.write_config(), "--steps", STEPS5)
    assert run.rc == 1
    assert run.first is not None
    assert (run.first["step"], run.first["finding"]) == ("port", finding_id)
    assert run.first["nodes"] == ["node1", "node2"]
    assert "29500" in run.first["fix"]
    assert run.seconds < 30
    assert_nodes_quiet(testbed)


def test_master_port_in_use_names_the_owner(testbed: Testbed) -> None:
    holder = testbed.hold_port(0, 29500)
    run = check(testbed.write_config(), "--steps", "ssh,port")
    f = run.finding("port", "PORT-MASTER-INUSE")
    assert f["nodes"] == ["node0"]
    pid = testbed.holder_pid(holder)  # the number node0's own /proc shows
    assert f"pid {pid}" in f["summary"] or str(pid) in json.dumps(f)
    assert run.first is not None and run.first["finding"] == "PORT-MASTER-INUSE"


def test_blocked_pair_is_named_as_an_edge(testbed: Testbed) -> None:
    # node2 drops every TCP connection coming from node1 (but not SSH from the login node).
    testbed.iptables(
        2,
        "-A",
        "INPUT",
        "-i",
        "eth0",
        "-s",
        testbed.nodes[1].ip,
        "-p",
        "tcp",
        "--syn",
        "-j",
        "DROP",
    )
    run = check(testbed.write_config(), "--steps", "ssh,port")
    assert run.rc == 1
    f = run.finding("port", "PORT-PAIR-TIMEOUT")
    assert "node1 -> node2:" in f["summary"]
    assert run.step("port")["data"]["matrix"]["node1"]["node2"] == "timeout"
    assert run.step("port")["data"]["matrix"]["node2"]["node1"] == "connected"
    assert_nodes_quiet(testbed)


# ------------------------------------------------------------------ inventory


def test_node_without_torch_and_skew(testbed: Testbed) -> None:
    nodes = testbed.config_dict()["nodes"]
    nodes[2]["python"] = "/usr/bin/python3"  # the system python: no torch there
    run = check(testbed.write_config(nodes=nodes), "--steps", "ssh,inventory")
    assert run.rc == 1
    assert run.first is not None
    assert (run.first["step"], run.first["finding"], run.first["nodes"]) == (
        "inventory",
        "INV-NO-TORCH",
        ["node2"],
    )
    skew = run.finding("inventory", "INV-SKEW-TORCH")
    assert skew["nodes"] == ["node2"] and skew["severity"] == "error"
    table = run.step("inventory")["data"]["skew"]["torch"]
    assert table["node2"] is None and table["node0"] == table["node1"]


# ------------------------------------------------------------------ env


def test_nccl_ifname_missing_on_one_node(testbed: Testbed) -> None:
    testbed.set_env(1, {"NCCL_SOCKET_IFNAME": "eth9"})
    run = check(testbed.write_config(), "--steps", STEPS5)
    assert run.rc == 1
    assert run.first is not None
    assert (run.first["step"], run.first["nodes"], run.first["finding"]) == (
        "env",
        ["node1"],
        "ENV-IFNAME-NOMATCH",
    )
    assert "eth0" in run.first["fix"]
    f = run.finding("env", "ENV-IFNAME-NOMATCH")
    assert any("eth9" in e and "login" in e for e in f["evidence"]), f["evidence"]


def test_node_env_overrides_and_duplicate_node_rank(testbed: Testbed) -> None:
    testbed.set_env(0, {"NODE_RANK": "0", "MASTER_PORT": "29500"})
    testbed.set_env(1, {"NODE_RANK": "0", "MASTER_PORT": "29500"})
    nodes = testbed.config_dict()["nodes"]
    nodes[2]["env"] = {"MASTER_PORT": "29501"}  # the node's own env wins over the login env
    run = check(testbed.write_config(nodes=nodes), "--steps", "ssh,env")
    assert run.rc == 1
    dup = run.finding("env", "ENV-DUPRANK")
    assert dup["nodes"] == ["node1"]
    port = run.finding("env", "ENV-MASTER-MISMATCH")
    assert port["nodes"] == ["node2"]
    assert run.step("env")["data"]["diff"]["MASTER_PORT"] == {
        "node0": "29500",
        "node1": "29500",
        "node2": "29501",
    }


def test_deprecated_and_differing_nccl_settings(testbed: Testbed) -> None:
    testbed.set_env(2, {"NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_PROTO": "LL"})
    run = check(testbed.write_config(), "--steps", "ssh,env")
    assert run.finding("env", "ENV-DEPRECATED")["nodes"] == ["node2"]
    diff = run.finding("env", "ENV-NCCL-DIFF")
    assert diff["nodes"] == ["node2"] and diff["severity"] == "error"


# ------------------------------------------------------------------ ssh client config


def test_ssh_config_alias_identity_and_proxyjump(testbed: Testbed, tmp_path: Path) -> None:
    """Hosts given as ~/.ssh/config aliases: HostName, User, IdentityFile and ProxyJump."""
    n0, n1 = testbed.nodes[0], testbed.nodes[1]
    cfg = tmp_path / "ssh_config"
    cfg.write_text(
        f"Host alias0\n  HostName {n0.ip}\n  User root\n  IdentityFile {testbed.client_key}\n"
        f"  UserKnownHostsFile {testbed.known_hosts}\n"
        f"Host hidden1\n  HostName {n1.ip}\n  User root\n  IdentityFile {testbed.client_key}\n"
        f"  ProxyJump alias0\n"
    )
    # node1 only accepts SSH from node0: reaching it needs the jump.
    testbed.iptables(
        1, "-A", "INPUT", "-i", "eth0", "-p", "tcp", "--dport", "22", "!", "-s", n0.ip, "-j", "DROP"
    )
    conf = testbed.write_config(
        nodes=[{"host": "alias0", "name": "node0"}, {"host": "hidden1", "name": "node1"}],
        ssh={"config": str(cfg), "identity_file": None},
    )
    run = check(conf, "--steps", "ssh,inventory")
    assert run.rc == 0, run.stdout
    inv = run.step("inventory")["nodes"]
    assert inv["node1"]["data"]["hostname"] == n1.hostname
    assert_nodes_quiet(testbed)


def test_ssh_agent_key_is_used(
    testbed: Testbed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.02)
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
        subprocess.run(["ssh-add", "-q", str(testbed.client_key)], env=env, check=True)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        run = check(testbed.write_config(ssh={"identity_file": None}), "--steps", "ssh")
        assert run.rc == 0, run.stdout
        monkeypatch.delenv("SSH_AUTH_SOCK")
        run = check(testbed.write_config(ssh={"identity_file": None}), "--steps", "ssh")
        assert run.finding("ssh", "SSH-AUTH")  # no agent, no key: refused
    finally:
        agent.terminate()
        agent.wait(5)
