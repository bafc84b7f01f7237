"""DDP-RANK-ONLY-NAME for a value that is None on every rank but the main one, from a miss of
blind batch AQ1 (NVIDIA/tacotron2 @ 3973b3e, train.py: `prepare_directories_and_logger`
returns a `Tacotron2Logger` when `rank == 0` and None otherwise; `validate()` then calls
`logger.log_validation(...)` on every rank: AttributeError: 'NoneType' object has no
attribute 'log_validation' on all ranks but 0, at the first validation; fixed in 6e43055,
"val logger on gpu 0 only").

The reading: a name whose value is None on the other side of a rank test (`x = A() if rank
== 0 else None`; `if rank == 0: x = A() else: x = None`; a project function that returns
either; a parameter every call site of which hands it such a value), used through an
attribute (`x.log(...)`, `x.add_scalar`) where no rank test guards the use (nor a caller
that runs on some ranks only), no test of the name itself (`if x:`, `if x is not None`,
`x and x.f()`) encloses it, and no `try` catches AttributeError. Said at the first such use,
the None as its second place."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddptui.lint.flow import Flow
from ddptui.lint.lint50 import caught, rank_arm, tested_around
from ddptui.lint.model import Hit
from ddptui.lint.reach import Scope
from ddptui.lint.script import Script

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_MAX_DEPTH = 3
_CATCHES = frozenset({"AttributeError", "Exception", "BaseException"})
Found = tuple[ast.expr, ast.expr]  # (the rank test, the None)


def _none(e: ast.AST | None) -> bool:
    return isinstance(e, ast.Constant) and e.value is None


def _arms_none(s: Script, f: Flow, scope: Scope, name: str) -> Found | None:
    """`if <rank test>: name = A() else: name = None` in `scope`: the test and the None."""
    values = s.assigned(scope, name)
    nones = [v for v in values if _none(v)]
    others = [v for v in values if not _none(v)]
    for none in nones:
        arm = rank_arm(f, none)
        for other in others:
            other_arm = rank_arm(f, other)
            if arm and other_arm and arm[0] is other_arm[0] and arm[1] != other_arm[1]:
                return arm[0].test, none
            after = _rank_arm_after(s, f, none, other, name)
            if after is not None:
                return after.test, none
    return None


def _rank_arm_after(
    s: Script, f: Flow, none: ast.expr, other: ast.expr, name: str
) -> ast.If | None:
    """`name = None`, then `if <rank test>: name = A()` with no other arm that binds it:
    None on the ranks the test leaves out."""
    stmt = s.parents.get(none)
    for g in s.ancestors(other):
        if isinstance(g, _FUNCS):
            return None
        if not (isinstance(g, ast.If) and f.is_rank_test(g.test)):
            continue
        inside = {id(n) for n in ast.walk(g)}
        if id(none) in inside or stmt is None or getattr(stmt, "lineno", 0) >= g.lineno:
            return None
        if s.scope_of(g) is not s.scope_of(none):
            return None
        binds_else = any(
            isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
            for st in g.orelse
            for n in ast.walk(st)
        )
        return None if binds_else else g
    return None


def _name_none(s: Script, f: Flow, expr: ast.Name, depth: int) -> Found | None:
    """Only a name given nothing else (the two arms, or one value): the reading does not
    follow the order of statements, so a later binding on every rank would be missed."""
    scope = s.scope_of(expr)
    values = s.assigned(scope, expr.id)
    if len(values) == 2:
        return _arms_none(s, f, scope, expr.id)
    if len(values) == 1:
        return rank_none(s, f, values[0], depth + 1)
    if values or not isinstance(scope, _FUNCS):
        return None
    # a parameter: every call site hands it such a value
    args = list(s.param_args(scope, expr.id))
    each = [rank_none(s, f, a, depth + 1) for a in args]
    return each[0] if args and all(x is not None for x in each) else None


def _returned_none(s: Script, f: Flow, call: ast.Call, depth: int) -> Found | None:
    """A project function with one `return` of a value, that value such a value."""
    for fn in s.callees(call):
        returns = [
            r
            for r in ast.walk(fn)
            if isinstance(r, ast.Return) and r.value is not None and s.scope_of(r) is fn
        ]
        if len(returns) == 1 and returns[0].value is not None:
            found = rank_none(s, f, returns[0].value, depth + 1)
            if found is not None:
                return found
    return None


def rank_none(s: Script, f: Flow, expr: ast.expr, depth: int = 0) -> Found | None:
    """(the rank test, the None) when `expr`'s value is None on the ranks a rank test
    leaves out."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(expr, ast.IfExp):
        if f.is_rank_test(expr.test) and _none(expr.orelse) != _none(expr.body):
            return expr.test, expr.orelse if _none(expr.orelse) else expr.body
        return None
    if isinstance(expr, ast.Name):
        return _name_none(s, f, expr, depth)
    if isinstance(expr, ast.Call):
        return _returned_none(s, f, expr, depth)
    return None


def _tested(s: Script, use: ast.Name) -> bool:
    """A test of the name itself encloses the use (`if logger:`, `if logger is not None:`,
    `logger and logger.log()`, `logger.log() if logger else None`)."""
    def mentions(test: ast.expr) -> bool:
        return any(isinstance(n, ast.Name) and n.id == use.id for n in ast.walk(test))

    if tested_around(s, use, mentions):
        return True
    # an early exit before the use (`if logger is None: return`) in the same function
    fn = s.scope_of(use)
    return any(
        isinstance(n, ast.If)
        and n.lineno < use.lineno
        and any(isinstance(x, ast.Name) and x.id == use.id for x in ast.walk(n.test))
        and any(isinstance(x, ast.Return | ast.Raise) for x in n.body)
        for n in (ast.walk(fn) if isinstance(fn, _FUNCS) else ())
    )


def none_off_rank0_used(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.inits_group:
        return
    said: set[tuple[ast.AST, str]] = set()
    # a name's value does not depend on where in its scope it is read (the reading does not
    # follow statement order): asked once per scope and name, and first, since the checks
    # of the use below walk the function (a 251-module project spent 19 s in them)
    values: dict[tuple[ast.AST, str], Found | None] = {}
    for node in s.nodes:
        if not (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Load)
            and isinstance(node.value, ast.Name)
        ):
            continue
        use = node.value
        scope = s.scope_of(use)
        if (scope, use.id) in said:
            continue
        if (scope, use.id) not in values:
            values[(scope, use.id)] = rank_none(s, f, use)
        found = values[(scope, use.id)]
        if found is None or f.guarded(use) or _tested(s, use):
            continue
        if caught(s, use, scope, _CATCHES):
            continue
        test, none = found
        said.add((scope, use.id))
        yield Hit.at(
            "DDP-RANK-ONLY-NAME",
            node,
            (
                f"`{use.id}` is None wherever `{ast.unparse(test)}` does not hold (line "
                f"{none.lineno}), yet `{ast.unparse(node)}` runs on every rank: "
                f"AttributeError: 'NoneType' object has no attribute '{node.attr}' on those "
                "ranks"
            ),
            also=((none, "None on the other ranks at"),),
            name=use.id,
            test=ast.unparse(test),
            read_line=node.lineno,
        )


RULES = (none_off_rank0_used,)
