"""Round logs31 (blind batch W: bigscience's chronicles, Megatron-Bridge, mmdetection and
mmengine, navsim and pcdiff post-mortems, Lambda's, JSC's and EIDF's docs): each reading on
the real excerpt it came from (tests/fixtures/corpus/round11w.yaml), through the real log
diagnosis, both feeds (lines held in memory, and the byte chunks a file or a node gives)."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "corpus"))

from logchunks import first_via_chunks
from score import load_corpus, score

from ddptui.logs.diagnose import diagnose_candidates, diagnose_lines
from ddptui.logs.scan import from_chunks

W = {e.id: e for e in load_corpus() if e.source == "round11w.yaml"}


def _got(eid: str) -> str | None:
    [v] = score([W[eid]])
    return v.got


def _via_chunks(lines: list[str]) -> str | None:
    """The CLI's path: the excerpt as a file's bytes, cut into small chunks."""
    return first_via_chunks(lines, "w.log")


def test_a_message_wrapped_at_the_terminals_width_is_read_whole() -> None:
    # the store's "waiting for clients. " / "1/16 clients joined.", Lightning's check cut
    # after "tasks per node ": each half keeps the one space it was cut at
    for eid, want in (
        ("w1-no-srun-navsim-srun-fix", "LOGS-MISSING-RANKS"),
        ("w1-lightning-ntasks-navsim-multinode-fix", "LAUNCH-LIGHTNING-SLURM"),
    ):
        assert _got(eid) == want, eid
        assert _via_chunks(list(W[eid].lines)) == want, eid
    # a line ending in a space followed by a new message (capitalised) is not joined
    lines = ["torch.distributed.DistStoreError: Timed out after 3601 seconds waiting for clients. ", "Traceback (most recent call last):"]
    d = diagnose_lines(lines)
    assert d.first is not None and d.first.id != "C10D-CLIENTS-JOINED"
    # nor one whose next line is a line of its own (a failure line in lower case)
    lines = ["ValueError: You set `devices=4` in Lightning, but the number of tasks per node ", "terminate called after throwing an instance of 'c10::Error'"]
    for got in (diagnose_lines(lines), diagnose_candidates(from_chunks([("\n".join(lines) + "\n").encode()], "t.log"), "t.log").result()):
        # logs39: the code's own exception (an honest unknown before), its message not
        # joined with the line after it
        assert got.first is not None and got.first.id == "LOGS-APP-EXCEPTION"
        assert "tasks per node` (" in got.first.cause and "throwing" not in got.first.summary


def test_the_store_alone_among_its_clients_is_missing_ranks_not_a_slow_node() -> None:
    d = diagnose_lines(list(W["w1-no-srun-navsim-srun-fix"].lines))
    assert d.first is not None and d.first.id == "LOGS-MISSING-RANKS"
    assert "16 ranks" in d.first.cause and "1 to 15" in d.first.cause
    # two of three joined: some nodes came, the store's own count stays the lead
    d = diagnose_lines(["torch.distributed.DistStoreError: Timed out after 16 seconds waiting for clients. 2/3 clients joined."])
    assert d.first is not None and d.first.id == "C10D-CLIENTS-JOINED"


def test_ddp_unfinished_reduction_without_its_period() -> None:
    assert _got("w1-unused-params-mmdetection-faq") == "DDP-UNUSED-PARAMS"


def test_slurm_oom_kill_events_at_the_end_of_the_line_lead_the_sigkill_reading() -> None:
    assert _got("w1-slurm-oom-navsim-job269582") == "SLURM-OOM"


def test_py_spy_stacks_say_who_is_in_the_collective_and_who_waits() -> None:
    d = diagnose_lines(list(W["w1-dataloader-deadlock-bigscience-tr11-chronicles"].lines))
    assert d.first is not None and d.first.id == "LOGS-UNRECOGNIZED" and d.first.severity == "error"
    assert "688514" in d.first.cause and "dataloader.py" in d.first.cause
    assert "688517" in d.first.cause and "broadcast" in d.first.cause
    assert _via_chunks(list(W["w1-dataloader-deadlock-bigscience-tr11-chronicles"].lines)) == "LOGS-UNRECOGNIZED"
    # one process's dump, waiting in the DataLoader's queue: a warning, never clean
    d = diagnose_lines(list(W["w2-dataloader-deadlock-eval-bigscience-176b"].lines))
    assert d.first is not None and d.first.id == "LOGS-UNRECOGNIZED" and d.first.severity == "warning"
    assert "1439102" in d.first.cause and "queue.py" in d.first.cause
    # py-spy marks the thread holding the GIL "(active+gil)"
    gil = [ln.replace("(active)", "(active+gil)") for ln in W["w1-dataloader-deadlock-bigscience-tr11-chronicles"].lines]
    assert gil != list(W["w1-dataloader-deadlock-bigscience-tr11-chronicles"].lines)
    d = diagnose_lines(gil)
    assert d.first is not None and d.first.id == "LOGS-UNRECOGNIZED" and "(active+gil)" in d.first.cause
    # every dumped thread in the collective (no one waiting elsewhere): no finding from the dump
    lines = [ln for ln in W["w1-dataloader-deadlock-bigscience-tr11-chronicles"].lines]
    at = lines.index('Thread 688514 (idle): "MainThread"')
    only_collective = lines[:at] + lines[at + 18 :]
    assert all("queue.py" not in ln for ln in only_collective)
    assert diagnose_lines(only_collective).first is None
    # the same with a helper thread of one process idling in its queue (py-spy dumps every
    # thread; a DataLoader's pin-memory loop waits in queue.get in every healthy process):
    # the helper's wait holds no one
    pin = [
        'Thread 688530 (idle): "Thread-3 (_pin_memory_loop)"',
        "    wait (threading.py:324)",
        "    get (queue.py:180)",
        "    do_one_step (torch/utils/data/_utils/pin_memory.py:31)",
        "    _pin_memory_loop (torch/utils/data/_utils/pin_memory.py:54)",
    ]
    assert diagnose_lines(only_collective + pin).first is None
    assert _via_chunks(only_collective + pin) is None


def test_a_rank_range_of_watchdogs_names_the_absent_rank() -> None:
    d = diagnose_lines(list(W["w1-rank0-branch-pcdiff-nccl-timeout-fix"].lines))
    assert d.first is not None and d.first.id == "LOGS-NOT-IN-COLLECTIVE"
    assert "ranks 1, 2, 3, 4, 5, 6, 7" in d.first.cause and "rank 0 never" in d.first.cause


def test_the_abbreviated_unique_id_wait_is_read() -> None:
    assert _got("w1-rank0-alone-megatron-bridge-multinode-skill") == "C10D-UIDGET"


def test_kernel_and_driver_lines_keep_a_log_from_being_clean() -> None:
    # Xid 119 / 79 pasted without "NVRM: ": a named cause since round 13 (GPU-FELL-OFF-BUS,
    # tests/test_gpu_fell_off_bus.py); the PCI BAR the kernel could not assign: a soft
    # failure line (a warning); Megatron's fused-kernel build that never ends
    assert diagnose_lines(list(W["w2-xid119-gsp-rpc-timeout-lambda"].lines)).first.id == "GPU-FELL-OFF-BUS"  # type: ignore[union-attr]
    for eid, sev in (
        ("w2-pci-bar-no-space-gpus-missing-lambda", "warning"),
        ("w2-fused-kernel-lock-hang-bigscience-megatron", "warning"),
    ):
        d = diagnose_lines(list(W[eid].lines))
        assert d.first is not None and d.first.id == "LOGS-UNRECOGNIZED" and d.first.severity == sev, eid
    d = diagnose_lines(list(W["w2-fused-kernel-lock-hang-bigscience-megatron"].lines))
    assert "fused kernels" in d.first.cause if d.first else False
    # the build that finished is no stall; Xid 63 (a row remapping) stays no failure line
    done = [*W["w2-fused-kernel-lock-hang-bigscience-megatron"].lines, ">>> done with compiling and loading fused kernels. Compilation time: 2.4 seconds"]
    assert diagnose_lines(done).first is None
    assert diagnose_lines(["      Xid (PCI:0000:51:00): 63, pid=4549, Row Remapper: New row marked for remapping, reset gpu to activate."]).first is None


def test_w_healthy_excerpts_stay_silent() -> None:
    for e in W.values():
        if not e.expected:
            d = diagnose_lines(list(e.lines))
            assert not any(f.severity == "error" for f in d.findings), e.id
