"""Which names in a loop hold values that differ between ranks: the batch and what is
computed from it, the model's output, the clock; not a step counter (`range`, through a
name and a progress bar), not what an all_reduce made equal."""

from __future__ import annotations

import ast
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.nodes import own_nodes
from ddptui.lint.script import Script
from ddptui.lint.syntax import last

_CLOCKS: Final = frozenset({"time", "monotonic", "perf_counter", "time_ns", "process_time"})
_EQUALISERS: Final = frozenset(
    {
        "all_reduce",
        "broadcast",
        "broadcast_object_list",
        "all_gather",
        "all_gather_object",
        "all_gather_into_tensor",
    }
)


def rank_tainted(s: Script, f: Flow, loop: ast.For | ast.AsyncFor | ast.While) -> set[str]:
    """Names whose value differs between ranks inside the loop: the batch (not the
    enumerate index), and what is computed from it, the model or the clock."""
    names: set[str] = set()
    if isinstance(loop, ast.For | ast.AsyncFor):
        target = loop.target
        it = loop.iter
        if (
            isinstance(it, ast.Call)
            and last(s.call_name(it)) == "enumerate"
            and isinstance(target, ast.Tuple)
            and target.elts
        ):
            target = ast.Tuple(elts=target.elts[1:], ctx=ast.Store())
            it = it.args[0] if it.args else it
        if not _counts(s, it):
            names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    # what an all_reduce or broadcast has made equal on every rank is not rank-dependent
    synced = {
        c.args[0].id
        for c in own_nodes(loop)
        if isinstance(c, ast.Call)
        and c.args
        and isinstance(c.args[0], ast.Name)
        and (f.collective(c) or "").rsplit(".", 1)[-1] in _EQUALISERS
    }
    assigns = [
        n for n in own_nodes(loop) if isinstance(n, ast.Assign | ast.AugAssign | ast.AnnAssign)
    ]
    for _ in range(4):
        for a in assigns:
            if a.value is not None and depends(s, f, a.value, names):
                targets = a.targets if isinstance(a, ast.Assign) else [a.target]
                names |= {_stored(t, n) for t in targets for n in _bound(t)}
        names -= synced
    return names


def _bound(target: ast.expr) -> list[ast.expr]:
    """What an assignment target binds: names (of a tuple too), or one attribute or item
    (`self.step = ...` binds `self.step`, not `self`)."""
    if isinstance(target, ast.Tuple | ast.List):
        return [n for e in target.elts for n in _bound(e)]
    if isinstance(target, ast.Starred):
        return _bound(target.value)
    return [target]


def _stored(_target: ast.expr, n: ast.expr) -> str:
    return n.id if isinstance(n, ast.Name) else ast.unparse(n)


def _counts(s: Script, it: ast.expr) -> bool:
    """The loop counts (`range(n)`, also through a name and a progress bar:
    `pbar = range(n)`, `pbar = tqdm(pbar)`): its index is the same on every rank."""
    origins = [it] if isinstance(it, ast.Call) else s.origins(it)
    seen = 0
    for origin in origins:
        o = origin
        while isinstance(o, ast.Call) and o.args and last(s.call_name(o)) in ("tqdm", "iter"):
            o = o.args[0]
        if isinstance(o, ast.Name) and isinstance(it, ast.Name) and o.id == it.id:
            continue  # `pbar = tqdm(pbar)`: the value it had
        if not (isinstance(o, ast.Call) and last(s.call_name(o)) == "range"):
            return False
        seen += 1
    return seen > 0


def depends(s: Script, f: Flow, expr: ast.AST, names: set[str]) -> bool:
    for n in [expr, *ast.walk(expr)]:
        if isinstance(n, ast.Name) and n.id in names:
            return True
        if isinstance(n, ast.Attribute | ast.Subscript) and ast.unparse(n) in names:
            return True
        if isinstance(n, ast.Call) and (
            last(s.call_name(n)) in _CLOCKS and "time" in s.call_name(n)
        ):
            return True
        if isinstance(n, ast.Call) and f.wrapper_calls and f.is_wrapped_value(n.func):
            return True
    return False
