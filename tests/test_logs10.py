"""Round logs10 (issue 15): the misses of blind batch G (tests/fixtures/corpus/round5g.yaml)
read from the printing program's own message, each checked on the real excerpt quoted from
the public thread and on the neighbours it must leave alone."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from corpus_excerpts import excerpt, ids, lead

from ddptui.logs.diagnose import diagnose_lines


def test_nccl_missing_its_kernel_symbol_is_a_build_without_this_gpu() -> None:
    """pytorch#152077: NCCL 2.14.3 (torch 2.0, CUDA 11.8) on an RTX 5090 (sm_120) fails
    with Cuda failure 'named symbol not found': NCCL's enqueue.cc looks up its own kernels,
    and a module with no code for the device has none (nccl#1372: NCCL built for sm_80 only,
    run on H100).  Other CUDA failures inside NCCL stay the generic BOOT-CUDA."""
    d = excerpt("i-old-build-5090-pytorch-152077")
    assert lead(d) == "CUDA-NO-KERNEL", ids(d)
    other = diagnose_lines(["node1:2345:2400 [0] NCCL WARN Cuda failure 'out of memory'"], "oom")
    assert lead(other) != "CUDA-NO-KERNEL", ids(other)


def test_accelerate_without_machine_rank_is_the_static_rendezvous_missing_node_rank() -> None:
    """accelerate#2096: accelerate launch on each Slurm node without --machine_rank fails in
    its own prepare_multi_gpu_env at int(args.machine_rank); the frame names the field, the
    TypeError alone does not."""
    d = excerpt("j-launcher-machine-rank-none-accelerate-2096")
    assert lead(d) == "TORCHRUN-STATIC-ARGS", ids(d)
    assert "--machine_rank" in d.first.fix
    bare = diagnose_lines(["TypeError: int() argument must be a string, a bytes-like object or a number, not 'NoneType'"], "bare")
    assert "TORCHRUN-STATIC-ARGS" not in ids(bare)


def test_lightning_seeing_one_gpu_of_several_requested_is_the_slurm_task_binding() -> None:
    """lightning#16828: with --gpus-per-task each Slurm task sees only GPU [0] while the
    Trainer lists the node's 8; Lightning's device parser says so and the log was called
    clean.  A request that fits (or one GPU asked of a machine with none) is not that."""
    d = excerpt("j-slurm-gpus-per-task-lightning-16828")
    assert lead(d) == "LAUNCH-LIGHTNING-SLURM", ids(d)
    assert "--gpus-per-task" in d.first.cause
    single = diagnose_lines(["MisconfigurationException('You requested gpu: [1]\\n But your machine only has: [0]')"], "single")
    assert "LAUNCH-LIGHTNING-SLURM" not in ids(single)
