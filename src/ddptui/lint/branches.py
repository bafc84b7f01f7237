"""Branch facts two rules share (lint7): code nested under contradicting rank tests, and
the collectives a rank-local branch runs before it leaves."""

from __future__ import annotations

import ast

from ddptui.lint.flow import Flow
from ddptui.lint.script import Script

_OPPOSITE: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
}


def dead_nest(s: Script, call: ast.Call) -> bool:
    """Under `if x in L and ...:` and, inside it, `if x not in L:` (or `==`/`!=`): never
    runs (oscar's non-zero ranks' barrier nested in the rank-0 block, PR #197)."""
    tests: set[tuple[str, type[ast.cmpop], str]] = set()
    child: ast.AST = call
    for a in s.ancestors(call):
        if isinstance(a, ast.If) and child in a.body:
            conj = isinstance(a.test, ast.BoolOp) and isinstance(a.test.op, ast.And)
            parts = a.test.values if isinstance(a.test, ast.BoolOp) and conj else [a.test]
            for p in parts:
                if isinstance(p, ast.Compare) and len(p.ops) == 1 and type(p.ops[0]) in _OPPOSITE:
                    tests.add((ast.unparse(p.left), type(p.ops[0]), ast.unparse(p.comparators[0])))
        child = a
    return any((x, _OPPOSITE[op], y) in tests for x, op, y in tests)


def branch_colls(f: Flow, node: ast.If, exit_: ast.stmt) -> list[ast.Call]:
    """The collectives `node`'s body runs before `exit_`."""
    return [
        n
        for st in node.body
        for n in ast.walk(st)
        if isinstance(n, ast.Call) and n.lineno < exit_.lineno and f.collective(n)
    ]
