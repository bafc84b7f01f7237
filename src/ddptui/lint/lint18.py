"""Round 18, from the misses of blind batch M: where the fix goes when the code reaches a
pitfall through a name (a norm class a global rebinds, the last of several seeding
calls), and a model `accelerator.prepare` wrapped but left out of `accumulate()`."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.reach import Scope
from ddptui.lint.rules_frameworks import prepared_models
from ddptui.lint.script import Script

_BN_NAME: Final = re.compile(r"(Lazy)?BatchNorm[123]d$")


def bn_rebinding(s: Script, f: Flow, call: ast.Call) -> ast.AST | None:
    """`norm_class(ch)` builds the layers, `norm_class = nn.BatchNorm2d` at module level,
    and the function that builds and wraps the model rebinds it (`global norm_class;
    norm_class = nn.BatchNorm2d if ... else ...`, lucidrains/lightweight-gan): the user
    picks the layer there, so the SyncBatchNorm choice goes on that line."""
    if not isinstance(call.func, ast.Name):
        return None
    name = call.func.id
    found: list[tuple[bool, ast.Assign]] = []
    for n in s.module_of(call).nodes:
        if not isinstance(n, ast.Global) or name not in n.names:
            continue
        fn = s.scope_of(n)
        wraps = any(s.scope_of(d) is fn for d in f.ddp_calls)
        found += [
            (wraps, st)
            for st in ast.walk(fn)
            if isinstance(st, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in st.targets)
            and _names_bn(st.value)
        ]
    found.sort(key=lambda p: not p[0])
    return found[0][1] if found else None


def _names_bn(e: ast.expr) -> bool:
    return any(
        isinstance(n, ast.Attribute | ast.Name)
        and _BN_NAME.match(n.attr if isinstance(n, ast.Attribute) else n.id) is not None
        for n in ast.walk(e)
    )


def accumulate_left_out(s: Script, f: Flow) -> Iterator[Hit]:
    """`accelerator.accumulate(models)` puts only the models it is given under no_sync;
    another model the same `accelerator.prepare(...)` wrapped in DDP and run in the
    block all-reduces its gradients on every micro-step (huggingface/diffusers' SD3
    LoRA script extended the list with `text_encoder_one` but not `text_encoder_two`)."""
    groups: dict[ast.Call, list[str]] = {}
    for prep, name, _ in prepared_models(s, f):
        groups.setdefault(prep, []).append(name.id)
    if not groups:
        return
    accs = [c for c in s.calls if _accumulate(c, groups)]
    for c in accs:
        scope = s.scope_of(c)
        block = s.parents.get(s.parents.get(c, c))
        if not isinstance(block, ast.With | ast.AsyncWith):
            continue
        given, fills = _given(s, scope, c)
        everywhere = {n for a in accs if s.scope_of(a) is scope for n in _given(s, scope, a)[0]}
        used = {n.id for st in block.body for n in ast.walk(st) if isinstance(n, ast.Name)}
        for prep, names in groups.items():
            if s.scope_of(prep) is not scope or not given & set(names):
                continue
            for missing in names:
                if missing in everywhere or missing not in used:
                    continue
                at = max(
                    (x for x in fills if x.lineno < c.lineno), key=lambda x: x.lineno, default=c
                )
                yield Hit.at(
                    "DDP-NO-SYNC",
                    at,
                    (
                        f"`{missing}` comes back in DDP from `accelerator.prepare` (line "
                        f"{prep.lineno}) and runs in `with {ast.unparse(c)}:` (line "
                        f"{c.lineno}), which is not given it: its gradients are all-reduced "
                        "on every micro-step of the accumulation window"
                    ),
                    model=missing,
                )


def _accumulate(c: ast.Call, groups: dict[ast.Call, list[str]]) -> bool:
    """`accelerator.accumulate(...)` on the accelerator that prepared the models."""
    receivers = {ast.unparse(p.func.value) for p in groups if isinstance(p.func, ast.Attribute)}
    return (
        isinstance(c.func, ast.Attribute)
        and c.func.attr == "accumulate"
        and ast.unparse(c.func.value) in receivers
        and bool(c.args)
    )


def _given(s: Script, scope: Scope, c: ast.Call) -> tuple[set[str], list[ast.expr]]:
    """The model names `accumulate` gets (a name, a list, a list name filled with
    `.append`/`.extend` in the function) and the statements that fill that list."""
    names: set[str] = set()
    fills: list[ast.expr] = []
    for arg in c.args:
        if isinstance(arg, ast.List | ast.Tuple):
            lists: list[ast.List | ast.Tuple] = [arg]
        elif isinstance(arg, ast.Name):
            lists = [v for v in s.assigned(scope, arg.id) if isinstance(v, ast.List | ast.Tuple)]
            if not lists:  # one model
                names.add(arg.id)
                continue
        else:
            continue
        for lst in lists:
            names |= {e.id for e in lst.elts if isinstance(e, ast.Name)}
            fills.append(lst)
        if not isinstance(arg, ast.Name):
            continue
        for n in ast.walk(scope):
            if (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr in ("append", "extend")
                and isinstance(n.func.value, ast.Name)
                and n.func.value.id == arg.id
                and n.args
            ):
                added = n.args[0]
                elts = added.elts if isinstance(added, ast.List | ast.Tuple) else [added]
                names |= {e.id for e in elts if isinstance(e, ast.Name)}
                fills.append(n)
    return names, fills


RULES = (accumulate_left_out,)


def last_entry_anchor(s: Script, node: ast.AST, depth: int = 0) -> ast.AST:
    """Like `Script.entry_anchor`, but of several calls in one function of the entry
    file the last: a seeding helper run once per loader (`DpLoaderSet(validation...)`,
    then `DpLoaderSet(training...)`, deepmd-kit) leaves the global generators as the
    last call seeded them, so that is the stream training draws from."""
    if s.module_of(node) is s.entry or depth > 4:
        return node
    scope = s.scope_of(node)
    if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        return node
    sites = s.call_sites(scope)
    here = [c for c in sites if s.module_of(c) is s.entry]
    if here:  # the last of those in the function of the first
        first = s.scope_of(here[0])
        return max((c for c in here if s.scope_of(c) is first), key=lambda c: c.lineno)
    for site in sites:
        found = last_entry_anchor(s, site, depth + 1)
        if found is not site:
            return found
    return node
