"""Round 20, from the misses of blind batch O: the process group started at the top of
the script, and the GPU picked only inside the function the script calls next, after that
function already ran a collective (allenai/OLMo scripts/train.py before PR #720); gradient
accumulation whose optimizer step is gated by a name that holds the modulo test
(`should_step = (i + 1) % accum == 0; if should_step or is_last:`, m2lines/Samudra);
`wandb.log` on every rank of a project that calls `wandb.init` on rank 0 only
(VMarsocci/pangaea-bench's evaluators), and a logger the master alone builds (None on the
other ranks) used by every rank (the FAENet fork of the Open Catalyst trainer)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.lint15 import none_guarded
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.project import FuncNode
from ddptui.lint.rules_io import _referenced
from ddptui.lint.rules_nosync import (
    _accumulation_test,
    _between,
    _guarded_step,
    _optimizer,
    _step_after,
    _unguarded_backward,
)
from ddptui.lint.rules_setup import _touches_gpu
from ddptui.lint.rules_sync import _loop_of
from ddptui.lint.script import Script
from ddptui.lint.syntax import const, kwarg, last


def _own_calls(root: ast.AST) -> list[ast.Call]:
    calls = [n for n in own_nodes(root) if isinstance(n, ast.Call)]
    return sorted(calls, key=lambda c: (c.lineno, c.col_offset))


def _picker(s: Script, c: ast.Call) -> bool:
    qn = s.call_name(c)
    return last(qn) == "set_device" and qn.startswith("torch.cuda")


def _on_gpu(s: Script, f: Flow, c: ast.Call) -> ast.Call | None:
    """The call when it runs a collective or puts something on the current GPU, itself or
    (one level down) through a helper of the project (`barrier()` calling `dist.barrier()`
    when distributed): the inner call."""
    if f.collective(c) or _touches_gpu(s, c):
        return c
    for fn in s.callees(c):
        inner = next((i for i in _own_calls(fn) if f.collective(i) or _touches_gpu(s, i)), None)
        if inner is not None:
            return inner
    return None


def _late_pick(s: Script, f: Flow, fn: FuncNode) -> tuple[ast.Call, ast.Call] | None:
    """In `fn`: a GPU-using call, then the first `torch.cuda.set_device`."""
    seen: ast.Call | None = None
    for c in _own_calls(fn):
        if _picker(s, c):
            return (seen, c) if seen is not None else None
        if seen is None and _on_gpu(s, f, c) is not None:
            seen = c
    return None


def set_device_in_callee(s: Script, f: Flow) -> Iterator[Hit]:
    """`dist.init_process_group("nccl")` at the top of the script, then `main(cfg)`, whose
    first lines run a barrier and only then call `torch.cuda.set_device(local_rank)`: the
    barrier (and NCCL's context) ran on GPU 0 in every process, GPU 0 holds the extra
    memory. An init that `set_device` precedes, or that is told its `device_id`, is fine."""
    for init in (c for c in s.calls if last(s.call_name(c)) == "init_process_group"):
        backend = const(kwarg(init, "backend", 0))
        if (backend is not None and backend != "nccl") or kwarg(init, "device_id") is not None:
            continue
        scope = s.scope_of(init)
        calls = _own_calls(scope)
        if any(_picker(s, c) and c.lineno < init.lineno for c in calls):
            continue
        for c in (c for c in calls if c.lineno > init.lineno):
            if _picker(s, c) or _on_gpu(s, f, c) is not None:
                break  # the same-function case is rules_setup's
            found = next((p for fn in s.callees(c) if (p := _late_pick(s, f, fn))), None)
            if found is None:
                continue
            used, pick = found
            yield Hit.at(
                "DDP-INIT-BEFORE-SET-DEVICE",
                init,
                (
                    f"`{ast.unparse(init)[:60]}` starts NCCL; `{ast.unparse(c)[:40]}` "
                    f"(line {c.lineno}) then runs `{ast.unparse(used)[:40]}` (line "
                    f"{used.lineno}) before `{ast.unparse(pick)[:60]}` (line {pick.lineno}): "
                    "on GPU 0 in every process"
                ),
                device=ast.unparse(pick.args[0]) if pick.args else "local_rank",
            )
            return


def _named_tests(s: Script, loop: ast.AST, test: ast.expr) -> bool:
    """The `if`'s test names a flag the loop assigns from a modulo (accumulation) test."""
    names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
    return any(
        isinstance(a, ast.Assign)
        and _loop_of(s, a) is loop
        and any(isinstance(t, ast.Name) and t.id in names for t in a.targets)
        and _accumulation_test(a.value)
        for a in own_nodes(loop)
    )


def _step_by_flag(s: Script, loop: ast.AST) -> ast.Call | None:
    for n in own_nodes(loop):
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "step"
            and _optimizer(n)
            and _loop_of(s, n) is loop
            and any(
                isinstance(a, ast.If) and _named_tests(s, loop, a.test)
                for a in _between(s, n, loop)
            )
        ):
            return n
    return None


def _flag_if(s: Script, step: ast.Call, loop: ast.AST) -> ast.If:
    return next(
        a
        for a in _between(s, step, loop)
        if isinstance(a, ast.If) and _named_tests(s, loop, a.test)
    )


