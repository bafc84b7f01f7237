"""DDP-HARDCODED-DEVICE, from a miss of blind batch AG1: a project that never calls
`torch.cuda.set_device` and names each process's GPU by its rank where it places work
(`torch.randn(n, d).cuda(self.rank)`, `.to(rank)`), except at one place that calls a bare
`.cuda()`: the current GPU is still 0 there, so that tensor lands on GPU 0 in every
process and meets the rank's tensors on another GPU (lucidrains/lightweight-gan@c192ab2,
lightweight_gan/lightweight_gan.py:70, `gradient_penalty`'s `torch.ones(t.size()).cuda()`;
fixed in 353a427, which gives it the rank's device).

Said at the bare `.cuda()`, not at the process start: the rest of the code is placed
right. A bare `.cuda()` in a project that names its GPU in `device_ids=[rank]` or
`f"cuda:{rank}"` is rules_set_device.never_set_device's; one that names no GPU per rank
anywhere is lint40.spawned_never_pick_gpu's.

Round 17 (blind AH2: two audio projects' featurizers): a `.to(d)` where `d` is
`torch.device("cuda")` with no index, in such a project, whether it places work with
`.to(rank)` or names the GPU in `device_ids=[rank]`: said at the first such move."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.rules_set_device import _bare_cuda, _cuda_picker, _picks_per_rank_gpu
from ddptui.lint.script import Script
from ddptui.lint.syntax import const, kwarg, last


def _mode_arm(s: Script, node: ast.AST) -> bool:
    """Under an `if` on the run's mode (`if is_ddp:`, `if world_size > 1:`): the arm may
    be the single-process one (the test rules_reach.never_sets_device uses; not imported
    from there, which imports this module's importers)."""
    return any(
        isinstance(a, ast.If)
        and any(w in ast.unparse(a.test).lower() for w in ("distributed", "world_size", "ddp"))
        for a in s.ancestors(node)
    )


def rank_placed(s: Script, f: Flow) -> list[ast.Call]:
    """`x.cuda(rank)` / `x.to(rank)`: work put on the GPU named by the process's rank."""
    return [
        c
        for c in s.calls
        if isinstance(c.func, ast.Attribute)
        and c.func.attr in ("cuda", "to")
        and len(c.args) == 1
        and not c.keywords
        and f.rank_valued(c.args[0])
    ]


def _no_current_gpu(s: Script, f: Flow) -> bool:
    """An NCCL group (or an unnamed backend) whose processes never pick a current GPU."""
    inits = [c for c in s.calls if last(s.call_name(c)) == "init_process_group"]
    if not inits or any(_cuda_picker(s, c) for c in s.calls):
        return False
    if f.uses("CUDA_VISIBLE_DEVICES") or any(kwarg(c, "device_id") is not None for c in inits):
        return False
    backend = const(kwarg(inits[0], "backend", 0))
    return not (isinstance(backend, str) and backend != "nccl")


def bare_cuda_beside_rank_gpu(s: Script, f: Flow) -> Iterator[Hit]:
    if not _no_current_gpu(s, f) or _picks_per_rank_gpu(s, f) is not None:
        return
    placed = rank_placed(s, f)
    homes = {s.module_of(c).key for c in placed}
    bare = [
        c
        for c in s.calls
        if _bare_cuda(s, c)
        and s.module_of(c).key in homes
        and not f.guarded(c)
        and not _mode_arm(s, c)
        and (
            not isinstance(fn := s.scope_of(c), ast.FunctionDef | ast.AsyncFunctionDef)
            or bool(s.call_sites(fn))
        )
    ]
    if not bare:
        return
    first, *more = sorted(bare, key=lambda c: (s.path_of(c), c.lineno))
    ref = placed[0]
    yield Hit(
        "DDP-HARDCODED-DEVICE",
        first.func.end_lineno or first.lineno,  # the line of `.cuda()` in a chained call
        (
            f"`{ast.unparse(first)[:50]}` goes to the current GPU, which no process ever sets "
            f"(no `torch.cuda.set_device`): GPU 0 in every process, while the rest is placed "
            f"on the rank's GPU (`{ast.unparse(ref)[:40]}`, line {ref.lineno})"
        ),
        {"seen": "a bare `.cuda()` beside `.cuda(rank)`, the current GPU never set"},
        "warning",  # a bare .cuda() may run only in a single-GPU arm
        first,
        tuple((m, "also placed on the current GPU (0) at") for m in more[:4]),
    )


def _plain_cuda(s: Script, expr: ast.expr) -> ast.expr | None:
    """What makes `expr` the device "cuda" with no index (`torch.device("cuda")`, the
    string "cuda"): the current GPU, whatever the rank."""
    for o in [expr, *s.origins(expr)]:
        if const(o) == "cuda":
            return o
        if (
            isinstance(o, ast.Call)
            and s.call_name(o) == "torch.device"
            and len(o.args) == 1
            and not o.keywords
            and const(o.args[0]) == "cuda"
        ):
            return o
    return None


def cuda_device_beside_rank_gpu(s: Script, f: Flow) -> Iterator[Hit]:
    """`self.device = torch.device("cuda")`, then `self.featurizer.to(self.device)`, in a
    project whose processes never set their current GPU but place the model by rank
    (`self.model.to(local_rank)`, `device_ids=[local_rank]`): "cuda" is GPU 0 in every
    process (yeyupiaoling/VoiceprintRecognition-Pytorch and AudioClassification-Pytorch,
    their trainers before the fix that gave the featurizer the rank's device; blind AH2)."""
    if not _no_current_gpu(s, f):
        return
    placed = rank_placed(s, f)
    picked = _picks_per_rank_gpu(s, f)
    if not placed and picked is None:
        return
    moved = [
        (c, dev)
        for c in s.calls
        if isinstance(c.func, ast.Attribute)
        and c.func.attr == "to"
        and len(c.args) == 1
        and not c.keywords
        and (dev := _plain_cuda(s, c.args[0])) is not None
        and not f.guarded(c)
        and not _mode_arm(s, c)
    ]
    if not moved:
        return
    moved.sort(key=lambda m: (s.path_of(m[0]), m[0].lineno))
    (first, dev), *more = moved
    ref = picked[1] if picked is not None else ast.unparse(placed[0])[:40]
    yield Hit(
        "DDP-HARDCODED-DEVICE",
        first.lineno,
        (
            f"`{ast.unparse(first)[:50]}` moves to `{ast.unparse(dev)[:30]}` (line {dev.lineno}), "
            f"the current GPU, which no process ever sets (no `torch.cuda.set_device`): GPU 0 "
            f"in every process, while the rest is placed on the rank's GPU (`{ref}`)"
        ),
        {"seen": 'a device "cuda" with no index beside the rank\'s GPU, the current GPU never set'},
        "warning",  # the "cuda" device may serve a single-GPU arm only
        first,
        tuple((m, "also moved to the current GPU (0) at") for m, _ in more[:4]),
    )


RULES = (bare_cuda_beside_rank_gpu, cuda_device_beside_rank_gpu)
