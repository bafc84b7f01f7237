"""A process group whose processes never pick their GPU: each builds its tensors on
`cuda:{rank}` by name, but `torch.cuda.set_device` is never called, so what uses the
CURRENT device (empty_cache, synchronize, `.cuda()`, NCCL's own state) lands on GPU 0 in
every process (DDP-INIT-BEFORE-SET-DEVICE, the case with no set_device at all)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Final

from ddptui.lint.device_facts import device_string
from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.rules_project import rank_kind
from ddptui.lint.rules_setup import _touches_gpu
from ddptui.lint.script import Script
from ddptui.lint.syntax import const, kwarg, last

# calls that act on the current CUDA device when given no device
_CURRENT: Final = frozenset(
    {"empty_cache", "synchronize", "memory_allocated", "max_memory_allocated",
     "reset_peak_memory_stats", "current_device", "memory_reserved", "mem_get_info"}
)  # fmt: skip
_PICKERS: Final = frozenset({"set_device", "set_device_index"})


def _current_device_use(s: Script, f: Flow, c: ast.Call) -> bool:
    qn = s.call_name(c)
    name = last(qn)
    if qn.startswith("torch.cuda.") and name in _CURRENT and not c.args and not c.keywords:
        return True
    # not a barrier: ProcessGroupNCCL takes the device the process's collectives used
    return isinstance(c.func, ast.Attribute) and name == "cuda" and not (c.args or c.keywords)


def _picks_per_rank_gpu(s: Script, f: Flow) -> tuple[ast.expr, str] | None:
    """The rank a process names its GPU by (`device_ids=[rank]`, `f"cuda:{rank}"`) and
    the code that does, if it names one."""
    for c in f.torch_ddp_calls:
        ids = kwarg(c, "device_ids")
        if isinstance(ids, ast.List | ast.Tuple) and len(ids.elts) == 1:
            rank = ids.elts[0]
            if any(
                isinstance(o, ast.Call) and last(s.call_name(o)) == "current_device"
                for o in [rank, *s.origins(rank)]
            ):
                return None  # `device_ids=[torch.cuda.current_device()]`: set elsewhere
            return rank, f"device_ids=[{ast.unparse(rank)}]"
    for n in dict.fromkeys(n for m in s.modules for n in m.nodes):  # `"cuda:" + str(rank)`
        v = device_string(n)
        if v is not None and rank_kind(s, v) in ("local", "global"):
            return v, ast.unparse(n)
    return None


def _cuda_picker(s: Script, c: ast.Call) -> bool:
    """`torch.cuda.set_device(i)`, not another accelerator's (`torch.xpu.set_device`)."""
    qn = s.call_name(c)
    return last(qn) in _PICKERS and not any(
        f".{other}." in f".{qn}" for other in ("xpu", "npu", "mlu", "hpu", "mps", "musa")
    )


def _bare_cuda(s: Script, c: ast.Call) -> bool:
    """`x.cuda()`: no device given, so the process's current GPU."""
    return (
        isinstance(c.func, ast.Attribute)
        and c.func.attr == "cuda"
        and not c.args
        and not c.keywords
        and not s.call_name(c).startswith("torch.")
    )


def _first_gpu(c: ast.Call) -> bool:
    """`torch.cuda.set_device(opt.gpu_ids[0])`: the first of a list of GPUs for every
    process, not each process's own (a literal `set_device(0)` is DDP-HARDCODED-DEVICE's)."""
    arg = c.args[0] if len(c.args) == 1 and not c.keywords else None
    return (
        isinstance(arg, ast.Subscript)
        and isinstance(arg.slice, ast.Constant)
        and arg.slice.value == 0
    )


