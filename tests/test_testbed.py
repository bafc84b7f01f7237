"""The testbed itself: real namespaces, real sshd, real faults (needs root)."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from testbed import (
    DELETE,
    Testbed,
    TestbedBusy,
    describe_pid,
    is_alive,
    iter_leftovers,
    netns_pids,
    tcp_connects,
    unlocked_root_shadow,
)

MakeTestbed = Callable[..., Testbed]

# Prints connected / timeout / refused for a TCP connect: argv = host port timeout.
CONNECT = """
import socket, sys
s = socket.socket()
s.settimeout(float(sys.argv[3]))
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("connected")
except socket.timeout:
    print("timeout")
except ConnectionRefusedError:
    print("refused")
except OSError as e:
    print("error", e.errno)
"""

# Prints "ok" or the errno of bind(): argv = port.
BIND = """
import socket, sys
s = socket.socket()
try:
    s.bind(("0.0.0.0", int(sys.argv[1])))
    print("ok")
except OSError as e:
    print(e.errno)
"""


def ssh(
    tb: Testbed, i: int, command: str, options: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        tb.ssh_argv(i, command, options=options),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def ssh_all(tb: Testbed, command: str) -> list[subprocess.CompletedProcess[str]]:
    """Run command on every node in parallel (one OpenSSH client costs ~0.3 s here)."""
    procs = [
        subprocess.Popen(
            tb.ssh_argv(i, command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for i in range(len(tb.nodes))
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=30)
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results


def comm(pid: int) -> str:
    """A process's command name; "" once it is gone (listing and reading race)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def connect_from(tb: Testbed, i: int, host: str, port: int, timeout: float = 1.0) -> str:
    return tb.exec(i, [tb.python, "-c", CONNECT, host, str(port), str(timeout)]).stdout.strip()


def bind_in(tb: Testbed, i: int, port: int) -> str:
    return tb.exec(i, [tb.python, "-c", BIND, str(port)]).stdout.strip()


# -- pure helpers (no testbed needed) -----------------------------------------------------


@pytest.mark.parametrize(
    ("shadow", "expected"),
    [
        ("root:*:20228:0:99999:7:::\nbin:*:1::::::\n", None),
        ("root:$y$hash:20228::::::\n", None),
        ("bin:!:1::::::\nroot:!$y$hash:20228::::::\n", "bin:!:1::::::\nroot:*:20228::::::\n"),
    ],
)
def test_unlocked_root_shadow(shadow: str, expected: str | None) -> None:
    assert unlocked_root_shadow(shadow) == expected


# -- read-only checks on one shared testbed ---------------------------------------------


def test_shape(shared_testbed: Testbed) -> None:
    tb = shared_testbed
    assert [n.name for n in tb.nodes] == ["node0", "node1", "node2"]
    assert tb.host_ip == f"{tb.subnet}.254"
    assert [n.ip for n in tb.nodes] == [f"{tb.subnet}.{k}" for k in (1, 2, 3)]
    assert len({n.ns for n in tb.nodes}) == 3
    assert all(is_alive(n.sshd_pid) for n in tb.nodes)
    # A fresh testbed is quiet (start-up's readiness connections have been let go).
    left = {i: [describe_pid(p) for p in tb.wait_quiet(i, timeout=5)] for i in range(3)}
    assert left == {0: [], 1: [], 2: []}


def test_ssh_runs_on_each_node_with_its_own_hostname(shared_testbed: Testbed) -> None:
    results = ssh_all(shared_testbed, "hostname")
    assert [r.returncode for r in results] == [0, 0, 0], [r.stderr for r in results]
    assert [r.stdout.strip() for r in results] == [n.hostname for n in shared_testbed.nodes]


def test_exec_enters_the_node(shared_testbed: Testbed) -> None:
    for node in shared_testbed.nodes:
        out = shared_testbed.exec(node.index, ["sh", "-c", "hostname; ip -o -4 addr show eth0"])
        hostname, addr = out.stdout.splitlines()
        assert hostname == node.hostname
        assert f"inet {node.ip}/24" in addr


def test_login_environment(shared_testbed: Testbed) -> None:
    """What a command started over ssh sees: sshd's PATH (no pyenv shims, since
    ~/.bashrc is masked), HOME=/root, and the testbed's interpreter by absolute path."""
    tb = shared_testbed
    r = ssh(tb, 0, f"echo $PATH; echo $HOME; {tb.python} -c 'import sys; print(sys.executable)'")
    assert r.returncode == 0, r.stderr
    path, home, python = r.stdout.splitlines()
    assert "pyenv" not in path
    assert "/usr/bin" in path.split(":")
    assert home == "/root"
    assert python == tb.python


