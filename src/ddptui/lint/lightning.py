"""Lightning's collectives as flow.py reads them, and the sign test of a -1 rank.

- `trainer.strategy.barrier()` / `.broadcast` / `.reduce` / `.all_gather`: the strategy's
  collectives (sleap-nn's callbacks, PR #437);
- `trainer.save_checkpoint(...)` on a Lightning Trainer: it ends in
  `strategy.barrier("Trainer.save_checkpoint")` and must run on every rank (Lightning's
  docs; alan-turing-institute/autocast ran it under `if trainer.is_global_zero:` and hung);
- `rank >= 0` / `rank < 0`: whether the run is distributed (a rank of -1 when it is not),
  the same on every rank (gouthamvgk/SuperGlue_training's `is_distributed = (rank >= 0)`).
"""

from __future__ import annotations

import ast
from typing import Final

from ddptui.lint.script import Script
from ddptui.lint.syntax import const, last

# Collectives of a Lightning trainer's strategy (`trainer.strategy.barrier()`)
_STRATEGY_COLLECTIVES: Final = frozenset({"barrier", "broadcast", "reduce", "all_gather"})


def lightning_collective(s: Script, call: ast.Call) -> str | None:
    """What of Lightning's makes this call wait for every rank, if anything does."""
    f = call.func
    if not isinstance(f, ast.Attribute):
        return None
    if (
        f.attr in _STRATEGY_COLLECTIVES
        and isinstance(f.value, ast.Attribute)
        and f.value.attr == "strategy"
        and ast.unparse(f.value.value).split(".")[-1] == "trainer"
    ):
        return f"{ast.unparse(f.value)}.{f.attr}"
    if f.attr == "save_checkpoint" and _trainer(s, f.value):
        return f"{ast.unparse(f.value)}.save_checkpoint"
    return None


def _trainer_name(qn: str) -> bool:
    return last(qn) == "Trainer" and qn.split(".", maxsplit=1)[0] in ("lightning", "pytorch_lightning")


def _trainer(s: Script, expr: ast.expr) -> bool:
    """A Lightning Trainer: built by `L.Trainer(...)` / `pl.Trainer(...)`, or a parameter
    annotated as one (`trainer: L.Trainer`)."""
    if any(isinstance(o, ast.Call) and _trainer_name(s.call_name(o)) for o in s.origins(expr)):
        return True
    if not isinstance(expr, ast.Name):
        return False
    fn = s.scope_of(expr)
    if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
    return any(
        a.arg == expr.id and a.annotation is not None and _trainer_name(s.qualname(a.annotation) or "")
        for a in args
    )


def sentinel_sign(test: ast.Compare) -> bool:
    """`rank >= 0`, `rank < 0`, `0 <= rank`: the sign of a rank that is -1 when the run is
    not distributed, the same on every rank of a distributed run; not `rank > 0` (every
    rank but 0)."""
    if len(test.ops) != 1:
        return False
    op, right = test.ops[0], test.comparators[0]
    if const(right) == 0 and isinstance(op, ast.GtE | ast.Lt):
        return True
    return const(test.left) == 0 and isinstance(op, ast.LtE | ast.Gt)
