"""Facts ranks state in their logs, the rules over them (factrules.yaml), launcher
prefixes and honest unknowns: each rule on real lines (public threads, the real H100
captures, testbed captures)."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddptui.diagnosis.factrules import FactRuleError, load_factrules, parse_factrules
from ddptui.diagnosis.kb import load_kb
from ddptui.logs.diagnose import Diagnoser, LogDiagnosis, diagnose_lines, merged
from ddptui.logs.lineinfo import parse_head
from ddptui.logs.scan import from_lines

FIXTURES = Path(__file__).parent / "fixtures"
GPU = FIXTURES / "gpu-h100"
CAPTURE = re.compile(r"^(?P<node>node\d+) (?P<t>\d+\.\d+) (?:out|err) \| (?P<text>.*)$")


def capture(name: str) -> LogDiagnosis:
    """A testbed capture as the per-node log files a user would have (capture prefix off)."""
    per: dict[str, list[str]] = {}
    for raw in (FIXTURES / "logs" / f"{name}.log").read_text(encoding="utf-8").splitlines():
        m = CAPTURE.match(raw)
        if m is not None:
            per.setdefault(m["node"], []).append(m["text"])
    d = Diagnoser(name)
    for cand in merged(from_lines(lines, f"{node}.log") for node, lines in sorted(per.items())):
        d.feed(cand)
    return d.result()


def ids(d: LogDiagnosis) -> list[str]:
    return [f.id for f in d.findings]


# --------------------------------------------------------------------------- prefixes


@pytest.mark.parametrize(
    ("line", "rank", "host", "body"),
    [
        ("12: RuntimeError: boom", 12, None, "RuntimeError: boom"),
        (" 3: [rank3]: Traceback (most recent call last):", 3, None, "Traceback (most recent call last):"),
        ("trainer-2: torch.distributed.DistNetworkError: x", None, "trainer-2", "torch.distributed.DistNetworkError: x"),
        ("10.0.0.7: [INFO] launch.py: x", None, "10.0.0.7", "[INFO] launch.py: x"),
        ("[pod/train-worker-1/pytorch] RuntimeError: x", None, "train-worker-1", "RuntimeError: x"),
        ("gpu-st-1:23:23 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>", None, "gpu-st-1", None),
        ("slurmstepd-vm: error: *** JOB 3 ON vm CANCELLED AT 2026-11-25T17:53:42 DUE TO TIME LIMIT ***", None, "vm", None),
        # not launcher prefixes: an exception class, a tool, a level, a plain word
        ("RuntimeError: Connection refused", None, None, None),
        ("torch.distributed.DistBackendError: NCCL error", None, None, None),
        ("ssh: Could not resolve hostname node-0: Name or service not known", None, None, None),
        ("srun: error: gpu1: task 0: Exited with exit code 1", None, None, None),
        ("Epoch 1: 100%|##########| 10/10", None, None, None),
    ],
)
def test_launcher_prefixes_give_rank_and_host(
    line: str, rank: int | None, host: str | None, body: str | None
) -> None:
    head, _ = parse_head(line, 2026)
    assert (head.rank, head.host) == (rank, host)
    assert head.body == (body if body is not None else line)


# --------------------------------------------------------------------------- facts


def test_facts_of_a_real_h100_rank() -> None:
    """The healthy H100 capture: what rank 0 said about itself, shared with ncclfacts'
    patterns; nothing to report."""
    d = Diagnoser("h100")
    lines = (GPU / "raw-torchrun/healthy-1gpu.log").read_text(encoding="utf-8").splitlines()
    for cand in from_lines(lines, "healthy-1gpu.log"):
        d.feed(cand)
    procs = [p for p in d.facts.processes(d.pid_rank) if p.pid is not None]
    assert len(procs) == 1
    p = procs[0]
    assert (p.rank, p.world_size, p.host) == (0, 1, "vm")
    assert (p.nccl_version, p.cuda_version) == ("2.28.9", "13.0")
    assert (p.bootstrap_if, p.bootstrap_ip, p.network) == ("eth0", "192.0.2.2", "Socket")
    assert p.socket_devs == [("eth0", "192.0.2.2")]
    assert p.init_complete
    r = d.result()
    assert r.first is None and not [f for f in r.findings if f.severity == "error"]


# NVIDIA/nccl#529: NCCL bootstraps on a link-local address of an ip6tnl0 tunnel; the
# maintainer (sjeaugey): "The important lines are: NCCL WARN Connect to fe80::...%ip6tnl0
# ... failed : Connection timed out".  Lines as pasted in the thread.
NCCL_529 = [
    "NvYt-dcf441d17e21-1bdf2bc9-79ce82ee-3fe03e8-c2959af0:97:221 [0] NCCL INFO Bootstrap : Using [0]ip6tnl0:fe80::e866:19ff:fe1e:a688%ip6tnl0<0> [1]veth0:2a02:6b8:fc1d:3606:0:4457:edef:600a<0>",
    "NvYt-dcf441d17e21-1bdf2bc9-79ce82ee-3fe03e8-c2959af0:97:221 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
    "NvYt-dcf441d17e21-1bdf2bc9-79ce82ee-3fe03e8-c2959af0:97:221 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.",
    "NvYt-dcf441d17e21-1bdf2bc9-79ce82ee-3fe03e8-c2959af0:97:221 [0] NCCL INFO NET/Socket : Using [0]ip6tnl0:fe80::e866:19ff:fe1e:a688%ip6tnl0<0> [1]veth0:2a02:6b8:fc1d:3606:0:4457:edef:600a<0>",
    "NCCL version 2.5.6+cuda10.0",
    "NCCL WARN Connect to fe80::745d:60ff:fef9:e1dd%ip6tnl0<46681> failed : Connection timed out",
]


def test_the_interface_nccl_chose_explains_the_connect_timeout() -> None:
    d = diagnose_lines(NCCL_529)
    assert d.first is not None and d.first.id == "LOGS-IF-TUNNEL", ids(d)
    assert "ip6tnl0" in d.first.summary and "BOOT-CONN" in d.first.summary
    assert d.first.severity == "error"
    assert "BOOT-CONN" in ids(d)  # the generic line is kept, listed after its cause
    assert d.failed


def test_an_interface_fact_alone_is_not_a_failure() -> None:
    """The same interface on one host with nothing failing: no finding to report."""
    d = diagnose_lines(NCCL_529[:5])
    assert d.first is None and not d.findings


# NVIDIA/nccl#1291 (nccl-tests on two GH200 hung): gh1 bootstraps on IPoIB with a
# link-local address, gh2 on its Ethernet bond.  Lines as pasted.
NCCL_1291 = [
    "gh1:180172:180172 [0] NCCL INFO Bootstrap : Using ib0:fe80::a288:c203:d2:aaf2%ib0<0>",
    "gh2:9746:9746 [0] NCCL INFO cudaDriverVersion 12040",
    "gh2:9746:9746 [0] NCCL INFO Bootstrap : Using bond0:X.X.X.X<0>",
]


def test_ipoib_on_one_host_and_ethernet_on_the_other() -> None:
    d = diagnose_lines(NCCL_1291)
    got = ids(d)
    assert "LOGS-IF-KIND" in got and "LOGS-IF-LINKLOCAL" in got, got
    kind = next(f for f in d.findings if f.id == "LOGS-IF-KIND")
    assert "IPoIB on gh1" in kind.summary and "Ethernet on gh2" in kind.summary
    assert set(kind.nodes) <= {"gh1", "gh2"}


# horovod/horovod#584 (multi-machine hang, NCCL 2.3 wording "NET : Using interface"):
# one host lists lo first, the connect is refused.  Lines as pasted.
HOROVOD_584 = [
    "paigcr-b-gpu-1011:4289:4343 [0] NCCL INFO comm 0x7fc8e824c640 rank 0 nranks 4",
    "paigcr-b-gpu-1012:4152:4206 [0] NCCL INFO comm 0x7f0dc0269bf0 rank 2 nranks 4",
    "paigcr-b-gpu-1012:4152:4206 [0] NCCL INFO NET : Using interface lo:127.0.0.1<0>",
    "paigcr-b-gpu-1012:4152:4206 [0] NCCL INFO NET : Using interface eth0:10.151.40.240<0>",
    "paigcr-b-gpu-1012:4152:4206 [0] NCCL INFO NET : Using interface eth1:fe80::215:5dff:fe33:ff6d%eth1<0>",
    "paigcr-b-gpu-1012:4152:4206 [0] NCCL INFO NET/Socket : 3 interfaces found",
    "paigcr-b-gpu-1012:4153:4209 [1] include/socket.h:361 NCCL WARN Call to connect timeout : Connection refused",
]


def test_loopback_among_the_socket_interfaces_of_a_multi_host_job() -> None:
    d = diagnose_lines(HOROVOD_584)
    assert d.first is not None and d.first.id == "AR-BOOT-LOOPBACK", ids(d)
    assert "lo:127.0.0.1" in d.first.summary


# NVIDIA/nccl#1634 (nccl-tests hang between some node pairs): the maintainer's answer
# quotes these two lines, "you have `libnccl-net.so` on part of your hpc".
NCCL_1634 = [
    "HGX-H100-11:18226:18274 [5] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
    "HGX-H100-04:589474:589541 [0] NCCL INFO Plugin Path : /opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so",
]


def test_a_net_plugin_on_some_nodes_only() -> None:
    d = diagnose_lines(NCCL_1634)
    assert d.first is not None and d.first.id == "LOGS-NETPLUGIN-DIFFERS", ids(d)
    assert "internal" in d.first.summary and "nccl_rdma_sharp_plugin" in d.first.summary
    assert set(d.first.nodes) == {"HGX-H100-04", "HGX-H100-11"}


def test_a_node_rank_claimed_by_two_nodes() -> None:
    """Testbed: node1 and node2 both started with --node-rank 1; torchrun's agents wait
    in the store as node rank 1 until the timeout."""
    d = capture("dup_node_rank")
    assert d.first is not None and d.first.id == "LOGS-DUP-RANK", ids(d)
    assert "node rank 1" in d.first.summary
    assert "node1.log" in d.first.summary and "node2.log" in d.first.summary
    assert "C10D-STORE-WAIT" in ids(d)


def test_a_rank_that_never_reached_the_collective() -> None:
    """Testbed: node2's rank sleeps instead of calling all_reduce; with
    TORCH_DISTRIBUTED_DEBUG=DETAIL ranks 0 and 1 enter ALLREDUCE, rank 2 never does."""
    d = capture("rank_skips_collective")
    assert d.first is not None and d.first.id == "C10D-MONITORED-BARRIER", ids(d)
    assert "LOGS-NOT-IN-COLLECTIVE" in ids(d)
    f = next(f for f in d.findings if f.id == "LOGS-NOT-IN-COLLECTIVE")
    assert "ranks 0, 1 entered ALLREDUCE (SequenceNumber 0)" in f.summary
    assert "ranks 2 never did" in f.summary


# --------------------------------------------------------------------------- Slurm


def slurm(name: str) -> LogDiagnosis:
    """A real Slurm capture (slurm-wlm 22.05, srun --label; tests/fixtures/logs/slurm/)."""
    return diagnose_lines((FIXTURES / "logs/slurm" / f"{name}.log").read_text().splitlines())


def test_slurm_time_limit() -> None:
    d = slurm("timelimit")
    assert d.first is not None and d.first.id == "SLURM-TIMELIMIT", ids(d)
    assert "JOB 3" in d.first.cause and "vm" in d.first.cause
    assert "SLURM-TASK-EXIT" in ids(d)  # srun's "tasks 0-1: Terminated": listed, not the cause


def test_slurm_step_that_cannot_start() -> None:
    d = slurm("step_create")
    assert d.first is not None and d.first.id == "SLURM-STEP-CREATE", ids(d)
    assert "More processors requested than permitted" in d.first.cause


def test_a_task_exit_leads_to_the_task_s_own_error() -> None:
    """srun's "task 1: Exited with exit code 1" is a wrapper; task 1's own exception
    (no signature knows it) is the answer, attributed by srun's --label (logs39: the
    code's own exception, LOGS-APP-EXCEPTION; an honest unknown before)."""
    d = slurm("task_exit")
    assert d.first is not None and d.first.id == "LOGS-APP-EXCEPTION", ids(d)
    assert "rank 1 raised RuntimeError" in d.first.summary
    assert "RuntimeError: dataset shard 1 is missing" in d.first.cause
    assert "SLURM-TASK-EXIT" in ids(d)


