"""DDP-LOSS-ALL-REDUCED: the loss that is backpropagated went through an all_reduce first.

PoinTr (yuxumin/PoinTr@d6b7f4d, tools/runner.py:95; fixed by reducing a copy for the log
only): `sparse_loss = dist_utils.reduce_tensor(sparse_loss, args)` (a clone, an in-place
`dist.all_reduce`, then `rt /= args.world_size`), and `_loss.backward()` on the sum. The
collective is invisible to autograd, the division is not: each rank backpropagates its
own loss divided by the world size, and DDP then averages the gradients once more. The
model learns with a learning rate world-size times too small, and the figure grows with
the job. Only the differentiable collectives of `torch.distributed.nn` carry gradients;
a reduced value that reaches `backward()` through a plain `torch.distributed` call is
this pitfall. Precision: only names the backward's own expression is built from in that
function, only before the backward, only a project helper that returns the very tensor
it all-reduced (or an in-place `dist.all_reduce(loss)` in that function)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.nodes import calls_in
from ddptui.lint.project import FuncNode
from ddptui.lint.script import Script
from ddptui.lint.syntax import last

ID = "DDP-LOSS-ALL-REDUCED"
_DEPTH = 3  # assignments followed back from the backward's expression


def _plain_all_reduce(s: Script, call: ast.Call) -> bool:
    qn = s.call_name(call)
    return (
        last(qn) == "all_reduce"
        and qn.startswith("torch.distributed.")
        and not qn.startswith("torch.distributed.nn")
    )


def _divides(stmts: list[ast.stmt], name: str, after: int, before: int) -> bool:
    """`name /= x`, `name = name / x` or `name.div_(x)` between the two lines: the
    division autograd records (an all_reduce alone leaves the gradient as it was)."""
    for n in (x for st in stmts for x in ast.walk(st)):
        line = getattr(n, "lineno", 0)
        if not after < line < before:
            continue
        if (
            isinstance(n, ast.AugAssign)
            and isinstance(n.op, ast.Div)
            and isinstance(n.target, ast.Name)
            and n.target.id == name
        ):
            return True
        if (
            isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)
            and isinstance(n.value, ast.BinOp)
            and isinstance(n.value.op, ast.Div)
            and isinstance(n.value.left, ast.Name)
            and n.value.left.id == name
        ):
            return True
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "div_"
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id == name
        ):
            return True
    return False


def _returns_reduced(s: Script, fn: FuncNode) -> bool:
    """`fn` all-reduces a local tensor in place, divides it and returns it."""
    end = max((getattr(n, "lineno", 0) for n in ast.walk(fn)), default=0) + 1
    reduced = {
        c.args[0].id
        for c in calls_in(fn.body)
        if _plain_all_reduce(s, c)
        and c.args
        and isinstance(c.args[0], ast.Name)
        and _divides(fn.body, c.args[0].id, c.lineno, end)
    }
    return bool(reduced) and any(
        isinstance(r, ast.Return) and isinstance(r.value, ast.Name) and r.value.id in reduced
        for r in ast.walk(fn)
    )


def _reduced_sources(
    s: Script, scope: ast.AST, expr: ast.expr, before: int, depth: int = 0
) -> list[ast.Call]:
    """The calls that all-reduced the values `expr` is built from, in `scope` before line
    `before`: an in-place `dist.all_reduce(name)` then a division of it, or `name =
    helper(...)` of a helper that returns what it all-reduced and divided."""
    out: list[ast.Call] = []
    if depth > _DEPTH:
        return out
    body = getattr(scope, "body", [])
    if isinstance(scope, ast.Module):  # the script's own statements, not its functions
        body = [st for st in body if not isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
    for n in {x.id: x for x in ast.walk(expr) if isinstance(x, ast.Name)}.values():
        out += [
            c
            for c in calls_in(body)
            if c.lineno < before
            and _plain_all_reduce(s, c)
            and c.args
            and isinstance(c.args[0], ast.Name)
            and c.args[0].id == n.id
            and _divides(body, n.id, c.lineno, before)
        ]
        for value in s.assigned(scope, n.id):  # type: ignore[arg-type]
            if value.lineno >= before or value is expr:
                continue
            if isinstance(value, ast.Call) and any(
                _returns_reduced(s, fn) for fn in s.callees(value)
            ):
                out.append(value)
            else:
                out += _reduced_sources(s, scope, value, before, depth + 1)
    return out


def loss_all_reduced(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.wrapper_calls:
        return  # no DDP model: the gradients are not averaged a second time
    seen: set[int] = set()
    for call in s.calls:
        if not f.is_backward(call) or not isinstance(call.func, ast.Attribute):
            continue
        scope = s.scope_of(call)
        if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.Module):
            continue  # (a script's `if __name__ == "__main__":` loop too: llm.c's train_gpt2.py)
        for src in _reduced_sources(s, scope, call.func.value, call.lineno):
            if id(src) in seen:
                continue
            seen.add(id(src))
            yield Hit.at(
                ID,
                src,
                f"`{ast.unparse(call.func)}()` (line {call.lineno}) backpropagates a loss "
                f"that `{ast.unparse(src)[:80]}` all-reduced and divided: autograd does not "
                "see the collective, only the division, and DDP averages the gradient again",
                backward_line=call.lineno,
            )


RULES = (loss_all_reduced,)