def test_host_key_verification(shared_testbed: Testbed, tmp_path: Path) -> None:
    tb = shared_testbed
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    r = ssh(tb, 0, "true", options={"UserKnownHostsFile": str(empty)})
    assert r.returncode == 255
    assert "Host key verification failed" in r.stderr
    # node1's key filed under node0's address: a changed host key must fail too.
    node1_key = next(
        line
        for line in tb.known_hosts.read_text().splitlines()
        if line.startswith(tb.nodes[1].ip + " ")
    )
    wrong = tmp_path / "wrong_known_hosts"
    wrong.write_text(node1_key.replace(tb.nodes[1].ip, tb.nodes[0].ip, 1) + "\n")
    r = ssh(tb, 0, "true", options={"UserKnownHostsFile": str(wrong)})
    assert r.returncode == 255
    assert ssh(tb, 0, "true").returncode == 0


def test_key_only_auth(shared_testbed: Testbed, tmp_path: Path) -> None:
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    argv = shared_testbed.ssh_argv(0, "true")
    argv[argv.index(str(shared_testbed.client_key))] = str(other)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 255
    assert "Permission denied" in r.stderr


def test_default_hosts_resolve_every_node(shared_testbed: Testbed) -> None:
    tb = shared_testbed
    names = [n.hostname for n in tb.nodes]
    out = tb.exec(2, ["getent", "hosts", *names]).stdout.split()
    assert out == [w for n in tb.nodes for w in (n.ip, n.hostname)]


def test_config_dict(shared_testbed: Testbed) -> None:
    tb = shared_testbed
    cfg = tb.config_dict()
    assert cfg == {
        "name": f"testbed-{tb.prefix}",
        "master": {"addr": tb.nodes[0].ip, "port": 29500},
        "nodes": [{"host": n.ip, "name": n.name, "user": "root", "port": 22} for n in tb.nodes],
        "nproc_per_node": 1,
        "python": sys.executable,
        "env": {"GLOO_SOCKET_IFNAME": "eth0"},
        "ssh": {
            "known_hosts": str(tb.known_hosts),
            "identity_file": str(tb.client_key),
            "config": str(tb.workdir / "ssh_config"),
            "connect_timeout": 5,
        },
        "timeouts": {"step": 20, "allreduce": 60},
    }
    assert Path(cfg["ssh"]["config"]).read_text() == ""
    merged = tb.config_dict(
        master={"port": 29600}, env={"NCCL_DEBUG": "INFO"}, timeouts=DELETE, nproc_per_node=2
    )
    assert merged["master"] == {"addr": tb.nodes[0].ip, "port": 29600}
    assert merged["env"] == {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "INFO"}
    assert "timeouts" not in merged
    assert merged["nproc_per_node"] == 2
    assert tb.config_dict() == cfg  # overrides never leak into the base
    path = tb.write_config(env={"X": "1"})
    assert json.loads(path.read_text()) == tb.config_dict(env={"X": "1"})


def test_busy_prefix_is_refused_without_harm(shared_testbed: Testbed) -> None:
    tb = shared_testbed
    with pytest.raises(TestbedBusy):
        Testbed(3, prefix=tb.prefix, subnet="10.99.99").up()
    with pytest.raises(TestbedBusy):
        Testbed(3, prefix="ddpx", subnet=tb.subnet).up()
    assert ssh(tb, 0, "true").returncode == 0


# -- faults, each on a fresh testbed ------------------------------------------------------


def test_setenv_is_visible_and_set_env_changes_it(make_testbed: MakeTestbed) -> None:
    tricky = 'a b "quoted" back\\slash $HOME #x'
    tb = make_testbed(2, env={0: {"DDPT_A": "one", "DDPT_B": tricky}})
    r = ssh(tb, 0, "printenv DDPT_A DDPT_B")
    assert r.stdout.splitlines() == ["one", tricky], r.stderr
    assert ssh(tb, 1, "printenv DDPT_A").returncode == 1  # per node
    pid = tb.nodes[0].sshd_pid
    tb.set_env(0, {"DDPT_A": "two"})
    assert tb.nodes[0].sshd_pid == pid and is_alive(pid)  # SIGHUP re-execs in place
    r = ssh(tb, 0, "printenv DDPT_A; printenv DDPT_B || echo unset")
    assert r.stdout.splitlines() == ["two", "unset"], r.stderr
    assert tb.wait_quiet(0) == []


def test_iptables_drop_makes_connect_time_out(testbed: Testbed) -> None:
    tb = testbed
    target = tb.nodes[1].ip
    assert connect_from(tb, 2, target, 29500) == "refused"  # nothing listens yet
    tb.hold_port(1, 29500)
    assert connect_from(tb, 2, target, 29500) == "connected"
    rule = ("INPUT", "-i", "eth0", "-p", "tcp", "--dport", "29500", "-j", "DROP")
    tb.iptables(1, "-A", *rule)
    assert connect_from(tb, 2, target, 29500, timeout=0.5) == "timeout"
    assert connect_from(tb, 1, "127.0.0.1", 29500) == "connected"  # -i eth0 spares lo
    tb.iptables(1, "-D", *rule)
    assert connect_from(tb, 2, target, 29500) == "connected"


