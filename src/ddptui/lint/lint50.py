"""DDP-RANK-ONLY-NAME, from a miss of blind batch AG2 (RVC-Project's training script,
infer/modules/train/train.py@57dde51 and before its fix 9b3f210): inside the per-rank
function `logger` is bound only under `if rank == 0:` and then read on every rank
(`logger.info(net_g.module.load_state_dict(...))`). An assignment makes the name local
to the whole function, so on every other rank the read raises UnboundLocalError (a
module-level `logger` of the same name does not help), and the job dies as soon as it
is launched on more than one GPU; one GPU never shows it.

The reading, kept narrow: in one function, every binding of a plain name lies in the
same arm of one `if` on the rank (`rank == 0`, `is_main_process()`...), the other arm
does not leave (return, raise, continue, break), the name is no parameter and not
declared global or nonlocal, and it is read after that `if`, in the same function, at
a place no rank test guards (nor a function called on some ranks only), outside a
`try` that catches the error. Attributes are left alone: a class may give `self.writer`
a default elsewhere."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.script import Script

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_LEAVES = (ast.Return, ast.Raise, ast.Continue, ast.Break)
_CATCHES = frozenset({"NameError", "UnboundLocalError", "Exception", "BaseException"})
_INTROSPECT = frozenset({"locals", "vars", "globals", "exec", "eval"})


def _bound_names(node: ast.AST) -> list[str]:
    """The names a node binds in its function's scope."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
        return [node.id]
    if isinstance(node, ast.alias):
        return [(node.asname or node.name).split(".")[0]]
    if isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
        return [node.name]
    if isinstance(node, ast.MatchMapping) and node.rest:
        return [node.rest]
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    return []


def _in_comprehension(s: Script, node: ast.AST, fn: ast.AST) -> bool:
    for a in s.ancestors(node):
        if a is fn:
            return False
        if isinstance(
            a, ast.comprehension | ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp
        ):
            return True
    return False


def rank_arm(f: Flow, node: ast.AST) -> tuple[ast.If, str] | None:
    """The rank `if` whose body (or else) holds `node`, and which arm (rules_rank_attr
    asks it too)."""
    guard = f.local_guard(node)
    if not isinstance(guard, ast.If):
        return None
    for name in ("body", "orelse"):
        if any(node is n for st in getattr(guard, name) for n in ast.walk(st)):
            return guard, name
    return None


def tested_around(s: Script, node: ast.AST, mentions: Callable[[ast.expr], bool]) -> bool:
    """Within its function, `node` sits under an `if`/`while`/conditional expression whose
    test `mentions` holds for (`if self.writer:`, `if logger is not None:`), or in an
    `and`/`or` another operand of which does (`logger and logger.log(x)`): the name is
    checked before the use (rules_rank_attr and rank_none ask it)."""
    child: ast.AST = node
    for a in s.ancestors(node):
        if isinstance(a, ast.If | ast.IfExp | ast.While) and child is not a.test and mentions(a.test):
            return True
        if isinstance(a, ast.BoolOp) and any(mentions(v) for v in a.values if v is not child):
            return True
        if isinstance(a, _FUNCS):
            return False
        child = a
    return False


def caught(s: Script, node: ast.AST, fn: ast.AST, catches: frozenset[str] = _CATCHES) -> bool:
    """Inside the body of a `try` (within `fn`) whose handler takes one of `catches`:
    NameError or anything wider by default (rules_rank_attr asks for AttributeError)."""
    child = node
    for a in s.ancestors(node):
        if a is fn:
            return False
        if isinstance(a, ast.Try) and child in a.body:
            for h in a.handlers:
                names = (
                    ([h.type] if not isinstance(h.type, ast.Tuple) else list(h.type.elts))
                    if h.type is not None
                    else []
                )
                if h.type is None or any(
                    isinstance(t, ast.Name | ast.Attribute)
                    and (t.id if isinstance(t, ast.Name) else t.attr) in catches
                    for t in names
                ):
                    return True
        child = a
    return False


def names_from_outside(
    fn: ast.FunctionDef | ast.AsyncFunctionDef, nodes: list[ast.AST]
) -> set[str] | None:
    """The names `fn` takes from outside its own bindings (parameters, `global`,
    `nonlocal`); None when it reads its locals by name (`locals()`, `exec`): then what it
    binds is not visible (rank_bound asks it too)."""
    if any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in _INTROSPECT
        for n in nodes
    ):
        return None
    free = {x for n in nodes if isinstance(n, ast.Global | ast.Nonlocal) for x in n.names}
    a = fn.args
    params = {p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
    return free | params | {p.arg for p in (a.vararg, a.kwarg) if p is not None}


def _candidates(s: Script, f: Flow, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[Hit]:
    nodes = list(own_nodes(fn))
    outside = names_from_outside(fn, nodes)
    if outside is None:
        return
    binds: dict[str, list[ast.AST]] = {}
    for n in nodes:
        for name in _bound_names(n):
            binds.setdefault(name, []).append(n)
    for name, sites in binds.items():
        if name in outside:
            continue
        if any(_in_comprehension(s, b, fn) for b in sites):
            continue  # a comprehension's own variable
        arms = {rank_arm(f, b) for b in sites}
        if len(arms) != 1 or None in arms:
            continue
        arm = next(iter(arms))
        assert arm is not None
        guard, side = arm
        other = guard.orelse if side == "body" else guard.body
        if any(isinstance(n, _LEAVES) for st in other for n in ast.walk(st)):
            continue  # the other ranks leave: they never reach the read
        end = guard.end_lineno or guard.lineno
        reads = sorted(
            (
                n
                for n in nodes
                if isinstance(n, ast.Name)
                and n.id == name
                and isinstance(n.ctx, ast.Load)
                and n.lineno > end
                and not _in_comprehension(s, n, fn)
                and not f.guarded(n)
                and not caught(s, n, fn)
            ),
            key=lambda n: (n.lineno, n.col_offset),
        )
        if not reads:
            continue
        first = min(sites, key=lambda b: getattr(b, "lineno", 0))
        read = reads[0]
        yield Hit.at(
            "DDP-RANK-ONLY-NAME",
            first,
            f"`{name}` is bound only under the rank test at line {guard.lineno} but read "
            f"on every rank at line {read.lineno}: UnboundLocalError on the other ranks",
            also=((read, "read on every rank at"),),
            name=name,
            test=ast.unparse(guard.test),
            read_line=read.lineno,
        )


def rank_only_name(s: Script, f: Flow) -> Iterator[Hit]:
    for fn in s.nodes:
        if isinstance(fn, _FUNCS) and not f.func_guarded(fn):
            yield from _candidates(s, f, fn)


RULES = (rank_only_name,)