# --------------------------------------------------------------------------- unknowns


def test_an_unknown_failure_is_not_called_clean() -> None:
    lines = [
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "train.py", line 12, in <module>',
        "[rank1]: ValueError: something only this job does",
        "[rank0]: KeyError: 'labels'",
    ]
    d = diagnose_lines(lines)
    # logs39: a Python exception of the code is a cause of its own, never a clean bill
    assert d.first is not None and d.first.id == "LOGS-APP-EXCEPTION"
    assert d.failed
    assert "rank 1" in d.first.summary  # the first to fail
    assert "ValueError: something only this job does" in d.first.cause
    assert "KeyError" in d.first.cause


def test_a_warning_only_log_about_an_unresolvable_host_is_not_clean() -> None:
    """round 2's pytorch thread: only torch's IPv6 lookup warning was pasted."""
    d = diagnose_lines(
        ["[W socket.cpp:663] [c10d] The IPv6 network addresses of (master-0, 29500) cannot be retrieved (gai error: -2 - Name or service not known)."]
    )
    assert d.first is not None and d.first.id == "PING-GAI-IPV6"
    assert d.first.severity == "warning" and not d.failed


@pytest.mark.parametrize("name", ["healthy", "healthy-1gpu", "healthy-loop"])
def test_healthy_noise_stays_silent(name: str) -> None:
    path = {
        "healthy": FIXTURES / "logs/healthy.log",
        "healthy-1gpu": GPU / "raw-torchrun/healthy-1gpu.log",
        "healthy-loop": GPU / "job-hang/healthy-loop.log",
    }[name]
    lines = [CAPTURE.sub(r"\g<text>", x) for x in path.read_text(encoding="utf-8").splitlines()]
    d = diagnose_lines(lines)
    assert not [f for f in d.findings if f.severity == "error"], ids(d)


