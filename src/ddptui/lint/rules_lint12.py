"""Round 12 (blind batch I): no_sync() around backward() alone; a distributed training
script that imports DistributedDataParallel and never wraps the model; torch.load of a
checkpoint on every rank without map_location."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.lint15 import cuda_arm_unmapped, returned_checkpoint
from ddptui.lint.model import Hit
from ddptui.lint.script import Script
from ddptui.lint.syntax import kwarg, last


def nosync_backward_only(s: Script, f: Flow) -> Iterator[Hit]:
    """`with model.no_sync(): loss.backward()` with the forward outside: DDP decides in
    forward() whether this step's backward all-reduces, so the context is a no-op and
    every micro-step still syncs (baidu-baige/LoongForge PR #163)."""
    for w in s.nodes:
        if not isinstance(w, ast.With | ast.AsyncWith):
            continue
        ctx = next(
            (
                i.context_expr
                for i in w.items
                if isinstance(i.context_expr, ast.Call)
                and isinstance(i.context_expr.func, ast.Attribute)
                and i.context_expr.func.attr == "no_sync"
            ),
            None,
        )
        if ctx is None or not w.body or _arms_sync_by_hand(s, w):
            continue
        if all(
            isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and f.is_backward(st.value)
            for st in w.body
        ):
            model = ast.unparse(ctx.func.value)  # type: ignore[attr-defined]
            yield Hit.at(
                "DDP-NO-SYNC",
                w,
                (
                    f"`with {ast.unparse(ctx)}:` holds only `{ast.unparse(w.body[0])}`: the "
                    f"forward of `{model}` ran outside it, so DDP already armed this "
                    "micro-step's all-reduce and every micro-step still syncs"
                ),
                model=model,
            )


def _arms_sync_by_hand(s: Script, node: ast.AST) -> bool:
    """The file sets the reducer's flag itself (`ddp.require_backward_grad_sync = False`
    before a captured forward): the forward is gated there, not by the context."""
    return any(
        isinstance(n, ast.Attribute) and n.attr == "require_backward_grad_sync"
        for n in ast.walk(s.module_of(node).tree)
    )


_TRAINERS: Final = frozenset(
    {"prepare", "DistributedOptimizer", "initialize", "fully_shard", "Trainer", "launch"}
)
OPTIMIZER: Final = re.compile(r"(SGD|Adam\w*|RMSprop|Adagrad|Lamb|LAMB|Optimizer)$")


def imported_never_wrapped(s: Script, f: Flow) -> Iterator[Hit]:
    """`init_process_group` and a DistributedSampler feed a loop that calls backward(),
    `DistributedDataParallel` is imported, and no model is ever wrapped (no DDP, FSDP,
    engine or launcher, no gradient all-reduce by hand): each rank trains its own replica
    (Azure-Samples/azure-ml-federated-learning PNEUMONIA run.py before 94009ce)."""
    if not f.inits_group or f.wrapper_calls or f.uses(*_TRAINERS):
        return
    if not any(
        v.endswith("DistributedDataParallel") for m in s.modules for v in m.aliases.values()
    ):
        return
    if not f.uses("DistributedSampler") or not any(f.is_backward(c) for c in s.calls):
        return
    if any(f.collective(c) and "grad" in ast.unparse(c).lower() for c in s.calls):
        return  # gradients averaged by hand
    models = [
        a.func.value
        for c in s.calls
        if OPTIMIZER.search(last(s.call_name(c)))
        for a in ast.walk(c)
        if isinstance(a, ast.Call)
        and isinstance(a.func, ast.Attribute)
        and a.func.attr == "parameters"
    ]
    for model in models:
        name = ast.unparse(model)
        moved = next(
            (
                c
                for c in s.calls
                if isinstance(c.func, ast.Attribute)
                and c.func.attr in ("to", "cuda")
                and ast.unparse(c.func.value) == name
                and s.scope_of(c) is s.scope_of(model)
            ),
            None,
        )
        yield Hit.at(
            "DDP-NOT-APPLIED",
            moved or model,
            (
                f"the group is initialised and the data sharded, but `{name}` is never wrapped "
                "in DistributedDataParallel (imported, never called): no gradient is "
                "all-reduced"
            ),
            why=(
                f"`DistributedDataParallel` is imported and never called: `{name}` trains "
                "unwrapped on every rank."
            ),
        )
        return


def load_without_map_location(s: Script, f: Flow) -> Iterator[Hit]:
    """`torch.load(path)` run by every process of a distributed job: tensors saved from
    a GPU come back on that GPU (cuda:0), whatever `set_device` said, so every rank puts
    a copy on GPU 0 (yangxy/GPEN 47f01e1). Said once per function: each loader the run
    reaches is a place to fix (PyTorch-StudioGAN's ckpt.py loads in three); the
    function's other loads are its second places."""
    if not f.distributed:
        return
    by_scope: dict[ast.AST, list[ast.Call]] = {}
    for c in s.calls:
        if s.call_name(c) != "torch.load" or len(c.args) > 1:
            continue
        if kwarg(c, "map_location") is not None or any(k.arg is None for k in c.keywords):
            continue
        path = kwarg(c, "f", 0)
        if path is None or f.is_rank_expr(path) or f.guarded(c):
            continue
        gpu_arm = cuda_arm_unmapped(s, c)
        if not (
            gpu_arm or _checkpoint_dict(s, c) or returned_checkpoint(s, c) or _optimizer_state(s, c)
        ):
            continue
        if _mapped_in_other_arm(s, c) and not gpu_arm:
            continue
        by_scope.setdefault(s.scope_of(c), []).append(c)
    for c, *more in by_scope.values():
        path = kwarg(c, "f", 0) or c
        yield Hit.at(
            "DDP-LOAD-MAP-LOCATION",
            c,
            (
                f"`{ast.unparse(c)[:70]}` runs on every rank without map_location: a "
                "checkpoint saved from cuda:0 is loaded onto GPU 0 by every process"
            ),
            # the function's other such loads (another arm's checkpoint: microsoft/mt-dnn
            # train.py, BERT and RoBERTa init checkpoints) need map_location too
            also=tuple((m, "also loaded without map_location at") for m in more),
            path=ast.unparse(path),
        )


def _mapped_in_other_arm(s: Script, load: ast.Call) -> bool:
    """`if args.gpu is None: torch.load(path) else: torch.load(path, map_location=loc)`
    (pytorch/examples imagenet): the unmapped load is the author's single-process arm."""
    child: ast.AST = load
    for a in s.ancestors(load):
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.Module):
            return False
        if isinstance(a, ast.If) and child is not a.test:
            other = a.orelse if any(child is st for st in a.body) else a.body
            if any(
                isinstance(n, ast.Call)
                and s.call_name(n) == "torch.load"
                and kwarg(n, "map_location") is not None
                for st in other
                for n in ast.walk(st)
            ):
                return True
        child = a
    return False


