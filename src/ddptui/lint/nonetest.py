"""How an `if` test reads a value against None: `x is None`, `x is not None`, `not x`,
`x`. Four readings ask it: a branch no caller reaches (callers.py), a resume that runs
once and a logger only one rank holds (lint15.py), a GPU fixed only as the default when
no device was given (lint22.py); each keeps the subjects it knows how to follow."""

from __future__ import annotations

import ast


def none_test(test: ast.expr) -> tuple[ast.expr, bool] | None:
    """(the value tested, whether the test's TRUE branch means it is None or empty) for
    `x is None`, `x is not None`, `not x`, and a bare name, attribute or subscript."""
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Is | ast.IsNot)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    ):
        return test.left, isinstance(test.ops[0], ast.Is)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand, True
    if isinstance(test, ast.Name | ast.Attribute | ast.Subscript):
        return test, False
    return None