def test_link_down_makes_node_unreachable(testbed: Testbed) -> None:
    tb = testbed
    tb.link_down(1)
    assert not tcp_connects(tb.nodes[1].ip, 22, timeout=0.5)
    r = ssh(tb, 1, "true", options={"ConnectTimeout": "1"})
    assert r.returncode == 255
    assert connect_from(tb, 0, tb.nodes[1].ip, 22, timeout=0.5) != "connected"
    assert ssh(tb, 2, "true").returncode == 0  # the others are unaffected
    tb.link_up(1)
    assert ssh(tb, 1, "hostname").stdout.strip() == tb.nodes[1].hostname


def test_set_hosts_changes_only_that_node(testbed: Testbed) -> None:
    tb = testbed
    root_hosts = Path("/etc/hosts").read_bytes()
    tb.set_hosts(0, "127.0.0.1 localhost\n10.1.2.3 ddpt-elsewhere\n")
    assert tb.exec(0, ["getent", "hosts", "ddpt-elsewhere"]).stdout.split() == [
        "10.1.2.3",
        "ddpt-elsewhere",
    ]
    assert tb.exec(1, ["getent", "hosts", "ddpt-elsewhere"], check=False).returncode == 2
    # node0 no longer resolves its own hostname (the gloo loopback-fallback trap)
    assert tb.exec(0, ["getent", "hosts", tb.nodes[0].hostname], check=False).returncode == 2
    assert ssh(tb, 0, "getent hosts ddpt-elsewhere").stdout.split()[0] == "10.1.2.3"
    assert Path("/etc/hosts").read_bytes() == root_hosts
    tb.set_hosts(0, tb.default_hosts(0))
    assert tb.exec(0, ["getent", "hosts", tb.nodes[0].hostname]).returncode == 0


def test_hold_port_makes_bind_fail(testbed: Testbed) -> None:
    tb = testbed
    holder = tb.hold_port(0, 29500)
    assert bind_in(tb, 0, 29500) == str(errno.EADDRINUSE)
    assert bind_in(tb, 1, 29500) == "ok"  # other nodes are other network stacks
    assert tb.pids(0) == []  # the testbed's own listener is not a leftover
    holder.kill()
    holder.wait()
    assert bind_in(tb, 0, 29500) == "ok"


