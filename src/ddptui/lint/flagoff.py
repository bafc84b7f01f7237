"""A collective a helper keeps behind a flag its caller turns off (round 19, from a false
error of blind batch O on a correct project): `save_state_dict(..., synchronize=False)`,
whose `if synchronize: barrier()` then never runs (allenai/OLMo checkpoint.py).  The data
flow (flow.py) asks it while it walks a call, so it imports nothing of the flow."""

from __future__ import annotations

import ast
from collections.abc import Iterable

from ddptui.lint.project import FuncNode
from ddptui.lint.script import Script

_MISSING = object()


def arg_for(s: Script, call: ast.Call, func: FuncNode, name: str) -> object:
    """The expression `call` gives parameter `name` of `func` (its default when left
    out); _MISSING when the code cannot tell (`*args`, `**kwargs`)."""
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    params = [a.arg for a in func.args.posonlyargs + func.args.args]
    if name not in params:
        return _kwonly_default(call, func, name)
    skip = 1 if params[:1] in (["self"], ["cls"]) and s.class_of(func) is not None else 0
    index = params.index(name) - skip
    if any(isinstance(a, ast.Starred) for a in call.args):
        return _MISSING
    if 0 <= index < len(call.args):
        return call.args[index]
    defaults = func.args.defaults
    at = params.index(name) - (len(params) - len(defaults))
    if any(kw.arg is None for kw in call.keywords) or not 0 <= at < len(defaults):
        return _MISSING
    return defaults[at]


def _kwonly_default(call: ast.Call, func: FuncNode, name: str) -> object:
    kwonly = [a.arg for a in func.args.kwonlyargs]
    if name not in kwonly or any(kw.arg is None for kw in call.keywords):
        return _MISSING
    default = func.args.kw_defaults[kwonly.index(name)]
    return default if default is not None else _MISSING


def _flag_test(test: ast.expr) -> tuple[str, bool] | None:
    """`if synchronize:` -> ("synchronize", True); `if not synchronize:` -> (.., False)."""
    if isinstance(test, ast.Name):
        return test.id, True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = test.operand
        if isinstance(inner, ast.Name):
            return inner.id, False
    return None


def flag_guarded(func: FuncNode) -> bool:
    """Some `if <parameter>:` (or `if not <parameter>:`) in the function's body."""
    params = {a.arg for a in func.args.posonlyargs + func.args.args + func.args.kwonlyargs}
    return any(
        isinstance(n, ast.If) and (flag := _flag_test(n.test)) is not None and flag[0] in params
        for n in ast.walk(func)
    )


def switched_off(s: Script, call: ast.Call, func: FuncNode, syncs: Iterable[ast.AST]) -> bool:
    """Every collective `func` runs sits under `if <parameter>:` and this call passes a
    literal that skips that branch: `save_state_dict(..., synchronize=False)`, whose
    `if synchronize: barrier()` then never runs (allenai/OLMo checkpoint.py)."""
    found = False
    for node in syncs:
        found = True
        if not _off(s, call, func, node):
            return False
    return found


def _off(s: Script, call: ast.Call, func: FuncNode, node: ast.AST) -> bool:
    child = node
    for a in s.ancestors(node):
        if a is func:
            return False
        if isinstance(a, ast.If) and child is not a.test:
            flag = _flag_test(a.test)
            if flag is not None:
                given = arg_for(s, call, func, flag[0])
                if isinstance(given, ast.Constant):
                    runs_when = flag[1] if child in a.body else not flag[1]
                    if bool(given.value) is not runs_when:
                        return True
        child = a
    return False
