"""Which line a finding names when the pitfall spans several: the line the user changes.

- A write every rank makes inside a small I/O helper (no loop, no backward, a few
  statements) that the project calls from one unguarded place: that call is what needs
  the rank guard, so the finding names it (`save_checkpoint(...)` in `main_worker`, not
  the `torch.save` in `save_checkpoint`). A helper called unguarded from several places
  is fixed once, inside: the finding stays there.
- A write every rank makes in another file than the entry script, inside a method of a
  project class (`Model.save_training_state`, `Trainer.checkpoint`), directly or through
  free helpers called once, unguarded: the method owns the run's state (its rank, its
  save folder), so the finding names the line in that method, in its own file, not the
  entry's call of the object.
- A model built without a seed: the first line that binds the wrapped model in the
  function that wraps it (the seed goes before it), not the DDP call.
- A write reached from the entry only through its call of the function that runs the
  whole training (a thin launcher script): the call inside that run which leads to the
  write, since a guard around the launcher's call would skip the training too.
"""

from __future__ import annotations

import ast
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.nodes import own_nodes
from ddptui.lint.script import Pick, Script

_HELPER_STMTS: Final = 10  # a helper of more statements does more than write a file
_HOPS: Final = 3


def io_helper_call(s: Script, f: Flow, node: ast.AST, depth: int = 0) -> ast.AST:
    """The one call site that leads to the write `node` through small I/O helpers, else
    `node`."""
    fn = s.scope_of(node)
    if depth >= _HOPS or not _small_io_helper(f, fn) or _conditional(s, node, fn):
        return node
    every = s.call_sites(fn) if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) else ()
    sites = [c for c in every if not f.guarded(c)]  # the calls every rank makes
    if len(sites) != 1:
        return node
    site = sites[0]
    if not isinstance(s.scope_of(site), ast.FunctionDef | ast.AsyncFunctionDef):
        return node  # `main()` under `if __name__ == "__main__":` is not a helper's call
    return io_helper_call(s, f, site, depth + 1)


def owning_method(s: Script, f: Flow, node: ast.AST, depth: int = 0) -> ast.AST | None:
    """The statement of a project class's method (not `__init__`) that leads to `node`:
    `node` itself in such a method, else the one unguarded call of the free function
    holding it, followed up to _HOPS calls; None when no method is reached that way."""
    fn = s.scope_of(node)
    if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    if isinstance(s.parents.get(fn), ast.ClassDef):
        return node if fn.name != "__init__" else None
    if depth >= _HOPS:
        return None
    sites = [c for c in s.call_sites(fn) if not f.guarded(c)]
    return owning_method(s, f, sites[0], depth + 1) if len(sites) == 1 else None


def deep_worker_write(s: Script, node: ast.AST) -> bool:
    """`node` sits in a free function of another file than the entry that computes and
    returns a value (not an I/O helper), called only from other project modules: a write
    two calls or more below the entry's own step (mace's `random_train_valid_split`
    writing its index file, reached through `get_dataset_from_xyz`). The guard goes at
    the write, not at the entry's call of the step far above it."""
    fn = s.scope_of(node)
    if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) or s.module_of(node) is s.entry:
        return False
    if isinstance(s.parents.get(fn), ast.ClassDef) or not any(
        isinstance(n, ast.Return) and n.value is not None and not isinstance(n.value, ast.Constant)
        for n in own_nodes(fn)
    ):
        return False
    sites = s.call_sites(fn)
    return bool(sites) and all(s.module_of(c) is not s.entry for c in sites)


def _conditional(s: Script, node: ast.AST, fn: ast.AST) -> bool:
    """`node` runs under a test of its function (`if if_main_process(): open(...)`): the
    test is what to look at, not the call."""
    for a in s.ancestors(node):
        if a is fn:
            return False
        if isinstance(a, ast.If | ast.IfExp | ast.Try | ast.Match):
            return True
    return False


def _small_io_helper(f: Flow, fn: ast.AST) -> bool:
    return (
        isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
        and fn.name != "__init__"
        and len(fn.body) <= _HELPER_STMTS
        and not any(isinstance(n, ast.For | ast.AsyncFor | ast.While) for n in ast.walk(fn))
        and not f.has_backward(fn)
    )


def first_binding(s: Script, use: ast.expr) -> ast.expr | None:
    """The earliest value given to the name `use` in its function before `use`'s line
    (`model = resnet50(...).cuda()`, `model, cfg = create_model(...)`)."""
    if not isinstance(use, ast.Name):
        return None
    scope = s.scope_of(use)
    if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    values = [
        v.value if isinstance(v, Pick) else v
        for v in s.assigned(scope, use.id)
        if getattr(v, "lineno", 0) < use.lineno
    ]
    values = [v for v in values if not isinstance(v, ast.Constant)]  # `model = None`
    return min(values, key=lambda v: v.lineno) if values else None


def run_level_site(s: Script, f: Flow, node: ast.AST, anchor: ast.AST) -> ast.AST:
    """`anchor` is the entry's call of a function that runs the whole training (it wraps
    the model, or its callees reach backward()): a rank guard there would skip training on
    the other ranks, so the place to guard is the call that leads to the write from inside
    that run, the one unguarded call site at each hop (RUCAIBox/TextBox: `run_textbox(...)`
    in run_textbox.py; `init_logger(config)` in quick_start.py's `run_textbox`, which the
    fix put under `if local_rank == 0`). `anchor` itself when no such site is found."""
    if s.module_of(anchor) is not s.entry or not isinstance(anchor, ast.Call):
        return anchor
    if not any(_runs_training(s, f, fn) for fn in s.callees(anchor)):
        return anchor
    here = node
    for _ in range(_HOPS + 2):
        site = _one_site(s, f, here)
        if site is None or site is anchor:
            break
        caller = s.scope_of(site)
        if (
            s.module_of(site) is not s.entry
            and isinstance(caller, ast.FunctionDef | ast.AsyncFunctionDef)
            and _runs_training(s, f, caller)
        ):
            return site
        here = site
    return anchor


def _one_site(s: Script, f: Flow, node: ast.AST) -> ast.Call | None:
    """The one unguarded call of the function holding `node`, if it has exactly one."""
    fn = s.scope_of(node)
    if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    sites = [c for c in s.call_sites(fn) if not f.guarded(c)]
    return sites[0] if len(sites) == 1 else None


def _runs_training(s: Script, f: Flow, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """`fn` wraps the model in DDP itself or runs a backward pass (through its callees)."""
    wraps = set(f.wrapper_calls)
    return any(n in wraps for n in own_nodes(fn)) or f.has_backward(fn)