def accumulation_flag_without_no_sync(s: Script, f: Flow) -> Iterator[Hit]:
    """`should_step = (data_iter_step + 1) % self.gradient_accumulation_steps == 0`, then
    `if should_step or is_last: optimizer.step()`, and `scaled_loss.backward()` on the DDP
    model every micro-batch without `no_sync()`: every micro-batch all-reduces, so the
    accumulation saves no communication (m2lines/Samudra, fixed in ee22927 "DDP no_sync()
    on accumulation microbatches"). The direct `if (i + 1) % n == 0:` is rules_nosync's."""
    if not f.torch_ddp_calls or f.uses("no_sync", "require_backward_grad_sync"):
        return
    for loop in f.training_loops():
        if _guarded_step(s, loop) is not None or _step_after(s, f, loop) is not None:
            continue
        step = _step_by_flag(s, loop)
        backward = _unguarded_backward(s, f, loop) if step is not None else None
        if step is None or backward is None or s.scope_of(backward) is not s.scope_of(loop):
            continue
        yield Hit.at(
            "DDP-NO-SYNC",
            backward,
            (
                f"`{ast.unparse(backward)}` all-reduces gradients on every micro-batch, but "
                f"the optimizer steps only every few (line {step.lineno}, under "
                f"`if {ast.unparse(_flag_if(s, step, loop).test)}:`)"
            ),
            model=ast.unparse(f.torch_ddp_calls[0].args[0])
            if f.torch_ddp_calls[0].args
            else "model",
        )
        return


def _either(s: Script, c: ast.Call) -> bool:
    """Under an `if` whose test is an `or`."""
    return any(
        isinstance(a, ast.If)
        and any(isinstance(n, ast.BoolOp) and isinstance(n.op, ast.Or) for n in ast.walk(a.test))
        for a in s.ancestors(c)
    )


def wandb_log_without_run(s: Script, f: Flow) -> Iterator[Hit]:
    """Every `wandb.init` of the project runs on one rank (`if use_wandb and rank == 0:`),
    but `wandb.log(...)` runs on every rank (`if self.use_wandb:` in an evaluator every
    rank runs): the other ranks have no run to log to, and `wandb.log` raises there
    (VMarsocci/pangaea-bench, fixed in 8f7ac08 by `if self.use_wandb and self.rank == 0:`).
    One finding per function, at its first such call."""
    if not f.distributed:
        return
    inits = [c for c in s.calls if s.call_name(c) == "wandb.init"]
    if not inits or not all(
        (f.guarded(c) or none_guarded(s, f, c)) and not _either(s, c) for c in inits
    ):
        return  # (`rank == 0 or not cfg.wandb.rank_zero_only`: maybe every rank has a run)
    done: set[ast.AST] = set()
    for c in s.calls:
        if s.call_name(c) != "wandb.log" or s.scope_of(c) in done or not _referenced(s, c):
            continue
        if f.guarded(c) or none_guarded(s, f, c) or "wandb.run" in ast.unparse(s.scope_of(c)):
            continue  # (`if wandb.run is not None:` asks for the run itself: OLMo's trainer)
        done.add(s.scope_of(c))
        yield Hit.at(
            "DDP-ALL-RANKS-IO",
            c,
            (
                f"`wandb.log` runs on every rank, but `wandb.init` runs on one only "
                f"({s.path_of(inits[0])}:{inits[0].lineno}): the other ranks have no run "
                "to log to"
            ),
            what="wandb.log",
        )


def _none(v: ast.expr) -> bool:
    return isinstance(v, ast.Constant) and v.value is None


def _asks(s: Script, c: ast.Call, attr: str) -> bool:
    """The call sits under a test of the attribute itself (`if self.logger is not None:`,
    `self.logger and ...`), or its function returns early on one."""
    text = f"self.{attr}"
    if any(
        isinstance(a, ast.If | ast.IfExp | ast.BoolOp | ast.While | ast.Assert)
        and text in ast.unparse(a.test if not isinstance(a, ast.BoolOp) else a)
        for a in s.ancestors(c)
    ):
        return True
    scope = s.scope_of(c)
    return any(
        isinstance(n, ast.If | ast.Assert) and text in ast.unparse(n.test) for n in own_nodes(scope)
    )


def master_only_attr(s: Script, f: Flow) -> Iterator[Hit]:
    """`self.logger = None`, then `if not self.is_debug and distutils.is_master():
    self.logger = registry.get_logger_class(name)(config)`; later `self.logger.log({...})`
    in code every rank runs, under no test of `self.logger` or of the rank: the other ranks
    call a method of None (the FAENet fork of Open Catalyst's BaseTrainer, fixed in
    f1f5e06 by logging "Val. time" on the master only). One finding per attribute."""
    if not f.distributed:
        return
    done: set[tuple[ast.ClassDef | None, str]] = set()
    for c in s.calls:
        fn = c.func
        if not (
            isinstance(fn, ast.Attribute)
            and isinstance(fn.value, ast.Attribute)
            and isinstance(fn.value.value, ast.Name)
            and fn.value.value.id == "self"
        ):
            continue
        attr = fn.value.attr
        key = (s.class_of(c), attr)
        if key in done:
            continue
        values = [v for v, _ in s.self_attr_values(c, attr)]
        made = [v for v in values if not _none(v)]
        if not made or len(made) == len(values):
            continue
        if not all(isinstance(v, ast.Call) and f.local_guard(v) is not None for v in made):
            continue  # (built where the class itself tests the rank; a whole logger class
            # that only rank 0 constructs, as YOLO's, is used on rank 0 only too)
        if f.guarded(c) or none_guarded(s, f, c) or _asks(s, c, attr):
            continue
        done.add(key)
        yield Hit.at(
            "DDP-ALL-RANKS-IO",
            c,
            (
                f"`self.{attr}` is built on one rank only (line {made[0].lineno}) and None "
                f"on the others, but `{ast.unparse(fn)}(...)` runs on every rank"
            ),
            what=f"self.{attr}.{fn.attr}",
        )


RULES: Final = (
    set_device_in_callee,
    accumulation_flag_without_no_sync,
    wandb_log_without_run,
    master_only_attr,
)
