"""DDP-RANK-ONLY-NAME where a name has several bindings, from a miss of blind batch AI1
(usnistgov/alignn, alignn/data.py before the fix that built the datasets on every rank):
`get_train_val_loaders` binds `train_loader` in two places, from a saved file when one
exists, else inside `if rank == 0:`, and then reads `train_loader.dataset` on every rank.
lint50 asks that every binding lie in one arm of one rank test, so it stayed silent; the
other ranks die with UnboundLocalError whenever no saved loader exists.

The reading: before the read, along the statements that lead to it, the name is bound on
every path when a rank test counts as taken the binding way (some rank gets there bound),
but not when every path must bind whichever way a rank test goes. A branch that leaves
(return, raise, continue, break) counts as bound: the read is not reached there. Loops
count as binding nothing (they may run zero times). The same exclusions as lint50: no
parameter, global or nonlocal, no comprehension variable, no read under a rank test or in
a `try` that catches NameError, no `locals()`/`exec`."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddptui.lint.flow import Flow
from ddptui.lint.lint50 import _bound_names, _in_comprehension, caught, names_from_outside
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.script import Script
from ddptui.lint.syntax import target_names

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_LEAVES = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def _binds(f: Flow, stmts: list[ast.stmt], name: str, lenient: bool) -> bool:
    """Running `stmts` binds `name` (or leaves) on every path; a rank test counts as one
    path of the taker's choosing when `lenient`, as two paths to cover otherwise."""
    return any(_stmt_binds(f, st, name, lenient) for st in stmts)


def _stmt_binds(f: Flow, st: ast.stmt, name: str, lenient: bool) -> bool:  # noqa: PLR0911
    if isinstance(st, _LEAVES):
        return True
    if isinstance(st, ast.If):
        body = _binds(f, st.body, name, lenient)
        other = _binds(f, st.orelse, name, lenient)
        if lenient and f.is_rank_test(st.test):
            return body or other
        return body and other
    if isinstance(st, ast.With | ast.AsyncWith):
        return any(
            i.optional_vars is not None and name in target_names(i.optional_vars) for i in st.items
        ) or _binds(f, st.body, name, lenient)
    if isinstance(st, ast.Try):
        if _binds(f, st.finalbody, name, lenient):
            return True
        return _binds(f, st.body, name, lenient) and all(
            _binds(f, h.body, name, lenient) for h in st.handlers
        )
    if isinstance(st, ast.For | ast.AsyncFor | ast.While | ast.Match):
        return False  # a loop may run zero times; a match may take no case
    if isinstance(st, (*_FUNCS, ast.ClassDef)):
        return st.name == name
    return any(name in _bound_names(n) for n in [st, *own_nodes(st)] if not isinstance(n, ast.Lambda))


def _before(s: Script, read: ast.AST, fn: ast.AST) -> list[list[ast.stmt]]:
    """The statement lists that run before `read` on its way down from the function's
    body: at each enclosing block, the siblings above the statement holding it."""
    out: list[list[ast.stmt]] = []
    child: ast.AST = read
    for a in s.ancestors(read):
        for field in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(a, field, None)
            if isinstance(block, list) and child in block:
                i = block.index(child)
                out.append([x for x in block[:i] if isinstance(x, ast.stmt)])
        if a is fn:
            break
        child = a
    return out


def _bound_around(s: Script, read: ast.AST, fn: ast.AST, name: str) -> bool:
    """A loop, `with` or `except` around the read binds the name before its body runs:
    `for i, data in enumerate(loader):` rebinds `data` for every read in the loop's body
    (jolibrain/joliGEN's train.py: `data = next(iter(loader))` under `if rank == 0` above
    it is not what the loop reads)."""
    child: ast.AST = read
    for a in s.ancestors(read):
        if a is fn:
            return False
        if isinstance(a, ast.For | ast.AsyncFor) and child in a.body:
            if name in target_names(a.target):
                return True
        elif isinstance(a, ast.With | ast.AsyncWith) and child in a.body:
            if any(i.optional_vars is not None and name in target_names(i.optional_vars) for i in a.items):
                return True
        elif isinstance(a, ast.ExceptHandler) and a.name == name:
            return True
        child = a
    return False


def _rank_binding(s: Script, f: Flow, fn: ast.AST, name: str) -> ast.AST | None:
    """The first binding of `name` under a rank test, in `fn`'s own code."""
    found = [
        n
        for n in own_nodes(fn)
        if name in _bound_names(n) and isinstance(f.local_guard(n), ast.If)
    ]
    return min(found, key=lambda n: getattr(n, "lineno", 0)) if found else None


def _candidates(s: Script, f: Flow, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[Hit]:
    nodes = list(own_nodes(fn))
    if not any(isinstance(n, ast.If) and f.is_rank_test(n.test) for n in nodes):
        return  # no rank test of its own: nothing is bound on some ranks only here
    outside = names_from_outside(fn, nodes)
    if outside is None:
        return
    # only names some binding of which sits under a rank test can be bound on one rank only
    bound = {
        x for n in nodes for x in _bound_names(n) if isinstance(f.local_guard(n), ast.If)
    } - outside
    if not bound:
        return
    found: dict[ast.If, list[tuple[str, ast.AST, ast.Name]]] = {}  # by rank test
    reads = sorted(
        (
            n
            for n in nodes
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in bound
        ),
        key=lambda n: (n.lineno, n.col_offset),
    )
    seen: set[str] = set()
    for read in reads:
        name = read.id
        if name in seen or f.guarded(read) or _in_comprehension(s, read, fn):
            continue
        if caught(s, read, fn):
            continue
        if _bound_around(s, read, fn, name):
            continue
        blocks = _before(s, read, fn)
        if any(_binds(f, b, name, lenient=False) for b in blocks):
            continue
        if not any(_binds(f, b, name, lenient=True) for b in blocks):
            continue
        first = _rank_binding(s, f, fn, name)
        guard = f.local_guard(first) if first is not None else None
        if first is None or not isinstance(guard, ast.If):
            continue
        seen.add(name)
        found.setdefault(guard, []).append((name, first, read))
    for guard, names in found.items():  # one finding per rank test: one place to fix
        name, first, read = names[0]
        test = ast.unparse(guard.test)
        listed = ", ".join(f"`{n}`" for n, _, _ in names[:4])
        yield Hit.at(
            "DDP-RANK-ONLY-NAME",
            first,
            f"{listed} {'is' if len(names) == 1 else 'are'} bound on the way to line "
            f"{read.lineno} only where `{test}` holds (line {guard.lineno}) on one of its "
            "paths, yet read there on every rank: UnboundLocalError on the other ranks",
            also=((guard, "the rank test at"), (read, "read on every rank at")),
            name=name,
            test=test,
            read_line=read.lineno,
        )


def rank_only_on_a_path(s: Script, f: Flow) -> Iterator[Hit]:
    for fn in s.nodes:
        if isinstance(fn, _FUNCS) and not f.func_guarded(fn):
            yield from _candidates(s, f, fn)


RULES = (rank_only_on_a_path,)
