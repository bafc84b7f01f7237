"""Which line DDP-ALL-RANKS-IO names, from blind batch S (lint26): the line the user
changes (anchor.py has the earlier cases).

- A write reached through several calls, some of them under a rank test and one not, in
  the same function: the project's own guarded calls show the convention, and the one
  unguarded call beside them is what lacks it (kakaobrain/scrl @ f5bc426e,
  trainer/trainer.py: `if comm.is_main_process() and ...: self.save_checkpoint(epoch)`
  at :121-124, then `self.save_best_checkpoint()` at :140 on every rank; both reach the
  `torch.save` of `_save_checkpoint` in trainer/base.py; fixed in 053dfee by guarding
  :140).
- A writer made as a fallback when the caller gave none (`if tb_logger is None:
  tb_logger = SummaryWriter('rnd_reward_model')` in `RNDRewardModel.__init__`,
  opendilab/LightZero @ b229a7f8, lzero/reward_model/rnd_reward_model.py:161-163, whose
  entry passes `tb_logger=None` on every rank but 0): the fallback is the write; said
  there, not at the entry's call of the class.
- A write in a method of a project class that knows nothing of ranks (FARM's
  `MLFlowLogger.init_experiment`, deepset-ai/FARM @ bf13c4a3, farm/utils.py:122-126, a
  thin wrapper of `mlflow.start_run`): the guard goes where the rank is known, the
  caller's line (examples/train_from_scratch.py:38, fixed in 94cae29); a method of a
  class that reads the rank keeps the finding (anchor.owning_method).
"""

from __future__ import annotations

import ast
import re
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.nonetest import none_test
from ddptui.lint.script import Script

_HOPS: Final = 3
_KNOWS: Final = re.compile(
    r"rank|is_main|is_master|master|main_process|DistributedDataParallel|DDP|optim|backward"
    r"|model",
    re.I,
)


def guarded_sibling(s: Script, f: Flow, write: ast.AST) -> ast.Call | None:
    """The one unguarded call on the way to `write` that sits in a function where another
    call on the way to it is under a rank test."""
    guarded: list[ast.Call] = []
    unguarded: list[ast.Call] = []
    frontier = [s.scope_of(write)]
    seen: set[ast.AST] = set()
    for _ in range(_HOPS):
        nxt = []
        for fn in frontier:
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) or fn in seen:
                continue
            seen.add(fn)
            for c in s.call_sites(fn):
                (guarded if f.local_guard(c) is not None else unguarded).append(c)
                nxt.append(s.scope_of(c))
        frontier = nxt
    homes = {s.scope_of(g) for g in guarded}
    found = {u for u in unguarded if s.scope_of(u) in homes and not f.guarded(u)}
    return found.pop() if len(found) == 1 else None


def fallback_write(s: Script, write: ast.AST) -> bool:
    """`write` is the value of `X = ...` under `if X is None:` (X a parameter of its
    function or an attribute of self)."""
    stmt = s.parents.get(write)
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
        return False
    target = ast.unparse(stmt.targets[0])
    fn = s.scope_of(write)
    if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    params = {a.arg for a in [*fn.args.args, *fn.args.kwonlyargs]}
    if target not in params and not target.startswith("self."):
        return False
    for a in s.ancestors(write):
        if a is fn:
            return False
        if isinstance(a, ast.If) and stmt in a.body:
            tested = none_test(a.test)
            return tested is not None and tested[1] and ast.unparse(tested[0]) == target
    return False


def rankless_owner(s: Script, method: ast.AST | None) -> bool:
    """`method` lies in a project class that knows nothing of ranks or training (a thin
    logger class): no rank read, no DDP, no optimizer, no backward. A trainer class that
    saves (neuraloperator's `Trainer.checkpoint`) keeps the finding in its method."""
    if method is None:
        return False
    cls = s.class_of(method)
    return cls is not None and not _KNOWS.search(ast.unparse(cls))


def built_here(s: Script, node: ast.AST) -> bool:
    """`node` lies in the `__init__` of a class the project's reached code constructs
    itself (`reward_model = RNDRewardModel(cfg.reward_model, ...)` in LightZero's entry):
    a registered class all the same, but this constructor runs where the project calls
    it, on every rank that does."""
    fn = s.scope_of(node)
    cls = s.class_of(node)
    if not (isinstance(fn, ast.FunctionDef) and fn.name == "__init__" and cls is not None):
        return False
    return any(s.class_named(c.func) is cls for c in s.calls)
