"""The log-diagnosis knowledge base: every signature against its sample line, the real
testbed captures in tests/fixtures/logs/, and the ordering rules."""

# ruff: noqa: E501  (log lines are quoted whole; wrapping them would change the data)

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddptui.diagnosis.signatures import (
    Match,
    Signature,
    SignatureError,
    classify_line,
    classify_lines,
    load_signatures,
    parse_signatures,
    root_cause,
)

LOGS = Path(__file__).parent / "fixtures" / "logs"
FIXTURE_LINE = re.compile(r"^(?P<node>node\d+) (?P<t>\d+\.\d+) (?:out|err) \| (?P<text>.*)$")
SIGS = load_signatures()
BY_ID = {s.id: s for s in SIGS}
HEALTHY = ("healthy", "master_hostname")


def fixture_lines(name: str) -> list[tuple[float, str, str]]:
    """(seconds since launch, node, line as torch printed it) from a captured fixture."""
    out = []
    for raw in (LOGS / f"{name}.log").read_text().splitlines():
        if raw.startswith("#"):
            continue
        m = FIXTURE_LINE.match(raw)
        assert m is not None, f"{name}: malformed fixture line {raw!r}"
        out.append((float(m["t"]), m["node"], m["text"]))
    return out


def all_fixture_texts() -> set[str]:
    """Every captured line: the torchrun captures, and the Slurm ones (as printed)."""
    texts = {text for p in LOGS.glob("*.log") for _, _, text in fixture_lines(p.stem)}
    return texts | {x for p in (LOGS / "slurm").glob("*.log") for x in p.read_text().splitlines()}


# -- the file itself ---------------------------------------------------------------------


def test_knowledge_base_is_large_unique_and_cached() -> None:
    assert len(SIGS) >= 35
    assert len(BY_ID) == len(SIGS)
    assert load_signatures() is SIGS
    assert {s.step for s in SIGS} == {"port", "env", "allreduce"}
    assert {s.severity for s in SIGS} == {"error", "warning", "info"}


@pytest.mark.parametrize("sig", SIGS, ids=[s.id for s in SIGS])
def test_signature_matches_its_sample(sig: Signature) -> None:
    m = sig.match(sig.sample)
    assert m is not None
    # ... and wins the line: the sample is what this entry is for.
    best = classify_line(sig.sample)
    assert best is not None and best.signature.id == sig.id
    # Placeholders the sample provides are filled.
    assert all(f"{{{k}}}" not in m.fix_text() for k in m.groups)


@pytest.mark.parametrize("prefix", ["[default0]:", "[rank3]:", "0: ", "[1] "])
def test_launcher_prefixes_do_not_matter(prefix: str) -> None:
    for sig in SIGS:
        best = classify_line(prefix + sig.sample)
        assert best is not None and best.signature.id == sig.id, sig.id


def test_testbed_samples_are_real_captured_lines() -> None:
    texts = all_fixture_texts()
    testbed = [s for s in SIGS if s.source == "testbed"]
    assert len(testbed) >= 10
    for sig in testbed:
        assert sig.sample in texts, f"{sig.id}: sample not found verbatim in tests/fixtures/logs"


# -- the real captures ---------------------------------------------------------------------


@pytest.mark.parametrize("name", HEALTHY)
def test_no_signature_matches_a_healthy_run(name: str) -> None:
    lines = fixture_lines(name)
    assert sum("ALLREDUCE_OK" in text for _, _, text in lines) == 3
    for _, node, text in lines:
        for sig in SIGS:
            assert sig.match(text) is None, f"{sig.id} matches healthy {node}: {text}"
    assert classify_lines(lines) == []
    assert root_cause([]) is None


