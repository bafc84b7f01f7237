"""Round 32 (blind batch Y): a checkpoint one call writes on the master only, into a path
an attribute holds, that a later call reads back on every rank through the same
attribute, with no barrier in between (RUCAIBox/RecBole 45d726581 quick_start.py:
`trainer.fit(...)` saves the best model to `self.saved_model_file` from local rank 0
only, then `trainer.evaluate(test_data, load_best_model=True)` loads
`self.saved_model_file` on every rank; the fix, 96e2930, adds `dist.barrier()`). The
round-20 reading (lint20_ckpt) joins the two by a file name literal; this one by the
attribute, since a trainer keeps the path it writes."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.lint20_ckpt import _always
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.script import Script
from ddptui.lint.syntax import last

_DEPTH: Final = 3


def _reached(s: Script, call: ast.Call, name: str, depth: int = 0) -> Iterator[ast.Call]:
    """Every `torch.save` / `torch.load` the call runs, itself or through project
    functions (a few calls deep)."""
    qn = s.call_name(call)
    if qn.startswith("torch.") and last(qn) == name:
        yield call
        return
    if depth >= _DEPTH:
        return
    for fn in s.callees(call):
        for c in (n for n in own_nodes(fn) if isinstance(n, ast.Call)):
            yield from _reached(s, c, name, depth + 1)


def _path_attrs(s: Script, call: ast.Call, index: int) -> set[str]:
    """The `self.X` attributes the path argument is taken from (`kwargs.pop("f",
    self.saved_model_file)`, `model_file or self.saved_model_file`)."""
    arg = call.args[index] if len(call.args) > index else None
    if arg is None:
        return set()
    return {
        n.attr
        for x in [arg, *s.origins(arg, params=False)]
        for n in ast.walk(x)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id == "self"
        and len(n.attr) >= 4
    }


def attr_write_read_back(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.distributed:
        return
    for save_call in s.calls:
        if f.guarded(save_call) or f.call_sync(save_call) or not s.callees(save_call):
            continue
        written = {
            a for w in _reached(s, save_call, "save") if f.guarded(w) for a in _path_attrs(s, w, 1)
        }
        if not written:
            continue
        top = s.scope_of(save_call)
        later = sorted(
            (
                c
                for c in own_nodes(top)
                if isinstance(c, ast.Call) and c.lineno > save_call.lineno and s.callees(c)
            ),
            key=lambda c: c.lineno,
        )
        for c in later:
            if f.call_sync(c) and _always(s, c, top, save_call):
                break
            if f.guarded(c):
                continue
            load = next(
                (
                    x
                    for x in _reached(s, c, "load")
                    if not f.guarded(x) and written & _path_attrs(s, x, 0)
                ),
                None,
            )
            if load is None:
                continue
            attr = sorted(written & _path_attrs(s, load, 0))[0]
            yield Hit.at(
                "DDP-CKPT-BARRIER",
                load,
                (
                    f"every rank reads `self.{attr}` here, but only the master writes it "
                    f"(through `{ast.unparse(save_call)[:50]}`, {s.path_of(save_call)}:"
                    f"{save_call.lineno}) and no barrier always runs in between"
                ),
                severity="warning",
                saved_at=save_call.lineno,
            )
            return


def _class_saves(s: Script, f: Flow, cls: ast.ClassDef) -> Iterator[tuple[ast.Call, str]]:
    """(save, attribute) for the master-only `torch.save(..., self.X)` in the class's
    own methods."""
    for fn in cls.body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        for c in (n for n in own_nodes(fn) if isinstance(n, ast.Call)):
            qn = s.call_name(c)
            if qn.startswith("torch.") and last(qn) == "save" and f.guarded(c):
                for a in _path_attrs(s, c, 1):
                    yield c, a


def method_reads_back(s: Script, f: Flow) -> Iterator[Hit]:
    """The caller that orders the two is out of reach (a trainer class picked by name
    with importlib): a method that loads `self.X` on every rank, with no barrier before
    it in the method, while another method of its class writes `self.X` on the master
    only, and no call of the reading method is seen in the project."""
    if not f.torch_ddp_calls:
        return
    for load in s.calls:
        qn = s.call_name(load)
        if not (qn.startswith("torch.") and last(qn) == "load") or f.guarded(load):
            continue
        read = _path_attrs(s, load, 0)
        cls = s.class_of(load)
        fn = s.scope_of(load)
        if not read or cls is None or not isinstance(fn, ast.FunctionDef) or s.call_sites(fn):
            continue
        if any(
            isinstance(c, ast.Call) and c.lineno < load.lineno and f.call_sync(c)
            for c in own_nodes(fn)
        ):
            continue
        save = next(
            (w for w, a in _class_saves(s, f, cls) if a in read and s.scope_of(w) is not fn),
            None,
        )
        if save is None:
            continue
        attr = sorted(read & _path_attrs(s, save, 1))[0]
        yield Hit.at(
            "DDP-CKPT-BARRIER",
            load,
            (
                f"every rank reads `self.{attr}` here, but only the master writes it "
                f"({s.path_of(save)}:{save.lineno}) and this method does not wait for it "
                "(a barrier before the load)"
            ),
            severity="warning",
            saved_at=save.lineno,
        )


RULES: Final = (attr_write_read_back, method_reads_back)
