"""Round logs28 (issue 15, blind batch T: documentation of the training stack).  General
readings, each on the real excerpt, and a neighbour that must not be read the same way:
ranks passing different shapes to one collective in torch's DETAIL check and accelerate's
debug check (NET-SIZE-MISMATCH); torch's desync report leading the watchdog it explains
(DESYNC-NOTJOINED); NCCL's P2P transport failing to open a peer's CUDA IPC handle
(NCCL-HOSTHASH); NCCL's NET/IB list mixing IB and RoCE ports (IB-INCOMPAT, a fact);
ssh's host-key question a launcher cannot answer (SSH-HOSTKEY-UNKNOWN); Open MPI's ORTE
failing and DeepSpeed's loss scaler at its floor as honest unknowns, never a clean log."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

import pytest
from corpus_excerpts import excerpt, ids, lead

from ddptui.logs.diagnose import diagnose_lines


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("t1-shape-mismatch-accelerate-troubleshooting", "NET-SIZE-MISMATCH"),
        ("t1-allreduce-shape-mismatch-pytorch-distributed-docs", "NET-SIZE-MISMATCH"),
        ("t1-desync-extra-allreduce-ml-engineering-debug-pytorch", "DESYNC-NOTJOINED"),
        ("t1-horovod-ipc-same-hostname-troubleshooting", "NCCL-HOSTHASH"),
        ("t1-horovod-ssh-hostkey-running", "SSH-HOSTKEY-UNKNOWN"),
    ],
)
def test_the_lines_name_the_cause(name: str, want: str) -> None:
    d = excerpt(name)
    assert lead(d) == want, (name, ids(d))
    assert d.first is not None and d.first.severity == "error"


def test_ib_and_roce_ports_in_one_nccl_list_are_not_clean() -> None:
    d = excerpt("t1-ib-roce-bond-included-ml-engineering-network-debug")
    assert lead(d) == "IB-INCOMPAT", ids(d)
    f = d.first
    assert f is not None and "mlx5_bond_0:1" in f.summary
    assert "mlx5_0:1" not in f.summary.split("together:")[1]


@pytest.mark.parametrize(
    "line",
    [
        # one link layer only (a healthy SHARP IB list, a healthy RoCE list)
        "dso-s1-r1-a100-03:2331:2666 [3] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB/SHARP [1]mlx5_1:1/IB/SHARP [RO]; OOB ibp12s0:10.0.0.3<0>",
        "node:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.1.0.4<0>",
    ],
)
def test_one_link_layer_is_no_finding(line: str) -> None:
    d = diagnose_lines([line], "one-link-layer")
    assert "IB-INCOMPAT" not in ids(d) and not d.findings, ids(d)


def test_a_failing_log_with_mixed_ports_keeps_its_failure_line_first() -> None:
    # the Azure excerpt lists an IB and a RoCE port, then NCCL warns of a failed IB work
    # completion (its thread: two nodes whose IB was never connected): the mix is listed,
    # NCCL's own warning stays first (logs35: read whole, its wrapped "len" / "0, vendor err
    # 129" joined, it is IB-CQERR, no longer an unknown)
    d = excerpt("t1-ib-azure-avset-ml-engineering-debug-pytorch")
    assert lead(d) == "IB-CQERR" and "IB-INCOMPAT" in ids(d), ids(d)


def test_ssh_names_the_host_it_asked_about() -> None:
    lines = [
        "The authenticity of host 'node7 (10.0.0.7)' can't be established.",
        "ECDSA key fingerprint is SHA256:abc.",
        "Are you sure you want to continue connecting (yes/no/[fingerprint])?",
    ]
    d = diagnose_lines(lines, "launch.log")
    assert lead(d) == "SSH-HOSTKEY-UNKNOWN" and d.first is not None
    assert "node7" in d.first.summary and "node7" in d.first.fix


def test_ssh_recording_a_new_key_is_silent() -> None:
    d = diagnose_lines(["Warning: Permanently added 'node7,10.0.0.7' (ECDSA) to the list of known hosts."], "launch.log")
    assert not d.findings, ids(d)


@pytest.mark.parametrize(
    "name", ["t1-horovod-orte-hwloc-troubleshooting", "t1-deepspeed-fp16-overflow-transformers-debugging"]
)
def test_a_broken_launcher_or_loss_scale_at_its_floor_is_an_honest_unknown(name: str) -> None:
    d = excerpt(name)
    assert lead(d) == "LOGS-UNRECOGNIZED", ids(d)


def test_the_loss_scaler_halving_in_a_working_run_is_noise() -> None:
    lines = [
        " [deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 262144, reducing to 131072.0",
        " [deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 131072.0, reducing to 65536.0",
        "[2024-03-30 20:02:40] iteration       10/  500000 | loss scale: 65536.0 |",
    ]
    d = diagnose_lines(lines, "train.log")
    assert not d.findings, ids(d)


def test_a_remote_shell_without_open_mpis_daemon_is_a_command_not_found() -> None:
    # Horovod's troubleshooting: "bash: orted: command not found", then ORTE's generic list
    # of reasons (its last one the network): the shell's own words lead
    d = excerpt("t1-horovod-orted-not-found-troubleshooting")
    assert lead(d) == "LAUNCH-CMD-NOTFOUND", ids(d)
    assert d.first is not None and "--prefix" in d.first.fix