# fixture -> (root signature, node it names, a group that must be in the match)
ROOTS = {
    "port_drop": ("C10D-CLIENT-TIMEOUT", {"node1", "node2"}, ("port", "29500")),
    "port_reject": ("C10D-CLIENT-TIMEOUT", {"node1", "node2"}, ("port", "29500")),
    "port_inuse": ("PORT-INUSE", {"node0"}, ("port", "29500")),
    "gloo_ifname_eth9": ("ENV-GLOO-SYNTAX", {"node1"}, ("iface", "eth9")),
    "ephemeral_blocked": ("GLOO-MESH-TIMEOUT", {"node1", "node2"}, ("peer", "[none]")),
    "loopback_fallback": ("GLOO-LOOPBACK", {"node0", "node1", "node2"}, None),
    "master_unresolvable": ("C10D-CLIENT-TIMEOUT", {"node0", "node1", "node2"}, ("host", "no-such-master")),
    "port_differs": ("C10D-CLIENT-TIMEOUT", {"node2"}, ("port", "29501")),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(ROOTS))
def test_root_cause_of_each_captured_fault(name: str) -> None:
    sig_id, nodes, group = ROOTS[name]
    matches = classify_lines(fixture_lines(name))
    root = root_cause(matches)
    assert root is not None
    _, node, m = root
    assert m.signature.id == sig_id
    assert node in nodes
    if group is not None:
        assert m.groups[group[0]] == group[1]
    assert "<" not in m.fix_text().replace("<port>", "")  # the line fills the fix


def test_secondary_noise_is_recognised_in_the_captures() -> None:
    def ids(name: str) -> set[str]:
        return {m.signature.id for _, _, m in classify_lines(fixture_lines(name))}

    assert {"C10D-CLIENTS-JOINED", "C10D-CLIENT-TIMEOUT"} <= ids("port_drop")
    assert {"C10D-STORE-RETRY"} <= ids("port_reject")
    assert {"PORT-INUSE-V6", "PORT-INUSE"} <= ids("port_inuse")
    assert {"C10D-STORE-WAIT", "C10D-WAITFORINPUT", "C10D-CHILDFAILED", "C10D-CHILD-EXIT"} <= ids(
        "gloo_ifname_eth9"
    )
    assert {"GLOO-MESH-LOOPBACK", "GLOO-CONNECT-RETRY", "TORCHRUN-SIGTERM"} <= ids(
        "loopback_fallback"
    )
    assert {"PING-GAI-IPV6"} <= ids("master_unresolvable")
    # The master's "waiting for clients" comes after the worker's own timeout.
    drop = classify_lines(fixture_lines("port_drop"))
    joined = next(t for t, _, m in drop if m.signature.id == "C10D-CLIENTS-JOINED")
    first = next(t for t, _, m in drop if m.signature.id == "C10D-CLIENT-TIMEOUT")
    assert first < joined


def test_classify_lines_orders_by_time() -> None:
    lines = [
        (5.0, "node1", BY_ID["C10D-CHILDFAILED"].sample),
        (1.0, "node0", "nothing to see"),
        (2.0, "node2", BY_ID["BOOT-NOIF"].sample),
    ]
    out = classify_lines(lines)
    assert [(t, o, m.signature.id) for t, o, m in out] == [
        (2.0, "node2", "BOOT-NOIF"),
        (5.0, "node1", "C10D-CHILDFAILED"),
    ]


# -- ordering rules -----------------------------------------------------------------------


def test_specificity_picks_the_retry_over_the_generic_connect_failure() -> None:
    line = BY_ID["BOOT-CONN-RETRY"].sample
    assert BY_ID["BOOT-CONN"].match(line) is not None  # both match ...
    m = classify_line(line)
    assert m is not None and m.signature.id == "BOOT-CONN-RETRY"  # ... the specific one wins
    line = BY_ID["C10D-STORE-RETRY"].sample
    assert BY_ID["C10D-CLIENT-TIMEOUT"].match(line) is not None
    m = classify_line(line)
    assert m is not None and m.signature.id == "C10D-STORE-RETRY"


def _entry(sid: str, **over: object) -> str:
    fields = {
        "id": sid,
        "title": "t",
        "step": "allreduce",
        "phase": "boot",
        "severity": "error",
        "regex": "'boom (?P<what>\\w+)'",
        "specificity": 10,
        "secondary": "false",
        "cause": "c",
        "fix": "f {what}",
        "sample": "'boom x'",
        "source": "reference",
    }
    fields.update({k: str(v) for k, v in over.items()})
    return "- " + "\n  ".join(f"{k}: {v}" for k, v in fields.items())


