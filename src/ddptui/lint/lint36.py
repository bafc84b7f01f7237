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
- DDP-ALL-RANKS-IO in a method only rank-guarded code reaches through attribute chains the
  call graph does not resolve (neural_sp: `if args.local_rank == 0: model.module.
  plot_attention()`, whose `self.enc._plot_attention(...)` saves figures): every use of
  the method's name, and of its callers' names in turn, is under a rank test. One use
  outside such a test keeps the finding.
"""

from __future__ import annotations

import ast
import re
import weakref
from typing import Final

from ddptui.lint.flow import Flow, ident
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


def rank_guarded_uses(s: Script, f: Flow, node: ast.AST, depth: int = 0) -> bool:
    """Every use of the name of the function holding `node` (any object's attribute of
    that name counts, which errs towards keeping a finding) is in the arm of a rank test
    that holds on rank 0 (`if rank == 0:`, not its `else`), or in a function for which this
    holds in turn (three levels)."""
    fn = s.scope_of(node)
    if depth > 3 or not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    if fn.name.startswith("__") or fn.name in ("forward", "main"):
        return False  # called by Python, torch or the command line, not by a name here
    uses = _loads(s).get(fn.name, [])
    return bool(uses) and all(
        _rank0_arm(s, f, u) or (s.scope_of(u) is not fn and rank_guarded_uses(s, f, u, depth + 1))
        for u in uses
    )


_LOADS: weakref.WeakKeyDictionary[Script, dict[str, list[ast.AST]]] = weakref.WeakKeyDictionary()


def _loads(s: Script) -> dict[str, list[ast.AST]]:
    """The names and attributes the reached code reads, by name, in the order of
    `s.nodes`: indexed once per script, as every rank-only function asks it."""
    found = _LOADS.get(s)
    if found is None:
        found = _LOADS[s] = {}
        for n in s.nodes:
            if isinstance(n, ast.Name | ast.Attribute) and isinstance(n.ctx, ast.Load):
                found.setdefault(ident(n) or "", []).append(n)
    return found


def _rank0_arm(s: Script, f: Flow, node: ast.AST) -> bool:
    """Inside the body of `if rank == 0:` (`if args.local_rank == 0 and step % n == 0:`,
    `if is_main_process():`) within its function; a negated test (`!=`, `not`) does not
    count, its body is the other ranks'."""
    child = node
    for a in s.ancestors(node):
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.Module):
            return False
        if (
            isinstance(a, ast.If)
            and any(child is b for b in a.body)
            and f.is_rank_test(a.test)
            and not _negated(f, a.test)
        ):
            return True
        child = a
    return False


def _negated(f: Flow, test: ast.expr) -> bool:
    """`not is_main()`, `rank != 0`, `rank > 0` (a `step > 0` beside it is no negation)."""
    return any(
        (isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not))
        or (
            isinstance(n, ast.Compare)
            and any(isinstance(o, ast.NotEq | ast.Gt) for o in n.ops)
            and f.rank_valued(n.left)
        )
        for n in ast.walk(test)
    )
