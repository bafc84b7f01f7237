"""The "local rank 0 first" helper as a sync point every rank reaches: YOLOv5's
`torch_distributed_zero_first` and its copies (neuralmagic/sparseml's utils/helpers.py)
barrier under `if local_rank not in [-1, 0]:` before the body and under `if local_rank ==
0:` after it, so each rank that enters runs exactly one barrier. Flow.function_sync leaves
collectives under a rank test out of a helper's sync points (they depend on the
arguments); a pair of them under complementary tests of one rank name is no such doubt.
Entered by rank 0 alone (sparseml's `_create_val_dataset_and_loader` returns early on the
other ranks, blind batch AJ2), its closing barrier waits forever."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import Protocol

from ddptui.lint.syntax import const


class _Script(Protocol):
    def scope_of(self, node: ast.AST) -> ast.AST: ...
    def param_args(self, func: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> list[ast.expr]: ...


class _Flow(Protocol):
    def local_guard(self, node: ast.AST) -> ast.AST | None: ...
    def direct_sync(self, call: ast.Call) -> str | None: ...


def paired_rank_sync(flow: _Flow, calls: Iterable[ast.Call]) -> str | None:
    """The sync point of two collectives under complementary tests of one rank name
    (`== 0` and `!= 0` / `not in [-1, 0]` / `> 0`, or the two arms of one such test)."""
    sides: dict[str, dict[str, str]] = {}
    for call in calls:
        guard = flow.local_guard(call)
        name = flow.direct_sync(call)
        if not isinstance(guard, ast.If) or not name:
            continue
        side = _zero_side(guard.test)
        if side is None:
            continue
        subject, zero = side
        if any(call is n for st in guard.orelse for n in ast.walk(st)):
            zero = not zero  # in the `else:` of the test
        sides.setdefault(subject, {}).setdefault("zero" if zero else "other", name)
    for subject, found in sides.items():
        if "zero" in found and "other" in found:
            return f"{found['zero']} (one per rank: `{subject}` 0 and the others each reach one)"
    return None


def _zero_side(test: ast.expr) -> tuple[str, bool] | None:
    """(the rank name tested, whether the test holds on rank 0)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    op, right = test.ops[0], test.comparators[0]
    subject = ast.unparse(test.left)
    if "rank" not in subject.lower():
        return None
    if const(right) == 0 and isinstance(op, ast.Eq):
        return subject, True
    if const(right) == 0 and isinstance(op, ast.NotEq | ast.Gt):
        return subject, False
    listed = isinstance(right, ast.List | ast.Tuple | ast.Set) and any(
        const(e) == 0 for e in right.elts
    )
    if listed and isinstance(op, ast.NotIn | ast.In):
        return subject, isinstance(op, ast.In)
    return None


def rank_minus_one(s: _Script, call: ast.Call) -> bool:
    """The helper is handed -1, the single-process rank, here or through the parameter of
    the function that calls it (ultralytics/yolov5's `create_dataloader(val_path, ...,
    rank=-1)` on rank 0 enters `torch_distributed_zero_first(rank)`, which then runs no
    barrier). An attribute set to -1 elsewhere (`args.local_rank = -1` when not
    distributed) is the other mode's value, not this call's."""
    arg = call.args[0] if call.args else (call.keywords[0].value if call.keywords else None)
    if arg is None:
        return False
    if const(arg) == -1:
        return True
    if not isinstance(arg, ast.Name):
        return False
    fn = s.scope_of(call)
    if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    return any(const(v) == -1 for v in s.param_args(fn, arg.id))