def _kb(*entries: str) -> tuple[Signature, ...]:
    return parse_signatures("signatures:\n" + "\n".join(entries) + "\n")


def test_equal_specificity_prefers_non_secondary_then_file_order() -> None:
    sigs = _kb(_entry("A", secondary="true"), _entry("B"), _entry("C"))
    m = classify_line("boom now", sigs)
    assert m is not None and m.signature.id == "B"
    sigs = _kb(_entry("A"), _entry("B"), _entry("C", specificity=11, secondary="true"))
    m = classify_line("boom now", sigs)
    assert m is not None and m.signature.id == "C"  # specificity first


def _m(sid: str, line: str | None = None) -> Match:
    sig = BY_ID[sid]
    m = sig.match(line or sig.sample)
    assert m is not None
    return m


def test_root_cause_is_the_earliest_non_secondary_error() -> None:
    matches = [
        (1.0, "node0", _m("C10D-CHILDFAILED")),  # secondary, earlier
        (2.0, "node0", _m("GLOO-CONNECT-RETRY")),  # warning, earlier
        (4.0, "node2", _m("ENV-GLOO-SYNTAX")),
        (3.0, "node1", _m("C10D-CLIENT-TIMEOUT")),
    ]
    root = root_cause(matches)
    assert root is not None and (root[1], root[2].signature.id) == ("node1", "C10D-CLIENT-TIMEOUT")


def test_root_cause_ties_on_time_go_to_the_more_specific() -> None:
    matches = [
        (3.0, "node1", _m("GLOO-MESH")),  # specificity 40
        (3.0, "node2", _m("GLOO-LOOPBACK")),  # specificity 70
    ]
    root = root_cause(matches)
    assert root is not None and root[2].signature.id == "GLOO-LOOPBACK"


def test_root_cause_falls_back_secondary_then_warning_then_info() -> None:
    sec_err = (5.0, "node0", _m("C10D-CLIENTS-JOINED"))
    warning = (1.0, "node1", _m("C10D-STORE-RETRY"))  # secondary warning
    plain_warning = (2.0, "node2", _m("GLOO-CONNECT-RETRY"))
    info = (0.5, "node1", _m("PING-GAI-IPV6"))
    noise = (0.1, "node1", _m("TORCHRUN-SIGTERM"))  # secondary info: never a cause
    assert root_cause([warning, sec_err, info, noise]) == sec_err
    assert root_cause([warning, plain_warning, info]) == plain_warning
    assert root_cause([warning, info, noise]) == warning
    assert root_cause([info, noise]) == info
    assert root_cause([noise]) is None


# -- fix text --------------------------------------------------------------------------------


def test_fix_text_fills_placeholders_from_the_line() -> None:
    m = classify_line(
        "[E1122 13:40:22.412700048 socket.cpp:1028] [c10d] The client socket has timed out "
        "after 15000ms while trying to connect to (10.85.0.1, 29501)."
    )
    assert m is not None and m.groups["host"] == "10.85.0.1"
    assert "getent ahosts 10.85.0.1" in m.fix_text()
    assert "nc -zv -w3 10.85.0.1 29501" in m.fix_text()
    assert "15000ms" in m.cause_text()


def test_fix_text_leaves_a_missing_placeholder_readable() -> None:
    m = classify_line("ConnectionRefusedError: [Errno 111] Connection refused")
    assert m is not None and m.signature.id == "PORT-REFUSED"
    assert "host" not in m.groups
    assert "nc -zv -w3 <host> <port>" in m.fix_text()
    assert "{" not in m.fix_text()


def test_fix_text_keeps_shell_braces() -> None:
    (sig,) = _kb(_entry("A", fix="\"awk '{print $5}' then {what}\""))
    m = sig.match("boom it")
    assert m is not None and m.fix_text() == "awk '{print $5}' then it"


# -- documented false positive ------------------------------------------------------------


