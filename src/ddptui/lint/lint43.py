"""Where a rank-0 save and an every-rank load sit in two helpers of two files, their call
sites in one function may still name one file (lint43, DDP-CKPT-BARRIER).

DEIM (ShihuaHuang95/DEIM@bd70c7d, engine/solver/det_solver.py): the solver's `fit()` saves
with `dist_utils.save_on_master(self.state_dict(), self.output_dir / 'best_stg1.pth')`
(a `torch.save` under `is_main_process()` in dist_utils.py) and, at the stage switch of the
next epoch, every rank calls `self.load_resume_state(str(self.output_dir /
'best_stg1.pth'))` (a `torch.load` of its `path` parameter in _solver.py), with no barrier
between: the torch calls alone, in two files with parameter paths, show no shared file.
The call sites do: the same path expression, built with a file name, in one function. A
bare name or attribute (`path`, `self.model`) is not enough: many unrelated values share
one."""

from __future__ import annotations

import ast

from ddptui.lint.script import Script

_WRAPS = frozenset({"str", "Path", "fspath", "PurePath"})


def _paths(call: ast.Call) -> set[str]:
    """The path-like arguments of a call: built with a string literal (`out / 'best.pth'`,
    `f"{out}/best.pth"`, `os.path.join(out, 'best.pth')`), `str(...)`/`Path(...)` unwrapped."""
    out: set[str] = set()
    for arg in [*call.args, *(k.value for k in call.keywords)]:
        a = arg
        while (
            isinstance(a, ast.Call)
            and len(a.args) == 1
            and isinstance(a.func, ast.Name | ast.Attribute)
            and (a.func.id if isinstance(a.func, ast.Name) else a.func.attr) in _WRAPS
        ):
            a = a.args[0]
        if isinstance(a, ast.Starred) or (
            isinstance(a, ast.Constant) and not isinstance(a.value, str)
        ):
            continue
        if any(isinstance(n, ast.Constant) and isinstance(n.value, str) for n in ast.walk(a)):
            out.add(ast.dump(a))
    return out


def shared_site(
    s: Script, saves: list[tuple[ast.Call, ...]], load_via: tuple[ast.Call, ...]
) -> tuple[ast.Call, ast.Call] | None:
    """(a save's call site, the load's) in one function, passing the same path
    expression, or None; `saves`: the call sites of each save not waited for."""
    for site in load_via:
        read = _paths(site)
        if not read:
            continue
        owner = s.scope_of(site)
        for other in (c for via in saves for c in via):
            if (
                s.scope_of(other) is owner
                and s.path_of(other) == s.path_of(site)
                and read & _paths(other)
            ):
                return other, site
    return None
