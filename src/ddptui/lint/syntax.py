"""Small readings of one syntax node that nearly every rule makes: the argument a call
gives for a parameter, the value of a literal, the last part of a dotted name. Their
own module so that rules, the flow facts and Script itself share them without one of
them being the others' home. Pure core: the `ast` module only."""

from __future__ import annotations

import ast


def kwarg(call: ast.Call, name: str, position: int | None = None) -> ast.expr | None:
    """The argument given for `name`: by keyword, else at `position` (a `*args` there
    is no argument); None when it is not given."""
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    if position is not None and position < len(call.args):
        arg = call.args[position]
        return None if isinstance(arg, ast.Starred) else arg
    return None


def const(expr: ast.expr | None) -> object:
    """A literal's value (`-1` included); `...` (Ellipsis) when it is not a literal."""
    if (
        isinstance(expr, ast.UnaryOp)
        and isinstance(expr.op, ast.USub)
        and isinstance(expr.operand, ast.Constant)
        and isinstance(expr.operand.value, int | float)
        and not isinstance(expr.operand.value, bool)
    ):
        return -expr.operand.value
    return expr.value if isinstance(expr, ast.Constant) else ...


def last(qualname: str) -> str:
    """The last part of a dotted name: `torch.save` -> `save`."""
    return qualname.rsplit(".", 1)[-1]


def target_names(target: ast.expr) -> set[str]:
    """The names an assignment, `for` or `with` target binds (`i, (a, b)` -> i, a, b)."""
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