def test_ipv6_gai_warning_is_info_not_the_resolution_error() -> None:
    v6 = (
        "[W1122 13:45:02.148437865 socket.cpp:764] [c10d] The IPv6 network addresses of "
        "(localhost, 51595) cannot be retrieved (gai error: -2 - Name or service not known)."
    )
    assert BY_ID["PING-GAI"].regex.search(v6) is not None  # the reference regex alone ...
    assert BY_ID["PING-GAI"].match(v6) is None  # ... is vetoed by not_regex
    m = classify_line(v6)
    assert m is not None and m.signature.id == "PING-GAI-IPV6"
    assert m.signature.severity == "info"
    for fam in ("IPv4 ", ""):
        m = classify_line(v6.replace("IPv6 ", fam))
        assert m is not None and m.signature.id == "PING-GAI" and m.signature.severity == "error"
        assert m.groups["host"] == "localhost"


# -- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ((_entry("A"), _entry("A")), "A: duplicate id"),
        ((_entry("A", regex="'boom ('"),), "A: regex does not compile"),
        ((_entry("A", sample="'bang'"),), "A: sample does not match"),
        ((_entry("A", fix="'see {where}'"),), "A: fix uses {where}"),
        ((_entry("A", severity="fatal"),), "A: severity 'fatal'"),
        ((_entry("A", specificity="high"),), "A: specificity must be an integer"),
        ((_entry("A", not_regex="'boom'"),), "A: sample does not match"),
        ((_entry("A", colour="red"),), "A: unknown keys colour"),
    ],
)
def test_invalid_knowledge_base_is_refused_with_the_entry_named(
    entries: tuple[str, ...], message: str
) -> None:
    with pytest.raises(SignatureError, match=re.escape(message)):
        _kb(*entries)


def test_missing_keys_and_bad_documents_are_refused() -> None:
    with pytest.raises(SignatureError, match="B: missing keys"):
        parse_signatures("signatures:\n- id: B\n  title: t\n")
    with pytest.raises(SignatureError, match="top-level 'signatures:' list"):
        parse_signatures("other: 1\n")
    with pytest.raises(SignatureError, match="not valid YAML"):
        parse_signatures("signatures: [\n")


# -- version forms from the reference (section 3) --------------------------------------------

