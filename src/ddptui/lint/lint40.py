"""Round 40 (blind batch AD): readings of pitfalls the lint had ids for but missed.

- DDP-DATAPARALLEL: the model is wrapped in `nn.DataParallel` unconditionally and that
  wrapper is then wrapped again in DistributedDataParallel. A DataParallel in a script
  with DDP is usually the single-process fallback arm (rules_model.dataparallel stays
  silent then); here it is on the path every process takes, so each process scatters its
  batch over every visible GPU under DDP (ethnhe/FFB6D 3693964 ffb6d/train_ycb.py, fixed
  in b2495c1 "Fix nn.DataParallel bug", which removes it).
- DDP-SAVE-WRAPPER: `if isinstance(model, nn.DataParallel): model.module.state_dict()
  else: model.state_dict()` unwraps DataParallel only; a DDP wrapper is no DataParallel,
  so it takes the plain arm and its `module.` keys are saved (same FFB6D commit,
  `checkpoint_state`; the fix adds DistributedDataParallel to the test).
- DDP-INIT-BEFORE-SET-DEVICE: the group is started in one method (`__init__`) and another
  method runs a collective (`dist.barrier()`) just before its `torch.cuda.set_device`,
  the only one of the project: that collective builds NCCL's communicator on GPU 0 in
  every process (SegmentationBLWX/sssegmentation 7a21b63 ssseg/train.py, fixed in
  17b9e4a "fix unexpected GPU occupied errors", which moves the barrier after it).
- DDP-HARDCODED-DEVICE: an `mp.spawn` worker starts an NCCL group with the rank it was
  given, and nothing in the project ever picks a GPU per process (no set_device, no
  `cuda:{rank}`, no device_ids, no CUDA_VISIBLE_DEVICES): its CUDA work, handed to a
  library engine or `.cuda()`, lands on GPU 0 in every process (fredzzhang/upt 0dd6d79
  main.py, fixed in 967cfe3 "Fix incorrect device", which adds set_device(rank)).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddptui.lint.flow import Flow
from ddptui.lint.lint48 import rank_placed
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.rules_set_device import _cuda_picker, _on_current_gpu, _picks_per_rank_gpu
from ddptui.lint.script import Script
from ddptui.lint.syntax import const, kwarg, last


def _unconditional(s: Script, node: ast.AST) -> bool:
    """Run on every path through its function: under no `if`, `try`, loop or `x if c
    else y` of that function."""
    for a in s.ancestors(node):
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.Module):
            return True
        if isinstance(a, ast.If | ast.IfExp | ast.Try | ast.For | ast.While | ast.With):
            return False
    return True


def _is_torch_dp(s: Script, call: ast.Call) -> bool:
    qn = s.call_name(call)
    return last(qn) == "DataParallel" and qn.startswith("torch")


def dataparallel_under_ddp(s: Script, f: Flow) -> Iterator[Hit]:
    for ddp in f.torch_ddp_calls:
        if not ddp.args:
            continue
        for o in s.origins(ddp.args[0]):
            if (
                isinstance(o, ast.Call)
                and _is_torch_dp(s, o)
                and s.scope_of(o) is s.scope_of(ddp)
                and o.lineno < ddp.lineno
                and _unconditional(s, o)
            ):
                yield Hit.at(
                    "DDP-DATAPARALLEL",
                    o,
                    (
                        f"`{ast.unparse(o)[:40]}` is wrapped again in DistributedDataParallel "
                        f"(line {ddp.lineno}): every process scatters its batch over all its "
                        "visible GPUs inside DDP"
                    ),
                    severity="error",
                    model=ast.unparse(o.args[0]) if o.args else "model",
                )
                break


def _type_names(expr: ast.expr) -> list[str]:
    elts = expr.elts if isinstance(expr, ast.Tuple | ast.List) else [expr]
    return [ast.unparse(e).rsplit(".", 1)[-1] for e in elts]


def dataparallel_only_test(s: Script, node: ast.AST) -> ast.expr | None:
    """`node` is on the plain arm of `if isinstance(m, nn.DataParallel):` whose types name
    DataParallel and not DistributedDataParallel (a DDP wrapper takes this arm): that test,
    where the fix adds DistributedDataParallel."""
    child = node
    for a in s.ancestors(node):
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef):
            return None
        if isinstance(a, ast.If | ast.IfExp):
            in_body = child is a.body or (isinstance(a.body, list) and child in a.body)
            test = a.test
            if (
                not in_body
                and child is not test
                and isinstance(test, ast.Call)
                and isinstance(test.func, ast.Name)
                and test.func.id == "isinstance"
                and len(test.args) == 2
            ):
                names = _type_names(test.args[1])
                ddp = any(n in ("DistributedDataParallel", "DDP") for n in names)
                return test if "DataParallel" in names and not ddp else None
        child = a
    return None


def collective_before_set_device(s: Script, f: Flow) -> Iterator[Hit]:
    inits = [c for c in s.calls if last(s.call_name(c)) == "init_process_group"]
    pickers = [c for c in s.calls if _cuda_picker(s, c)]
    if len(inits) != 1 or not pickers or kwarg(inits[0], "device_id") is not None:
        return
    init = inits[0]
    backend = const(kwarg(init, "backend", 0))
    if isinstance(backend, str) and backend != "nccl":
        return
    scope = s.scope_of(pickers[0])
    if s.scope_of(init) is scope or any(s.scope_of(p) is not scope for p in pickers):
        return  # the same function: rules_setup.init_before_set_device
    first = min(p.lineno for p in pickers)
    before = sorted(
        (
            c
            for c in own_nodes(scope)
            if isinstance(c, ast.Call) and c.lineno < first and _on_current_gpu(f, c)
        ),
        key=lambda c: c.lineno,
    )
    if before:
        c = before[-1]
        yield Hit.at(
            "DDP-INIT-BEFORE-SET-DEVICE",
            c,
            (
                f"`{ast.unparse(c)[:40]}` runs before `torch.cuda.set_device` (line {first}), "
                f"the only one, with the NCCL group started at line {init.lineno}: its "
                "communicator is built on GPU 0 in every process"
            ),
            device=ast.unparse(pickers[0].args[0]) if pickers[0].args else "local_rank",
        )


def _spawned(s: Script, fn: ast.FunctionDef) -> bool:
    """`fn` is the function `torch.multiprocessing.spawn` starts (its first argument)."""
    return any(
        last(s.call_name(c)) in ("spawn", "start_processes")
        and "multiprocessing" in s.call_name(c)
        and c.args
        and isinstance(c.args[0], ast.Name)
        and c.args[0].id == fn.name
        for c in s.calls
    )


def _uses_cuda(s: Script) -> bool:
    """Some call of the project puts work on a GPU (`.cuda()`, `relocate_to_cuda(x)`,
    `torch.cuda.*` beyond asking what there is)."""
    for c in s.calls:
        name = last(s.call_name(c))
        if "cuda" in name.lower() or (name == "to" and c.args and const(c.args[0]) == "cuda"):
            return True
    return False


def spawned_never_pick_gpu(s: Script, f: Flow) -> Iterator[Hit]:
    inits = [c for c in s.calls if last(s.call_name(c)) == "init_process_group"]
    if len(inits) != 1 or any(_cuda_picker(s, c) for c in s.calls):
        return
    init = inits[0]
    if const(kwarg(init, "backend", 0)) != "nccl" or kwarg(init, "device_id") is not None:
        return  # a literal NCCL group: its processes need a GPU each
    if f.uses("CUDA_VISIBLE_DEVICES") or _picks_per_rank_gpu(s, f) is not None:
        return  # one GPU visible per process, or named per rank (rules_set_device)
    if rank_placed(s, f):
        return  # work placed by `.cuda(rank)`: its bare `.cuda()` are lint48's
    worker = s.scope_of(init)
    rank = kwarg(init, "rank")
    if not (
        isinstance(worker, ast.FunctionDef)
        and _spawned(s, worker)
        and worker.args.args
        and isinstance(rank, ast.Name)
        and rank.id == worker.args.args[0].arg
        and _uses_cuda(s)
    ):
        return
    yield Hit.at(
        "DDP-HARDCODED-DEVICE",
        init,
        (
            f"the `mp.spawn` worker `{worker.name}({rank.id}, ...)` starts NCCL but never "
            f"picks its GPU (no `torch.cuda.set_device({rank.id})`): every process works "
            "on GPU 0"
        ),
        severity="warning",  # a library it hands the model to may still pick one
        device=rank.id,
    )


RULES = (dataparallel_under_ddp, collective_before_set_device, spawned_never_pick_gpu)
