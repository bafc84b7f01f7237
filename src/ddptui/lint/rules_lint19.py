"""DDP-NOT-APPLIED, from a miss of blind batch N: the wrappers `accelerator.prepare` (or
DistributedDataParallel) returned are replaced by their `.module` through a project
helper before the training loop (kohya-ss/sd-scripts before PR #989:
`unet, network = train_util.transform_models_if_DDP([unet, network])`, whose body
returns `model.module if type(model) == DDP else model` for each): training then runs on
the bare modules and no gradient is all-reduced."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.rules_frameworks import prepared_models
from ddptui.lint.script import Script


def _names(expr: ast.expr) -> list[str]:
    if isinstance(expr, ast.Name):
        return [expr.id]
    if isinstance(expr, ast.Tuple | ast.List):
        return [n for e in expr.elts for n in _names(e)]
    return []


def _returns_module(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(
        isinstance(r, ast.Return)
        and r.value is not None
        and any(isinstance(a, ast.Attribute) and a.attr == "module" for a in ast.walk(r.value))
        for r in ast.walk(func)
    )


def _wrapped(s: Script, f: Flow) -> dict[tuple[ast.AST, str], int]:
    """(scope, name) -> the line where the name took a DDP wrapper (or a list of them)."""
    out: dict[tuple[ast.AST, str], int] = {}
    for prep, name, _ in prepared_models(s, f):
        out[(s.scope_of(prep), name.id)] = prep.lineno
    for c in f.ddp_calls:
        parent = s.parents.get(c)
        if isinstance(parent, ast.Assign):
            for t in parent.targets:
                for n in _names(t):
                    out[(s.scope_of(c), n)] = c.lineno
    for st in s.nodes:
        if isinstance(st, ast.Assign) and isinstance(st.value, ast.List | ast.Tuple):
            scope = s.scope_of(st)
            held = [
                n for n in _names(st.value) if out.get((scope, n), st.lineno) < st.lineno
            ]
            if held:
                for t in st.targets:
                    if isinstance(t, ast.Name):
                        out[(scope, t.id)] = st.lineno
    return out


def unwrapped_after_wrap(s: Script, f: Flow) -> Iterator[Hit]:
    wrapped = _wrapped(s, f)
    if not wrapped:
        return
    loops = f.training_loops()
    for st in s.nodes:
        if not (isinstance(st, ast.Assign) and isinstance(st.value, ast.Call)):
            continue
        call = st.value
        if not any(_returns_module(fn) for fn in s.callees(call)):
            continue
        scope = s.scope_of(st)
        given = [n for a in call.args for n in _names(a)]
        rebound = {n for t in st.targets for n in _names(t)}
        hit = [
            n
            for n in given
            if n in rebound and wrapped.get((scope, n), st.lineno) < st.lineno
        ]
        if not hit or not any(
            s.scope_of(loop) is scope and loop.lineno > st.lineno for loop in loops
        ):
            continue
        yield Hit.at(
            "DDP-NOT-APPLIED",
            st,
            (
                f"`{ast.unparse(call.func)}(...)` replaces the DDP wrapper{'s' if len(hit) > 1 else ''} "
                f"of {', '.join(f'`{n}`' for n in hit)} by the bare module before training: "
                "the loop below trains without DDP, and no gradient is all-reduced"
            ),
            model=hit[0],
        )


RULES = (unwrapped_after_wrap,)