# --------------------------------------------------------------------------- the data


def test_the_shipped_fact_rules_load_and_name_known_findings() -> None:
    rules = load_factrules()
    kb = load_kb()
    assert {r.id for r in rules.rules} <= set(kb)
    assert {c.name for c in rules.classes} >= {"loopback", "link-local", "tunnel", "virtual", "ipoib"}
    assert rules.hard and rules.soft


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("interfaces: {}\nrules: []\nfailure_lines: {hard: [], soft: []}\n", "not_clean"),
        (
            "interfaces: {}\nrules: []\nfailure_lines: {hard: [], soft: []}\nnot_clean: []\nwrappers: [NO-SUCH-ID]\n",
            "wrappers",
        ),
        (
            "interfaces: {}\nrules: [{id: X, when: nope, needs: [failure], severity: error}]\nfailure_lines: {hard: [], soft: []}\nnot_clean: []\nwrappers: []\n",
            "when 'nope'",
        ),
        (
            "interfaces: {}\nrules: []\nfailure_lines: {hard: ['('], soft: []}\nnot_clean: []\nwrappers: []\n",
            "does not compile",
        ),
    ],
)
def test_a_malformed_rules_file_is_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(FactRuleError, match=re.escape(message)):
        parse_factrules(text, load_kb())


def test_a_node_that_states_another_node_count_in_a_run_that_completed_is_not_an_error() -> None:
    """Testbed: node2 started with --nnodes 4, the others with 3; under torchrun's static
    rendezvous the world comes from the store (3 everywhere), the all_reduce completes and
    only node2's group_world_size says 4: nothing failed, so nothing is an error."""
    d = capture("nnodes_differs")
    assert not [f for f in d.findings if f.severity == "error"], ids(d)
