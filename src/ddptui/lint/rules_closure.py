"""DDP-WRAPPER-ATTR in a closure that runs after the wrap, from a miss of blind batch
AH2 (neulab/awesome-align, awesome_align/run_train.py before its fix): `train()` defines
`def collate(examples): ... model.get_aligned_word(...)`, hands it to the DataLoader as
`collate_fn=collate`, and only then rebinds `model = DistributedDataParallel(model)`.
The closure reads `model` when the loader calls it, inside the epoch loop: by then the
name holds the wrapper, which has no `get_aligned_word`, and every batch raises under
torchrun (one GPU never wraps, so it never shows).

The reading: a function (or lambda) nested in the function that wraps, reading
`name.attr` where `name` is free in it (no parameter, no binding of its own), `name` is
bound to the DDP wrapper in the enclosing function and never rebound after it, and the
closure is not only called before the wrap (passed as a value anywhere, or called after
it). Attributes the wrapper answers itself and reads under a test that tells the wrapper
from the model stay silent, as in the same-function rule (rules_project.wrapper_attr)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.rules_project import _WRAPPER_API, _checks_wrapper
from ddptui.lint.script import Script

_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


_Nested = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda


def _binds(fn: _Nested, name: str) -> bool:
    """`name` is a parameter of `fn` or bound in its own body (then not free)."""
    args = fn.args
    params = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    if any(a is not None and a.arg == name for a in params):
        return True
    return any(
        (isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store | ast.Del))
        or (isinstance(n, ast.Nonlocal | ast.Global) and name in n.names)
        for n in own_nodes(fn)
    )


def _runs_after(scope: ast.AST, fn: _Nested, wrap_line: int) -> bool:
    """The closure may run after line `wrap_line`: it is passed on as a value (a loader's
    `collate_fn`, a hook, a callback) or called after it. A lambda is always a value."""
    if isinstance(fn, ast.Lambda):
        return True
    calls = {
        id(n.func)
        for n in own_nodes(scope)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    return any(
        isinstance(n, ast.Name)
        and n.id == fn.name
        and isinstance(n.ctx, ast.Load)
        and (id(n) not in calls or n.lineno > wrap_line)
        for n in own_nodes(scope)
    )


def wrapper_attr_in_closure(s: Script, f: Flow) -> Iterator[Hit]:
    for call in f.ddp_calls:
        assign = s.parents.get(call)
        if not (
            isinstance(assign, ast.Assign)
            and len(assign.targets) == 1
            and isinstance(assign.targets[0], ast.Name)
        ):
            continue
        name = assign.targets[0].id
        scope = s.scope_of(call)
        if isinstance(scope, ast.Module):
            continue
        stores = [
            n
            for n in own_nodes(scope)
            if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
        ]
        if any(n.lineno > assign.lineno for n in stores):
            continue  # `model = model.module` later: what the closure sees is unclear
        said: set[str] = set()
        for fn in (n for n in own_nodes(scope) if isinstance(n, _NESTED)):
            if fn.lineno > assign.lineno or _binds(fn, name):
                continue  # defined after the wrap: the same-function readings apply
            if not _runs_after(scope, fn, assign.lineno):
                continue
            for n in sorted(
                (x for x in ast.walk(fn) if isinstance(x, ast.Attribute)),
                key=lambda x: (x.lineno, x.col_offset),
            ):
                if (
                    isinstance(n.ctx, ast.Load)
                    and isinstance(n.value, ast.Name)
                    and n.value.id == name
                    and n.attr not in said
                    and not n.attr.startswith("_")
                    and n.attr not in _WRAPPER_API
                    and not _checks_wrapper(s, n)
                ):
                    said.add(n.attr)
                    yield Hit.at(
                        "DDP-WRAPPER-ATTR",
                        n,
                        (
                            f"`{ast.unparse(n)}` runs when the nested function is called, "
                            f"after line {assign.lineno} made `{name}` the DDP wrapper: it has "
                            f"no `{n.attr}` (the model is `{name}.module`)"
                        ),
                        model=name,
                        attr=n.attr,
                    )


RULES = (wrapper_attr_in_closure,)