VERSION_FORMS = [
    # BOOT-CONN family, one row of the reference's table per NCCL era
    ("<=2.14 retry", "h:1:2 [0] NCCL INFO Call to connect returned Connection refused, retrying", "BOOT-CONN-RETRY"),
    ("<=2.14 final", "h:1:2 [0] misc/socket.cc:456 NCCL WARN Net : Connect to 10.0.0.2<43517> failed : Connection refused", "BOOT-CONN"),
    ("2.18 retries", "h:1:2 [0] misc/socket.cc:489 NCCL WARN socketStartConnect: exceeded retries (20000)", "BOOT-CONN-EXCEEDED"),
    ("2.18 timeouts", "h:1:2 [0] misc/socket.cc:512 NCCL WARN socketPollConnect: exceeded timeouts (3)", "BOOT-CONN-EXCEEDED"),
    ("2.21 returned", "h:1:2 [0] misc/socket.cc:533 NCCL WARN socketPollConnect: Connect to 10.0.0.2<43517> returned 111(Connection refused) errno 111(Connection refused)", "BOOT-CONN"),
    ("2.21 poll", "h:1:2 [0] misc/socket.cc:520 NCCL WARN socketPollConnect poll() failed with error Connection refused", "BOOT-CONN-EXCEEDED"),
    ("2.24 retry", "h:1:2 [0] NCCL INFO socketStartConnect: connect returned Connection refused, retrying (1/34) after sleep for 100 msec", "BOOT-CONN-RETRY"),
    ("2.24 final", "[2025-01-01 12:00:00] h:1:2 [0] misc/socket.cc:556 NCCL WARN socketStartConnect: connect returned Connection refused, exceeded error retry count (34)", "BOOT-CONN-EXCEEDED"),
    ("2.27 retry", "h:1:2 [0] NCCL INFO socketStartConnect: connect to 10.0.0.2<43517> returned Connection refused, retrying (1/34) after sleep for 100 msec", "BOOT-CONN-RETRY"),
    ("2.27 poll", "[2025-01-01 12:00:00] h:1:2 [0] misc/socket.cc:610 NCCL WARN socketPollConnect to 10.0.0.2<43517> failed with error Connection refused", "BOOT-CONN"),
    ("2.30 func", "h:1:2 [0] os/linux.cc:334 (ncclOsSocketPollConnect) NCCL WARN ncclOsSocketPollConnect to 10.0.0.2<43517> failed with error No route to host", "BOOT-CONN"),
    # other per-version shapes
    ("noif 2.21", "h:1:2 [0] bootstrap.cc:48 NCCL WARN Bootstrap : no socket interface found", "BOOT-NOIF"),
    ("noif 2.30", "h:1:2 [0] bootstrap.cc:126 (bootstrapNetInit) NCCL WARN Bootstrap : no socket interface found", "BOOT-NOIF"),
    ("noif Last error", "Bootstrap : no socket interface found", "BOOT-NOIF"),
    ("nranks <=2.22", "h:1:2 [0] bootstrap.cc:140 NCCL WARN Bootstrap Root : mismatch in rank count from procs 8 : 4", "ENV-DUPRANK-NRANKS"),
    ("peer <=2.14", "h:1:2 [0] include/socket.h:409 NCCL WARN Net : Connection closed by remote peer 10.0.0.2<55555>", "BOOT-PEERCLOSED"),
    ("peer 2.27", "h:1:2 [0] misc/socket.cc:60 NCCL WARN socketProgressOpt: Call to recv from 10.0.0.2<55555> failed : Connection reset by peer", "BOOT-PEERCLOSED"),
    ("cq <=2.18", "h:1:2 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<58622> with error 12, opcode 0, len 0, vendor err 129 (Send)", "IB-CQERR"),
    ("cq 2.30", "h:1:2 [0] transport/net_ib/p2p.cc:688 (ncclIbTest) NCCL WARN NET/IB: Got completion from peer 10.0.0.2<58622> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129 hca mlx5_0", "IB-CQERR"),
    ("qp <=2.21", "h:1:2 [0] misc/ibvwrap.cc:206 NCCL WARN Call to ibv_modify_qp failed with error Invalid argument errno 22", "IB-QP"),
    ("async 2.21", "h:1:2 [0] transport/net_ib.cc:90 NCCL WARN NET/IB : mlx5_0:1 Got async event : port error", "IB-ASYNC"),
    ("shm 2.27", "h:1:2 [0] misc/shmutils.cc:128 NCCL WARN Error: failed to create shared memory file /dev/shm/nccl-abc, error: Permission denied (13)", "SHM-SEGMENT"),
    ("watchdog PG", "[rank1]:[E1122 10:00:00.000000000 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.", "WATCHDOG"),
    ("watchdog old", "[E ProcessGroupNCCL.cpp:475] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, TensorShape=[1], Timeout(ms)=1800000) ran for 1800405 milliseconds before timing out.", "WATCHDOG"),
    ("heartbeat dump", "[rank0]:[F ProcessGroupNCCL.cpp:1598] [PG ID 0 PG GUID 0(default_pg) Rank 0] Terminating the process after attempting to dump debug info, due to collective timeout or exception.", "WATCHDOG-HEARTBEAT"),
    ("ncclerr async", "[rank1]:[E ProcessGroupNCCL.cpp:1575] [PG ID 0 PG GUID 0 Rank 1] Process group watchdog thread terminated with exception: NCCL error: remote process exited or there was a network error, NCCL version 2.21.5", "WATCHDOG-TEARDOWN"),
    ("gloo mesh no error", "RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error", "GLOO-MESH"),
    ("gloo bind", "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:131] bind_rv == 0. Unable to find address for node3; bind(2) for 127.0.1.1 failed with: Cannot assign requested address", "GLOO-ADDR"),
    ("libuv inuse no port", "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use", "PORT-INUSE"),
    ("client timeout seconds", "torch.distributed.DistNetworkError: The client socket has timed out after 1800s while trying to connect to (node0, 29500).", "C10D-CLIENT-TIMEOUT"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("line", "sig_id"), [v[1:] for v in VERSION_FORMS], ids=[v[0] for v in VERSION_FORMS]
)
def test_reference_version_forms(line: str, sig_id: str) -> None:
    m = classify_line(line)
    assert m is not None and m.signature.id == sig_id
