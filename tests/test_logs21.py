"""Round logs21 (issue 15, blind batch N's misses that name an id).  Each reading is the
printing program's own message format (NCCL's include/alloc.h and misc/socket.cc,
systemd's unit status, the fabric manager's own words), checked on the real excerpts as
pasted and on the neighbours it must leave alone."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from corpus_excerpts import CORPUS, excerpt, ids, lead

from ddptui.diagnosis.factrules_logs21 import ACCEPT_FRAMES
from ddptui.logs.diagnose import diagnose_lines


def test_nccls_allocator_out_of_memory_is_the_rank_out_of_gpu_memory() -> None:
    """NCCL's include/alloc.h wraps only NCCL's own cudaMalloc/cudaHostAlloc: its
    "Cuda failure 'out of memory'" is the GPU full when NCCL allocated its buffers (NCCL#582,
    NCCL#1235); a Cuda failure of another site stays BOOT-CUDA, and NCCL's own "Failed to
    CUDA calloc N bytes" pasted alone stays NCCL-ALLOC."""
    for name in ("n2-initoom-nccl-582", "r2d-crash-nccl-1235"):
        d = excerpt(name)
        assert lead(d) == "RANK-CUDA-OOM", (name, ids(d))
        assert lead(d) in CORPUS[name].expected
    other = "host:1:2 [0] enqueue.cc:43 NCCL WARN Cuda failure 'out of memory'"
    assert lead(diagnose_lines([other], "x")) == "BOOT-CUDA"
    assert lead(excerpt("j3-device-nccl-calloc-oom-torchtitan-660")) == "NCCL-ALLOC"


def test_systemds_failed_fabric_manager_unit_is_the_fabric_not_ready() -> None:
    """systemd's status of nvidia-fabricmanager whose ExecStart=/usr/bin/nv-fabricmanager
    exited with a failure (pytorch#129749) is no longer called clean; the unit running
    (status=0, or no exit at all) stays silent."""
    d = excerpt("n2-fabricmgr-pytorch-129749")
    assert lead(d) == "CUDA-FABRIC-NOTREADY", ids(d)
    assert d.first is not None and d.first.severity == "error"
    assert "nv-fabricmanager" in " ".join(d.first.evidence)
    running = [
        "● nvidia-fabricmanager.service - NVIDIA fabric manager service",
        "     Active: active (running) since Mon 2024-07-01 14:43:57 UTC; 5s ago",
        "    Process: 444114 ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg (code=exited, status=0/SUCCESS)",
    ]
    assert diagnose_lines(running, "x").first is None
    mismatch = "nv-fabricmanager[4121]: fabric manager NVIDIA GPU driver interface version 550.90.07 don't match with driver version 550.54.15. Please update with matching NVIDIA driver package."
    assert lead(diagnose_lines([mismatch], "x")) == "CUDA-FABRIC-NOTREADY"


def test_a_connection_closed_before_nccls_magic_is_a_foreign_connection() -> None:
    """NCCL#1612: "Connection closed by remote peer" whose return trace climbs through
    socketFinalizeAccept's magic wait (socket.cc:474) and its call (:628), NCCL 2.24's
    pair: an accepted connection that never sent NCCL's magic leads as BOOT-MAGIC, over
    the generic closed connection.  The same WARN with another trace (a peer that died,
    NCCL#1235's socket.cc:49/749) stays BOOT-PEERCLOSED; the frames of two different
    releases are no pair."""
    d = excerpt("n2-bootmagic-nccl-1612")
    assert lead(d) == "BOOT-MAGIC", ids(d)
    assert d.first is not None and d.first.severity == "error"
    assert "BOOT-PEERCLOSED" in ids(d)
    assert ACCEPT_FRAMES["2.24.3"] == (474, 628)
    died = [
        "[0] misc/socket.cc:71 NCCL WARN socketProgress: Connection closed by remote peer 10.10.1.3<36138>",
        "[0] NCCL INFO misc/socket.cc:80 -> 6",
        "[0] NCCL INFO misc/socket.cc:474 -> 6",
        "[0] NCCL INFO misc/socket.cc:566 -> 6",  # 2.23's finalize call, 2.24's wait: no pair
        "[0] NCCL INFO bootstrap.cc:701 -> 6",
    ]
    assert lead(diagnose_lines(died, "x")) == "BOOT-PEERCLOSED"
    assert "BOOT-MAGIC" not in ids(diagnose_lines(died[:2] + died[4:], "x"))
