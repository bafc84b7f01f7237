"""Round 20 (blind O): a checkpoint file a method writes on the master only, under a name
the caller passes (`self.save(checkpoint_file="best_checkpoint.pt")`), then read back on
every rank by another method that builds the path from the same literal
(`os.path.join(dir, "best_checkpoint.pt")` then `self.load_checkpoint(path)`), with no
barrier that always runs in between (the one in `if self.test_loader is not None:
self.predict(...)` runs only sometimes). The FAENet fork of Open Catalyst's trainer, fixed
in f1f5e06 by `distutils.synchronize()` at the end of save(). Said as a warning: the
reading joins the two by the file's literal name, not by the path's value."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.project import FuncNode
from ddptui.lint.rules_io import _torch
from ddptui.lint.script import Script

_CKPT: Final = (".pt", ".pth", ".ckpt", ".bin", ".tar")


def _reaches(s: Script, f: Flow, call: ast.Call, name: str, depth: int = 0) -> ast.Call | None:
    """The torch.save / torch.load the call runs, itself or through project functions."""
    if _torch(s, call, name):
        return call
    if depth >= 3:
        return None
    for fn in s.callees(call):
        for c in (n for n in own_nodes(fn) if isinstance(n, ast.Call)):
            found = _reaches(s, f, c, name, depth + 1)
            if found is not None:
                return found
    return None


def _literal(call: ast.Call) -> str | None:
    for a in [*call.args, *(k.value for k in call.keywords)]:
        if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.endswith(_CKPT):
            return a.value
    return None


def _loads(s: Script, f: Flow, fn: FuncNode, name: str) -> ast.Call | None:
    """A call in `fn` that loads a checkpoint whose path `fn` builds from the literal."""
    if not any(isinstance(n, ast.Constant) and n.value == name for n in own_nodes(fn)):
        return None
    for c in sorted((n for n in own_nodes(fn) if isinstance(n, ast.Call)), key=lambda c: c.lineno):
        if f.guarded(c) or _reaches(s, f, c, "load") is None:
            continue
        if any(
            isinstance(o, ast.Constant) and o.value == name
            for a in [*c.args, *(k.value for k in c.keywords)]
            for x in [a, *s.origins(a)]
            for o in ast.walk(x)
        ):
            return c
    return None


def _always(s: Script, node: ast.AST, top: ast.AST, other: ast.AST) -> bool:
    """Every `if` around `node` (below `top`) is around `other` too."""
    around = set(s.ancestors(other))
    for a in s.ancestors(node):
        if a is top:
            return True
        if isinstance(a, ast.If) and a not in around:
            return False
    return True


def master_write_read_back(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.distributed:
        return
    for save in s.calls:
        name = _literal(save)
        if name is None or not s.callees(save):
            continue
        written = _reaches(s, f, save, "save")
        if written is None or not f.guarded(written) or f.guarded(save) or f.call_sync(save):
            continue  # (a save that waits for the ranks itself: the fix, f1f5e06)
        top = s.scope_of(save)
        later = sorted(
            (
                c
                for c in own_nodes(top)
                if isinstance(c, ast.Call) and c.lineno > save.lineno and c is not save
            ),
            key=lambda c: c.lineno,
        )
        for c in later:
            if f.call_sync(c) and _always(s, c, top, save):
                break  # a barrier that always runs after the write
            load = next((x for fn in s.callees(c) if (x := _loads(s, f, fn, name))), None)
            if load is None or f.guarded(c):
                continue
            yield Hit.at(
                "DDP-CKPT-BARRIER",
                load,
                (
                    f"every rank reads `{name}` here, but only the master writes it "
                    f"(`{ast.unparse(save)[:60]}`, {s.path_of(save)}:{save.lineno}) and no "
                    f"barrier always runs in between (`{ast.unparse(c)[:40]}`, line {c.lineno})"
                ),
                severity="warning",
                saved_at=save.lineno,
            )
            return


RULES: Final = (master_write_read_back,)
