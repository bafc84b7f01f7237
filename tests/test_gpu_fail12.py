"""Real cross-host faults from one lent H200 (tests/fixtures/gpu-h200/fail12/, run12.sh): two
ranks, each in a network and UTS namespace of its own (hosts gpu01, gpu02; x12_net.py), the
one GPU shared, NCCL_DEBUG=INFO, eager NCCL init (device_id). One file per rank, the exit code
last (124: killed by `timeout` while it waited).

- samebr: both hosts have a bridge br0 with the same address 10.200.0.1, first in interface
  order; NCCL bootstraps on it on both, rank 1 connects to its own host: refused 35 times.
- vbr: the same with a libvirt-named bridge virbr0: NCCL 2.28.9 skips virbr* and runs on eth0.
- blackhole: NCCL_SOCKET_IFNAME=eth1 on both, eth1 a bridge with no port in 192.168.77.0/24:
  "No route to host" retries (INFO lines) until the kill.
- dup0: both processes RANK=0: each hosts its own store and NCCL waits for a rank 1.
- linkdown: after rank 1's step 3 gpu02's eth0 goes down: NCCL RAS's reconnects fail with
  "Network is unreachable", rank 0's watchdog times out in ALLREDUCE #5.
- hosts: MASTER_ADDR=gpu01, gpu02's /etc/hosts names gpu01 10.77.7.9 (nobody): rank 1's store
  client gets "No route to host", rank 0's store waits alone.
- run12b.sh, tun: a tun0 (10.8.0.N, no process behind it) first on both hosts: NCCL skips a
  device with no carrier and runs on eth0.
- run12b.sh, linkinit: lazy init; gpu02's eth0 goes down after both ranks joined the store:
  gpu01's eth0 has lost its carrier too, NCCL there bootstraps on lo (NCCL_SOCKET_IFNAME unset)
  and waits in init; gpu02 prints nothing more.
- run12c.sh, twonic: a second NIC eth1 (192.168.88.N, after eth0, up, its peer in a dead-end
  namespace) on both hosts: NCCL bootstraps on eth0 and stripes its socket channels over eth0
  and eth1; the first collective's connects to the peer's eth1 get "No route to host".
  twonicpfx: the same with NCCL_SOCKET_IFNAME=eth (a prefix that matches both).
- run12d.sh, clash: job A (40 steps) runs on both hosts, port 29600; after its step 3 job B
  starts on the same hosts with the same MASTER_ADDR and MASTER_PORT: B's rank 0 cannot bind
  (EADDRINUSE), B's rank 1 joins A's store, reads A's NCCL unique id (the same commId as A's)
  and is refused by A's bootstrap root, which has finished; A runs on unharmed.
- run12e.sh, killpeer: gpu02's rank SIGKILLs itself after its step 3, its host up: gpu01's
  NCCL "Connection closed by remote peer", ncclRemoteError, the watchdog's abort (134).
  twonicok: a second NIC eth1 on both hosts that does join them (a veth pair, 192.168.89.N):
  NCCL stripes over eth0 and eth1, healthy.
- run12b.sh, late: gpu02's rank starts 45 s after gpu01's: the store's server gave up after
  41 s ("1/2 clients joined"), the late client times out connecting to it.

Each case's files are diagnosed together (as a user pastes them), then the twins that change
the one fact a rule reads."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from capturecases import Case, assert_case, assert_healthy, diagnose_in, ids, variant_in

FAIL12 = Path(__file__).parent / "fixtures" / "gpu-h200" / "fail12"
XR = FAIL12 / "xr"

CASES: dict[str, Case] = {
    "samebr": (("samebr-rank0.log", "samebr-rank1.log"), "LOGS-IF-SAME-ADDR", None, ("BOOT-CONN",)),
    "blackhole": (("blackhole-rank0.log", "blackhole-rank1.log"), "PORT-PAIR-NOROUTE", 1, ()),
    "dup0": (("dup0-rank0.log", "dup0-rank0b.log"), "LOGS-DUP-RANK", 0, ()),
    "linkdown": (("linkdown-rank0.log", "linkdown-rank1.log"), "LOGS-NET-LOST", 1, ("BOOT-CONN",)),
    "hosts": (("hosts-rank0.log", "hosts-rank1.log"), "PORT-NOROUTE", None, ()),
    "linkinit": (("linkinit-rank0.log", "linkinit-rank1.log"), "AR-BOOT-LOOPBACK", 0, ()),
    "late": (
        ("late-rank0.log", "late-rank1.log"),
        "C10D-CLIENT-TIMEOUT",
        None,
        ("C10D-CLIENTS-JOINED",),
    ),
    "twonic": (
        ("twonic-rank0.log", "twonic-rank1.log"),
        "LOGS-IF-SOCKET-EXTRA",
        1,
        ("BOOT-CONN-RETRY",),
    ),
    "twonicpfx": (("twonicpfx-rank0.log", "twonicpfx-rank1.log"), "LOGS-IF-SOCKET-EXTRA", 1, ()),
    "killpeer": (
        ("killpeer-rank0.log", "killpeer-rank1.log"),
        "C10D-CHILD-SIGKILL",
        None,
        ("BOOT-PEERCLOSED",),
    ),
    "clash": (
        ("clashA-rank0.log", "clashA-rank1.log", "clashB-rank0.log", "clashB-rank1.log"),
        "PORT-INUSE",
        None,
        ("BOOT-CONN",),
    ),
}
HEALTHY = {
    "ok": ("ok-rank0.log", "ok-rank1.log"),
    "vbr": ("vbr-rank0.log", "vbr-rank1.log"),
    "tun": ("tun-rank0.log", "tun-rank1.log"),
    "twonicok": ("twonicok-rank0.log", "twonicok-rank1.log"),
}


def diagnose(*files: str) -> tuple[int, dict[str, Any]]:
    return diagnose_in(XR, *files)


def test_every_capture_is_a_case() -> None:
    logs = {p.name for p in XR.glob("*.log")}
    named = {f for files, *_ in CASES.values() for f in files}
    named |= {f for files in HEALTHY.values() for f in files}
    assert logs == named


@pytest.mark.parametrize("case", sorted(CASES))
def test_failure_gets_its_cause(case: str) -> None:
    assert_case(XR, CASES[case])


@pytest.mark.parametrize("case", sorted(HEALTHY))
def test_healthy_runs_have_no_finding_worth_a_warning(case: str) -> None:
    assert_healthy(XR, *HEALTHY[case])


def test_the_shared_address_and_its_hosts_are_named() -> None:
    _, doc = diagnose("samebr-rank0.log", "samebr-rank1.log")
    first = doc["first_failure"]
    assert "hosts gpu01, gpu02 all bootstrap on 10.200.0.1 (br0)" in first["summary"]
    assert "NCCL_SOCKET_IFNAME" in first["fix"] and "^br0" in first["fix"]


def test_two_hosts_on_one_subnet_with_their_own_addresses_are_no_shared_address(
    tmp_path: Path,
) -> None:
    # twin: gpu02's br0 holds 10.200.0.2 (a real bridged LAN): the refusal stays a
    # connect failure, not a shared address
    files = ("samebr-rank0.log", "samebr-rank1.log")
    _, doc = variant_in(
        XR,
        tmp_path,
        files,
        lambda t: t.replace("br0:10.200.0.1", "br0:10.200.0.2") if t.startswith("gpu02") else t,
    )
    assert "LOGS-IF-SAME-ADDR" not in ids(doc), ids(doc)
    assert doc["first_failure"]["finding"] == "BOOT-CONN"


def test_the_network_lost_mid_run_names_the_peer_and_the_completed_init() -> None:
    _, doc = diagnose("linkdown-rank1.log")
    first = doc["first_failure"]
    assert first["finding"] == "LOGS-NET-LOST", ids(doc)
    assert "completed its init (line 28)" in first["summary"]
    assert "10.77.6.1 failed with 'Network is unreachable' (line 41)" in first["summary"]
    assert "firewall" not in first["fix"] and "ip -s link" in first["fix"]


def test_a_connect_failure_during_init_is_not_a_network_lost_mid_run(tmp_path: Path) -> None:
    # twin: the same failure where the communicator never completed its init (no Init
    # COMPLETE line): a set-up problem, the generic connect failure's
    _, doc = variant_in(
        XR, tmp_path, ("linkdown-rank1.log",), lambda t: None if "Init COMPLETE" in t else t
    )
    assert "LOGS-NET-LOST" not in ids(doc), ids(doc)


def test_a_refused_connection_after_init_is_not_the_network(tmp_path: Path) -> None:
    # twin: the same connects refused (the peer process gone, its host still answering):
    # not the network lost
    def refused(t: str) -> str:
        return t.replace("failed : Network is unreachable", "failed : Connection refused")

    _, doc = variant_in(XR, tmp_path, ("linkdown-rank1.log",), refused)
    assert "LOGS-NET-LOST" not in ids(doc), ids(doc)


def test_a_rank_that_could_not_reach_the_store_is_not_a_rank_that_never_started() -> None:
    _, doc = diagnose("hosts-rank0.log", "hosts-rank1.log")
    assert doc["first_failure"]["finding"] == "PORT-NOROUTE"
    assert "getent hosts gpu01" in doc["first_failure"]["fix"]
    assert "LOGS-MISSING-RANKS" not in ids(doc), ids(doc)
    # the master's file alone still says no other rank joined
    _, alone = diagnose("hosts-rank0.log")
    assert alone["first_failure"]["finding"] == "LOGS-MISSING-RANKS"


def test_a_hand_named_interface_is_said_beside_the_firewall() -> None:
    _, doc = diagnose("blackhole-rank0.log", "blackhole-rank1.log")
    summary = doc["first_failure"]["summary"]
    assert (
        "eth1, which NCCL_SOCKET_IFNAME names, is not the network that joins the hosts" in summary
    )


def test_an_interface_nccl_picked_itself_gets_the_firewall_alone(tmp_path: Path) -> None:
    files = ("blackhole-rank0.log", "blackhole-rank1.log")
    _, doc = variant_in(
        XR, tmp_path, files, lambda t: None if "NCCL_SOCKET_IFNAME set by" in t else t
    )
    summary = doc["first_failure"]["summary"]
    assert doc["first_failure"]["finding"] == "PORT-PAIR-NOROUTE"
    assert "NCCL_SOCKET_IFNAME" not in summary and "icmp-host-prohibited" in summary


def test_the_bootstrap_lines_say_what_nccl_picked() -> None:
    # NCCL 2.28.9 skips virbr* by default (vbr's virbr0 came first and eth0 was used); the
    # knowledge says so where it names what NCCL skips
    first = (XR / "vbr-rank0.log").read_text()
    assert "Bootstrap: Using eth0:10.77.2.1<0>" in first
    assert re.search(r"\('virbr0', 2\)", (XR / "net-up.txt").read_text())
    from ddptui.diagnosis.kb import load_kb

    kb = load_kb()
    assert "virbr" in kb["LOGS-IF-SAME-ADDR"].cause and "virbr" in kb["LOGS-IF-TUNNEL"].cause


def test_check_beside_the_cases_passed_on_nccl() -> None:
    doc = json.loads((FAIL12 / "check-2hosts.json").read_text())
    steps = {s["id"]: s["status"] for s in doc["steps"]}
    assert set(steps) >= {"ssh", "inventory", "port", "env", "allreduce", "fabric", "ddp"}
    assert set(steps.values()) <= {"pass", "warn"} and steps["allreduce"] == "pass", steps
    assert doc["first_failure"] is None


def test_loopback_chosen_by_nccl_itself_says_no_other_interface_was_up(tmp_path: Path) -> None:
    _, doc = diagnose("linkinit-rank0.log", "linkinit-rank1.log")
    assert (
        "NCCL_SOCKET_IFNAME is not set, and NCCL falls back to lo only when no other interface is up"
        in (doc["first_failure"]["summary"])
    )

    # twin: the same log with NCCL_SOCKET_IFNAME=lo set by hand: the setting, not a fallback
    def named(t: str) -> str:
        if "Bootstrap: Using lo" in t:
            return (
                t.split(" NCCL INFO ", 1)[0]
                + " NCCL INFO NCCL_SOCKET_IFNAME set by environment to lo\n"
                + t
            )
        return t

    _, twin = variant_in(XR, tmp_path, ("linkinit-rank0.log", "linkinit-rank1.log"), named)
    assert twin["first_failure"]["finding"] == "AR-BOOT-LOOPBACK"
    assert "falls back" not in twin["first_failure"]["summary"]


@pytest.mark.parametrize("name", ["twonic-rank0.log", "twonic-rank1.log", "twonicpfx-rank0.log"])
def test_one_hosts_file_alone_names_the_second_nic(name: str) -> None:
    _, doc = diagnose(name)
    first = doc["first_failure"]
    assert first["finding"] == "LOGS-IF-SOCKET-EXTRA", ids(doc)
    assert "(eth1) failed while the bootstrap over eth0 had worked" in first["summary"]
    assert "NCCL_SOCKET_IFNAME==eth0 " in first["fix"]


def test_channels_built_after_init_are_no_network_lost() -> None:
    # NCCL 2.28.9 connects its data channels lazily, after Init COMPLETE: the second NIC's
    # failure at the first collective is not a network that worked and went away
    _, doc = diagnose("twonic-rank0.log", "twonic-rank1.log")
    assert "LOGS-NET-LOST" not in ids(doc), ids(doc)
    # ... while the link lost on the bootstrap's own network still is (linkdown)
    _, lost = diagnose("linkdown-rank0.log", "linkdown-rank1.log")
    assert lost["first_failure"]["finding"] == "LOGS-NET-LOST"


def test_one_socket_interface_is_no_second_nic(tmp_path: Path) -> None:
    # twin: NCCL's socket transport lists eth1 alone (NCCL_SOCKET_IFNAME==eth1, bootstrap on
    # it too): the same failures are the blackhole case's, not a second NIC
    files = ("twonic-rank0.log", "twonic-rank1.log")

    def one(t: str) -> str:
        t = re.sub(
            r"Bootstrap: Using eth0:10\.77\.11\.(\d)<0>",
            r"Bootstrap: Using eth1:192.168.88.\1<0>",
            t,
        )
        return re.sub(
            r"NET/Socket : Using \[0\]eth0:\S+ \[1\]eth1:(\S+)", r"NET/Socket : Using [0]eth1:\1", t
        )

    _, doc = variant_in(XR, tmp_path, files, one)
    assert "LOGS-IF-SOCKET-EXTRA" not in ids(doc), ids(doc)


def test_a_second_job_on_the_same_port_is_named_and_the_first_is_left_alone() -> None:
    # the four files together: B's master could not bind the port A holds; B's rank 1 read
    # A's communicator id from A's store (the same commId in both jobs' files)
    a1, b1 = (XR / "clashA-rank1.log").read_text(), (XR / "clashB-rank1.log").read_text()
    comm = re.search(r"commId (0x[0-9a-f]+)", b1)
    assert comm is not None and comm.group(1) in a1
    _, doc = diagnose("clashA-rank0.log", "clashA-rank1.log")
    assert doc["first_failure"] is None  # job A alone: healthy
    _, b = diagnose("clashB-rank0.log")
    assert b["first_failure"]["finding"] == "PORT-INUSE"


def test_a_peer_process_gone_is_no_network_lost() -> None:
    # real NCCL 2.28.9 output: a peer process killed, its host still up: the survivor's
    # "Connection closed by remote peer", not a network errno
    _, both = diagnose("killpeer-rank0.log", "killpeer-rank1.log")
    assert "LOGS-NET-LOST" not in ids(both), ids(both)
    _, alone = diagnose("killpeer-rank0.log")
    assert alone["first_failure"]["finding"] == "BOOT-PEERCLOSED"


def test_each_files_row_carries_the_first_cause_that_names_a_host() -> None:
    # the first cause names the host (gpu02) the logs state, not a file: every file whose
    # lines it quotes fails with it in the report's rows (they showed a warning before)
    _, doc = diagnose("twonic-rank0.log", "twonic-rank1.log")
    rows = doc["steps"][0]["nodes"]
    assert {r["status"] for r in rows.values()} == {"fail"}, rows
    assert all(
        "NCCL's socket transport on gpu02 uses eth0, eth1" in r["summary"] for r in rows.values()
    )
    assert doc["first_failure"]["nodes"] == ["gpu02"]
