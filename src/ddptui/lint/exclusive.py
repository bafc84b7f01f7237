"""Whether two nodes of one function sit under tests that cannot both hold (round 18, blind
AN1: weathergen's trainer wraps the model in DDP under `if cf.with_ddp and not cf.with_fsdp:`
and reads its submodules to shard them under `if cf.with_ddp and cf.with_fsdp:`; the reads
never see the wrapper).  A test's conjuncts are literals (`x`, `not x`); a node in an `if`'s
body has each of them, one in its `else` the negation of a single literal.  Two nodes are
exclusive when one has a literal whose negation the other has.  Core layer, stdlib only."""

from __future__ import annotations

import ast

from ddptui.lint.script import Script


def _literals(test: ast.expr) -> list[tuple[str, bool]]:
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    out = []
    for p in parts:
        if isinstance(p, ast.UnaryOp) and isinstance(p.op, ast.Not):
            out.append((ast.unparse(p.operand), False))
        elif not isinstance(p, ast.BoolOp):
            out.append((ast.unparse(p), True))
    return out


def _held(s: Script, node: ast.AST) -> set[tuple[str, bool]]:
    """The literals that hold where `node` runs, from the `if`s around it in its function."""
    held: set[tuple[str, bool]] = set()
    child = node
    for a in s.ancestors(node):
        if isinstance(a, ast.If) and child is not a.test:
            if child in a.body:
                held.update(_literals(a.test))
            elif child in a.orelse:
                lits = _literals(a.test)
                if len(lits) == 1 and not isinstance(a.test, ast.BoolOp):
                    held.add((lits[0][0], not lits[0][1]))
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.Module):
            break
        child = a
    return held


def held(s: Script, node: ast.AST) -> frozenset[tuple[str, bool]]:
    """The literals that hold where `node` runs (for `exclusive`, computed once per node)."""
    return frozenset(_held(s, node))


def exclusive(ha: frozenset[tuple[str, bool]], hb: frozenset[tuple[str, bool]]) -> bool:
    """Two nodes (in one function) whose `held` literals contradict cannot both run."""
    return any((text, not pol) in hb for text, pol in ha)
