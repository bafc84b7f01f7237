"""Gradient accumulation that all-reduces every micro-batch (9): a backward on every
micro-step of a DDP model with an optimizer step only every few, no `no_sync`, and the
sync flag set after the forward that reads it. Split from rules_sync."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddptui.lint.flow import Flow, ident
from ddptui.lint.lint24 import both_ways
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.rules_sync import _exits_in, _loop_of
from ddptui.lint.script import Script


def no_sync(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.torch_ddp_calls:
        return
    if f.uses("require_backward_grad_sync"):
        yield from _late_sync_flag(s, f)
    if f.uses("no_sync", "require_backward_grad_sync"):
        return
    for loop in f.training_loops():
        step = _guarded_step(s, loop) or _step_after(s, f, loop)
        if step is None:
            continue
        backward = _unguarded_backward(s, f, loop)
        if backward is not None:
            # a backward in a helper (`loss_backwards(...)`) is shared: the accumulation
            # loop that calls it is where `no_sync` goes, once per such loop
            helper = s.scope_of(backward) is not s.scope_of(loop)
            yield Hit.at(
                "DDP-NO-SYNC",
                loop if helper else backward,
                (
                    f"`{ast.unparse(backward)}`"
                    + (f" ({s.path_of(backward)}:{backward.lineno})" if helper else "")
                    + " all-reduces gradients on every micro-batch, but "
                    f"the optimizer steps only every few (line {step.lineno})"
                ),
                model=ast.unparse(f.torch_ddp_calls[0].args[0])
                if f.torch_ddp_calls[0].args
                else "model",
            )
            if not helper:
                return


def _late_sync_flag(s: Script, f: Flow) -> Iterator[Hit]:
    """`model.require_backward_grad_sync = last_micro` set after `model(x)` in the same
    loop: DDP reads the flag in forward, so each micro-step syncs as the previous one
    asked (build-nanogpt PR #30)."""
    for n in s.nodes:
        if not isinstance(n, ast.Assign) or len(n.targets) != 1:
            continue
        tgt = n.targets[0]
        if not (isinstance(tgt, ast.Attribute) and tgt.attr == "require_backward_grad_sync"):
            continue
        loop = _loop_of(s, n)
        if not isinstance(loop, ast.For | ast.AsyncFor | ast.While):
            continue
        model = ast.unparse(tgt.value)
        forward = next(
            (
                c
                for c in own_nodes(loop)
                if isinstance(c, ast.Call)
                and ast.unparse(c.func) == model
                and _loop_of(s, c) is loop
                and c.lineno < n.lineno
            ),
            None,
        )
        if forward is not None and f.is_ddp_value(tgt.value):
            yield Hit.at(
                "DDP-NO-SYNC",
                n,
                (
                    f"`{ast.unparse(n)}` is set after the forward `{ast.unparse(forward)}` "
                    f"(line {forward.lineno}): DDP reads it in forward, so every micro-step "
                    "syncs as the one before asked"
                ),
                model=model,
            )


def _guarded_step(s: Script, loop: ast.AST) -> ast.Call | None:
    """An optimizer step in the loop that runs every few iterations, directly or in a
    project function called under the accumulation test."""
    for n in own_nodes(loop):
        if not (isinstance(n, ast.Call) and _loop_of(s, n) is loop):
            continue
        if not _accumulation_guard(s, n, loop):
            continue
        if isinstance(n.func, ast.Attribute) and n.func.attr == "step":
            return n
        if any(_steps(s, fn, set()) for fn in s.callees(n)):
            return n
    return None


def _steps(s: Script, root: ast.AST, seen: set[ast.AST]) -> bool:
    """Whether `root` calls an optimizer's `.step()`, itself or through project functions."""
    for n in own_nodes(root):
        if isinstance(n, ast.Call):
            if isinstance(n.func, ast.Attribute) and n.func.attr == "step" and _optimizer(n):
                return True
            for fn in s.callees(n):
                if fn not in seen and len(seen) < 16:
                    seen.add(fn)
                    if _steps(s, fn, seen):
                        return True
    return False


def _optimizer(call: ast.Call) -> bool:
    recv = ast.unparse(call.func.value).lower() if isinstance(call.func, ast.Attribute) else ""
    return ("opt" in recv or "scaler" in recv) and "sched" not in recv


def _step_after(s: Script, f: Flow, loop: ast.AST) -> ast.Call | None:
    """A loop over micro-batches that never steps, followed in its enclosing body by the
    optimizer step (`for micro in ...: loss.backward()` then `optimizer.step()`)."""
    if _steps(s, loop, set()):
        return None
    parent = s.parents.get(loop)
    for field in ("body", "orelse"):
        stmts = getattr(parent, field, None)
        if isinstance(stmts, list) and loop in stmts:
            for st in stmts[stmts.index(loop) + 1 :]:
                for n in [st, *own_nodes(st)]:
                    if (
                        isinstance(n, ast.Call)
                        and isinstance(n.func, ast.Attribute)
                        and n.func.attr == "step"
                        and _optimizer(n)
                    ):
                        return n
    return None


def _unguarded_backward(s: Script, f: Flow, loop: ast.AST) -> ast.Call | None:
    """The backward pass every iteration of the loop runs (not under an `if`): in the
    loop, or in a project function it calls."""
    for n in own_nodes(loop):
        if (
            isinstance(n, ast.Call)
            and _loop_of(s, n) is loop
            and not any(isinstance(a, ast.If) and not both_ways(f, a) for a in _between(s, n, loop))
        ):
            if f.is_backward(n):
                return n
            for fn in s.callees(n):
                inner = _first_backward(s, f, fn, set())
                if inner is not None:
                    return inner
    return None


def _first_backward(s: Script, f: Flow, fn: ast.AST, seen: set[ast.AST]) -> ast.Call | None:
    for n in own_nodes(fn):
        if not isinstance(n, ast.Call) or any(
            isinstance(a, ast.For | ast.While) or (isinstance(a, ast.If) and not _both(f, a))
            for a in _between(s, n, fn)
        ):
            continue
        if f.is_backward(n):
            return n
        for g in s.callees(n):
            if g not in seen and len(seen) < 16:
                seen.add(g)
                found = _first_backward(s, f, g, seen)
                if found is not None:
                    return found
    return None


def _both(f: Flow, node: ast.If) -> bool:
    """Both branches of the `if` run a backward (`if fp16: scaled.backward() else:
    loss.backward()`): it runs either way."""
    return all(
        any(isinstance(n, ast.Call) and f.is_backward(n) for st in part for n in ast.walk(st))
        for part in (node.body, node.orelse)
    )


def _between(s: Script, node: ast.AST, top: ast.AST) -> list[ast.AST]:
    out = []
    for a in s.ancestors(node):
        if a is top:
            break
        out.append(a)
    return out


def _accumulation_test(test: ast.expr) -> bool:
    return any(
        (isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod))
        or "accum" in (ident(n) or "").lower()
        for n in ast.walk(test)
        if isinstance(n, ast.BinOp | ast.Name | ast.Attribute)
    )


def _accumulation_guard(s: Script, node: ast.AST, loop: ast.AST) -> bool:
    """The optimizer step runs every few iterations: under `if (i + 1) % n == 0:`, or
    after an `if i % n != 0: continue`."""
    if any(isinstance(a, ast.If) and _accumulation_test(a.test) for a in _between(s, node, loop)):
        return True
    return any(
        isinstance(n, ast.If)
        and n.lineno < getattr(node, "lineno", 0)
        and _accumulation_test(n.test)
        and any(isinstance(x, ast.Continue) for x in _exits_in(n.body))
        and _loop_of(s, n) is loop
        for n in own_nodes(loop)
    )


RULES = (no_sync,)