def test_pids_sees_what_an_ssh_session_leaves(testbed: Testbed) -> None:
    """Killing the ssh client does not stop a pty-less remote command: exactly the
    leftover pids() must reveal."""
    tb = testbed
    client = subprocess.Popen(
        tb.ssh_argv(0, "exec sleep 300"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    sleeper: list[int] = []
    while not sleeper and time.monotonic() < deadline:
        sleeper = [p for p in tb.pids(0) if comm(p) == "sleep"]
        time.sleep(0.02)
    assert sleeper, "the remote sleep never appeared in pids(0)"
    assert tb.pids(1) == []
    client.kill()
    client.wait()
    assert tb.wait_quiet(0, timeout=1) == sleeper  # the session's sshd is gone, sleep is not
    tb.exec(0, ["kill", str(tb.node_pid(sleeper[0]))])  # the node's own number for it
    assert tb.wait_quiet(0) == []


def node_procs(tb: Testbed, i: int) -> dict[int, str]:
    """What node i's own /proc lists, read over ssh as a user would: {pid: cmdline}."""
    out = ssh(
        tb,
        i,
        "for d in /proc/[0-9]*; do printf '%s ' \"${d#/proc/}\"; "
        "tr '\\0' ' ' < \"$d/cmdline\" 2>/dev/null; echo; done",
    )
    assert out.returncode == 0, out.stderr
    procs = {}
    for line in out.stdout.splitlines():
        pid, _, cmd = line.partition(" ")
        procs[int(pid)] = cmd.strip()
    return procs


def test_each_node_sees_only_its_own_processes(testbed: Testbed) -> None:
    """A real machine's /proc lists its own processes: node0 cannot see what runs on
    node1, and each node's sshd is its pid 1."""
    tb = testbed
    marker = "sleep 4242.5"
    started = ssh(tb, 1, f"{marker} >/dev/null 2>&1 & echo $!")
    node1_pid = int(started.stdout)
    on1, on0 = node_procs(tb, 1), node_procs(tb, 0)
    assert on1[node1_pid] == marker
    assert marker not in on0.values()
    assert "sshd" in on0[1], on0[1]
    assert len(on0) < 10, on0  # the node's sshd and this session, not the login node's
    # The testbed's pids are the login node's numbers; node_pid/root_pid translate.
    root = tb.root_pid(1, node1_pid)
    assert root is not None and root in tb.pids(1) and root not in tb.pids(0)
    assert root != node1_pid and tb.node_pid(root) == node1_pid
    assert Path(f"/proc/{root}/cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", b"4242.5"]
    assert tb.exec(0, ["kill", str(node1_pid)], check=False).returncode != 0  # not node0's
    tb.exec(1, ["kill", str(node1_pid)])
    assert tb.wait_quiet(1) == []


def test_neighbour_tables_start_cold(make_testbed: MakeTestbed) -> None:
    """As on a fresh cluster, a node has not resolved its peers' addresses yet."""
    tb = make_testbed(3)

    def neighbours(i: int) -> set[str]:
        out = tb.exec(i, ["ip", "-4", "neigh", "show", "dev", "eth0"]).stdout
        return {line.split()[0] for line in out.splitlines() if "FAILED" not in line}

    peers = {n.ip for n in tb.nodes}
    assert neighbours(0) & peers == set()
    assert connect_from(tb, 0, tb.nodes[1].ip, 22) == "connected"
    assert tb.nodes[1].ip in neighbours(0)  # resolving on demand fills the table


def test_down_leaves_nothing(make_testbed: MakeTestbed) -> None:
    tb = make_testbed(3)
    sshd_pids = [n.sshd_pid for n in tb.nodes]
    namespaces = [n.ns for n in tb.nodes]
    tb.hold_port(1, 29500)
    stray = subprocess.Popen(
        tb.ssh_argv(2, "exec sleep 300"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while not tb.pids(2) and time.monotonic() < deadline:
        time.sleep(0.02)
    inside = [p for ns in namespaces for p in netns_pids(ns)]
    assert len(inside) > len(sshd_pids)
    t0 = time.monotonic()
    tb.down()
    print(f"\nteardown of 3 nodes with live sessions: {time.monotonic() - t0:.3f}s")
    stray.wait(timeout=10)
    assert list(iter_leftovers(tb.prefix)) == []
    assert not any(is_alive(p) for p in inside)
    assert not any(is_alive(p) for p in sshd_pids)
    tb.down()  # idempotent


def test_two_testbeds_coexist(make_testbed: MakeTestbed) -> None:
    a, b = make_testbed(2), make_testbed(2)
    assert len({a.prefix, b.prefix}) == 2
    assert len({a.subnet, b.subnet}) == 2
    assert len({a.bridge, b.bridge}) == 2
    results = ssh_all(a, "hostname") + ssh_all(b, "hostname")
    assert [r.stdout.strip() for r in results] == [n.hostname for n in a.nodes + b.nodes]
    # Separate subnets, no routes between them.
    assert connect_from(a, 0, b.nodes[0].ip, 22, timeout=0.5) != "connected"
    b.down()
    assert ssh(a, 1, "true").returncode == 0


def test_crashed_run_is_cleaned_up_on_next_bring_up(tmp_path: Path) -> None:
    """A process that brings a testbed up and dies without down() leaves namespaces and
    sshds behind; the next testbed with that prefix removes them."""
    script = (
        "import os, sys; sys.path.insert(0, sys.argv[1]); from testbed import start_testbed; "
        "tb = start_testbed(2, stem='ddpc', subnet_base='10.80', workdir=__import__('pathlib')"
        ".Path(sys.argv[2])); print(tb.prefix, tb.subnet, *[n.sshd_pid for n in tb.nodes]); "
        "sys.stdout.flush(); os._exit(0)"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(Path(__file__).parent), str(tmp_path / "crashed")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    prefix, subnet, old_pids = out[0], out[1], [int(p) for p in out[2:]]
    try:
        assert list(iter_leftovers(prefix)) != []
        assert all(is_alive(p) for p in old_pids)
        with Testbed(2, prefix=prefix, subnet=subnet, workdir=tmp_path / "again") as tb:
            assert not any(is_alive(p) for p in old_pids)
            assert ssh(tb, 1, "hostname").stdout.strip() == tb.nodes[1].hostname
    finally:
        Testbed(2, prefix=prefix, subnet=subnet, workdir=tmp_path / "cleanup").clean_leftovers()
    assert list(iter_leftovers(prefix)) == []


@pytest.mark.parametrize("n", [3, 16])
def test_bring_up_time(make_testbed: MakeTestbed, n: int) -> None:
    t0 = time.monotonic()
    tb = make_testbed(n)
    up = time.monotonic() - t0
    assert ssh_all(tb, "true")[-1].returncode == 0
    t0 = time.monotonic()
    tb.down()
    down = time.monotonic() - t0
    print(f"\n{n} nodes: bring-up {up:.3f}s, teardown {down:.3f}s")
    if n == 3:
        assert up < 5