_OPTIMIZER_NAME: Final = re.compile(r"optim", re.I)


def _optimizer_state(s: Script, load: ast.Call) -> bool:
    """`optimizer.load_state_dict(torch.load(path))`: an optimizer's state (momenta) is
    only ever saved from training, as the GPU held it, unlike a file of weights that may
    have been saved from the CPU (cszn/KAIR 41b782c models/model_base.py `load_optimizer`;
    the fix maps it to the current device)."""
    parent = s.parents.get(load)
    if not (
        isinstance(parent, ast.Call)
        and isinstance(parent.func, ast.Attribute)
        and parent.func.attr == "load_state_dict"
    ):
        return False
    owner = parent.func.value
    return bool(_OPTIMIZER_NAME.search(ast.unparse(owner))) or any(
        isinstance(o, ast.Call) and OPTIMIZER.search(last(s.call_name(o))) for o in s.origins(owner)
    )


def _checkpoint_dict(s: Script, load: ast.Call) -> bool:
    """`ckpt = torch.load(path)` then `ckpt["g"]`, `ckpt["optimizer"]`: a training
    checkpoint (weights and optimizer state as the GPU held them), not a file of weights
    handed straight to one module. Also `torch.load(path)["model_state_dict"]` read in
    place (fredzzhang/upt 0dd6d79 detector.py, fixed in b56ca1f "Load pre-trained weights
    to cpu")."""
    parent = s.parents.get(load)
    if (
        isinstance(parent, ast.Subscript)
        and parent.value is load
        and isinstance(parent.slice, ast.Constant)
        and isinstance(parent.slice.value, str)
    ):
        return True
    if not (
        isinstance(parent, ast.Assign)
        and len(parent.targets) == 1
        and isinstance(parent.targets[0], ast.Name)
    ):
        return False
    name = parent.targets[0].id
    return any(
        isinstance(n, ast.Subscript)
        and isinstance(n.value, ast.Name)
        and n.value.id == name
        and isinstance(n.slice, ast.Constant)
        and isinstance(n.slice.value, str)
        for n in ast.walk(s.scope_of(load))
    )


RULES = (nosync_backward_only, imported_never_wrapped, load_without_map_location)