def never_set_device(s: Script, f: Flow) -> Iterator[Hit]:
    inits = [c for c in s.calls if last(s.call_name(c)) == "init_process_group"]
    pickers = [c for c in s.calls if _cuda_picker(s, c)]
    if not inits or any(not _first_gpu(c) for c in pickers):
        return
    if f.uses("CUDA_VISIBLE_DEVICES") or any(kwarg(c, "device_id") is not None for c in inits):
        return  # one GPU visible per process, or the group is told its device (a variable
        # named device_id elsewhere, as in Open Catalyst's data_parallel.py, is not that)
    init = inits[0]
    backend = const(kwarg(init, "backend", 0))
    if isinstance(backend, str) and backend != "nccl":
        return  # a literal other backend (a name or a config value may well be nccl)
    picked = _picks_per_rank_gpu(s, f)
    used = next((c for c in s.calls if _current_device_use(s, f, c)), None)
    if picked is None or (used is None and not pickers):
        return
    rank, named = picked
    # jolibrain/joliGEN's train.py before 4954717: the options parser calls
    # `torch.cuda.set_device(opt.gpu_ids[0])`, each spawned worker then wraps on
    # `device_ids=[self.gpu_ids[rank]]`: the fix picks `gpu_ids[rank]` in the worker
    if pickers:
        where = f"{s.module_of(pickers[0]).path}:{pickers[0].lineno}"
        said = (
            f"the only `torch.cuda.set_device` ({where}) picks the first GPU, the same in "
            f"every process: each names its GPU (`{named}`) but its current GPU is the first"
        )
    else:
        said = (
            "no process ever calls `torch.cuda.set_device`: each names its GPU "
            f"(`{named}`) but its current GPU stays 0"
        )
    what = (
        f"`{ast.unparse(used)[:50]}` (line {used.lineno}) and NCCL's own state land"
        if used is not None
        else "NCCL's own state lands"
    )
    # where work lands on the current GPU: a bare `.cuda()` meets the rank's tensors on
    # another GPU there (joliGEN's StyleGAN2 `torch.ones(...).cuda()` in a forward)
    # (of every followed module: a model class picked by name at run time is not reached)
    bare = sorted(
        (
            n
            for n in dict.fromkeys(n for m in s.modules for n in m.nodes)
            if isinstance(n, ast.Call) and _bare_cuda(s, n)
        ),
        key=lambda c: (s.path_of(c), c.lineno),
    )
    yield Hit.at(
        "DDP-INIT-BEFORE-SET-DEVICE",
        init,
        f"{said}, so {what} on GPU 0 in every process",
        also=tuple((c, "placed on the current GPU (0) at") for c in bare[:4]),
        device=ast.unparse(rank),
    )


def _on_current_gpu(f: Flow, c: ast.Call) -> bool:
    """A collective that runs on the current GPU (not `new_group`, which allocates
    nothing, nor a barrier told its device)."""
    name = f.collective(c)
    return bool(name) and name != "dist.new_group" and kwarg(c, "device_ids") is None


def set_device_after_helper(s: Script, f: Flow) -> Iterator[Hit]:
    """`setup()` starts the group and runs a collective (or a `.cuda()`); its caller picks
    the GPU only after `setup()` returns: what setup ran landed on GPU 0 in every process
    (the same-function case is rules_setup.init_before_set_device)."""
    for init in (c for c in s.calls if last(s.call_name(c)) == "init_process_group"):
        helper = s.scope_of(init)
        if not isinstance(helper, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        own = [c for c in own_nodes(helper) if isinstance(c, ast.Call)]
        if kwarg(init, "device_id") is not None or any(
            last(s.call_name(c)) in _PICKERS for c in own
        ):
            continue
        after = [
            c
            for c in own
            if c.lineno > init.lineno and (_on_current_gpu(f, c) or _touches_gpu(s, c))
        ]
        for site in s.call_sites(helper):
            caller = s.scope_of(site)
            picks = [
                c
                for c in own_nodes(caller)
                if isinstance(c, ast.Call)
                and last(s.call_name(c)) in _PICKERS
                and c.lineno > site.lineno
            ]
            earlier = [
                c
                for c in own_nodes(caller)
                if isinstance(c, ast.Call)
                and last(s.call_name(c)) in _PICKERS
                and c.lineno < site.lineno
            ]
            if after and picks and not earlier:
                yield Hit.at(
                    "DDP-INIT-BEFORE-SET-DEVICE",
                    init,
                    (
                        f"`{helper.name}()` starts NCCL and runs `{ast.unparse(after[0])[:50]}` "
                        f"(line {after[0].lineno}); its caller picks the GPU only afterwards "
                        f"(`{ast.unparse(picks[0])}`, line {picks[0].lineno}): on GPU 0 in "
                        "every process"
                    ),
                    device=ast.unparse(picks[0].args[0]) if picks[0].args else "local_rank",
                )
                return


RULES: Final = (never_set_device, set_device_after_helper)
