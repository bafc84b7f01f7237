"""Precision of lint36, from the false errors of blind batch AC on correct projects.

- DDP-HARDCODED-DEVICE, a single-process default the distributed branch replaces
  (`args.device = 'cuda:0'`, then `if args.distributed: args.device = 'cuda:%d' %
  args.local_rank`; timm's train.py and the many projects built on it): no rank uses GPU 0
  unless the default is read before the rank's value replaces it. A constant nothing
  replaces, or one read in between, keeps the finding.
- DDP-RANK-DIVERGENCE through an FSDP state_dict, in the arm of an `if`/`elif` chain that an
  earlier FSDP arm already excludes (`elif engine == "torch_fsdp": fsdp_save(...)` then
  `elif rank == 0: save_checkpoint(model)`): an FSDP model never reaches the rank-0 arm, a
  DDP one gathers nothing there. A rank-0 FSDP state_dict outside such a chain stays.
- DDP-WRAPPER-ATTR, a caller passing `model.module if distributed else model` (the unwrap
  idiom): the plain-model arm is taken only when nothing wraps the model.
"""

from __future__ import annotations

import ast
import re
from typing import Final

from ddptui.lint.model import Hit
from ddptui.lint.script import Script

# a value taken from the process's rank (`'cuda:%d' % args.local_rank`, `f"cuda:{gpu}"`)
_RANKED: Final = re.compile(r"rank|\bgpu\b|\.gpu\b|device_id", re.I)
_FSDP: Final = re.compile(r"fsdp|fully_?shard", re.I)


def dropped36(s: Script, hit: Hit) -> bool:
    """A reading these projects show to be false (see the module docstring)."""
    node = hit.node
    if node is None:
        return False
    if hit.id == "DDP-HARDCODED-DEVICE" and isinstance(node, ast.Assign):
        return _replaced_default(s, node)
    if hit.id == "DDP-RANK-DIVERGENCE" and "FSDP" in hit.summary:
        return _past_fsdp_arm(s, node)
    return False


def unwrap_idiom(expr: ast.expr) -> bool:
    """`model.module if dist else model` (either order): the wrapper is unwrapped in the
    arm where there is one; the other arm is the plain model."""
    if not isinstance(expr, ast.IfExp):
        return False
    a, b = expr.body, expr.orelse
    return any(
        isinstance(x, ast.Attribute)
        and x.attr == "module"
        and ast.unparse(x.value) == ast.unparse(y)
        for x, y in ((a, b), (b, a))
    )


def _replaced_default(s: Script, node: ast.Assign) -> bool:
    """This constant is replaced, later in the same function and before any read of it, by
    a value taken from the rank."""
    if len(node.targets) != 1:
        return False
    name = ast.unparse(node.targets[0])
    scope = s.scope_of(node)
    later = sorted(
        (
            n
            for n in ast.walk(scope)
            if isinstance(n, ast.Assign)
            and n.lineno > node.lineno
            and s.scope_of(n) is scope
            and any(ast.unparse(t) == name for t in n.targets)
        ),
        key=lambda n: n.lineno,
    )
    if not later or not _RANKED.search(ast.unparse(later[0].value)):
        return False
    end = later[0].lineno
    return not any(
        isinstance(n, ast.Name | ast.Attribute)
        and isinstance(n.ctx, ast.Load)
        and node.lineno < n.lineno < end
        and ast.unparse(n) == name
        for n in ast.walk(scope)
    )


def _past_fsdp_arm(s: Script, node: ast.AST) -> bool:
    """The node lies in the `else`/`elif` part of an `if` whose test names FSDP (a string
    option compared with `"torch_fsdp"`, `isinstance(model, FSDP)`, `use_fsdp`)."""
    child = node
    for a in s.ancestors(node):
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef):
            return False
        if (
            isinstance(a, ast.If)
            and any(child is c for c in a.orelse)
            and not isinstance(a.test, ast.UnaryOp)
            and _FSDP.search(ast.unparse(a.test))
        ):
            return True
        child = a
    return False
