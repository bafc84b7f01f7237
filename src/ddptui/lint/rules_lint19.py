"""DDP-NOT-APPLIED, from a miss of blind batch N: the wrappers `accelerator.prepare` (or
DistributedDataParallel) returned are replaced by their `.module` through a project
helper before the training loop (kohya-ss/sd-scripts before PR #989:
`unet, network = train_util.transform_models_if_DDP([unet, network])`, whose body
returns `model.module if type(model) == DDP else model` for each): training then runs on
the bare modules and no gradient is all-reduced.

DDP-WRAPPER-ATTR, from the same batch: a loop over a list of the models `prepare`
returned (`text_encoders = [text_encoder1, text_encoder2]`, then `for tokenizer,
token_ids, text_encoder in zip(tokenizers, token_ids_list, text_encoders):
text_encoder.text_model...`, sd-scripts train_textual_inversion.py): the loop variable
is the wrapper too."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ddptui.lint.flow import Flow
from ddptui.lint.lint19 import rank_only_bound
from ddptui.lint.model import Hit
from ddptui.lint.rules_frameworks import prepared_models
from ddptui.lint.rules_project import _WRAPPER_API
from ddptui.lint.rules_wrapper import _MODE_WORDS
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


def _prepared_lists(s: Script, f: Flow) -> dict[tuple[ast.AST, str], tuple[int, ast.Call]]:
    """(scope, name) -> (line, prepare call) of a list literal of prepared models."""
    prepared: dict[tuple[ast.AST, str], ast.Call] = {}
    for prep, name, _ in prepared_models(s, f):
        prepared[(s.scope_of(prep), name.id)] = prep
    out: dict[tuple[ast.AST, str], tuple[int, ast.Call]] = {}
    for st in s.nodes:
        if not (isinstance(st, ast.Assign) and isinstance(st.value, ast.List | ast.Tuple)):
            continue
        scope = s.scope_of(st)
        preps = [
            prepared[(scope, e.id)]
            for e in st.value.elts
            if isinstance(e, ast.Name)
            and (scope, e.id) in prepared
            and prepared[(scope, e.id)].lineno < st.lineno
        ]
        if preps and len(preps) == len(st.value.elts):
            for t in st.targets:
                if isinstance(t, ast.Name):
                    out[(scope, t.id)] = (st.lineno, preps[0])
    return out


def _loop_names(loop: ast.For, lists: set[str]) -> list[str]:
    """The loop variables that take the lists' elements (`zip(a, b, models)` too)."""
    it, target = loop.iter, loop.target
    if isinstance(it, ast.Name) and it.id in lists and isinstance(target, ast.Name):
        return [target.id]
    if (
        isinstance(it, ast.Call)
        and isinstance(it.func, ast.Name)
        and it.func.id == "zip"
        and isinstance(target, ast.Tuple)
        and len(target.elts) == len(it.args)
    ):
        return [
            t.id
            for a, t in zip(it.args, target.elts, strict=True)
            if isinstance(a, ast.Name) and a.id in lists and isinstance(t, ast.Name)
        ]
    return []


def _mode_test(s: Script, node: ast.AST) -> bool:
    """Under a test of the run's mode (as rules_wrapper's), where
    `accelerator.sync_gradients` (the end of an accumulation window, on every mode) is
    no such test."""
    child = node
    for a in s.ancestors(node):
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef):
            return False
        if isinstance(a, ast.If | ast.IfExp) and a.test is not child:
            text = re.sub(r"[\w.]*\.sync_gradients", "", ast.unparse(a.test))
            if _MODE_WORDS.search(text):
                return True
        child = a
    return False


def prepared_list_attr(s: Script, f: Flow) -> Iterator[Hit]:
    lists = _prepared_lists(s, f)
    said: set[tuple[str, str]] = set()
    for loop in [n for n in s.nodes if isinstance(n, ast.For)]:
        scope = s.scope_of(loop)
        here = {n for (sc, n), (line, _) in lists.items() if sc is scope and line < loop.lineno}
        for var in _loop_names(loop, here):
            prep = next(p for (sc, n), (_, p) in lists.items() if sc is scope and n in here)
            rebinds = sorted(
                n.lineno
                for n in ast.walk(scope)
                if isinstance(n, ast.For | ast.Assign)
                and n is not loop
                and n.lineno > loop.lineno
                and var in [x.id for x in ast.walk(n.target if isinstance(n, ast.For) else n)
                            if isinstance(x, ast.Name) and isinstance(x.ctx, ast.Store)]
            )
            end = rebinds[0] if rebinds else 10**9
            for n in sorted(
                (
                    n
                    for n in ast.walk(scope)
                    if isinstance(n, ast.Attribute)
                    and isinstance(n.ctx, ast.Load)
                    and isinstance(n.value, ast.Name)
                    and n.value.id == var
                    and loop.lineno < n.lineno < end
                ),
                key=lambda n: (n.lineno, n.col_offset),
            ):
                if (
                    (var, n.attr) in said
                    or n.attr.startswith("_")
                    or n.attr in _WRAPPER_API
                    or _mode_test(s, n)
                ):
                    continue
                said.add((var, n.attr))
                yield Hit.at(
                    "DDP-WRAPPER-ATTR",
                    n,
                    (
                        f"`{ast.unparse(n)}` reads `{n.attr}` from `{var}`, an element of a list "
                        f"of the models `accelerator.prepare` (line {prep.lineno}) returns in "
                        f"DDP on a multi-GPU run: use `accelerator.unwrap_model({var}).{n.attr}`"
                    ),
                    model=var,
                    attr=n.attr,
                )


RULES = (unwrapped_after_wrap, prepared_list_attr, rank_only_bound)
