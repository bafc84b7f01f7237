"""DDP-RANK-ONLY-NAME for an attribute, from a miss of blind batch AI2 (WenmuZhou/
DBNet.pytorch, base/base_trainer.py before the fix that added the rank test to the read):
`__init__` sets `self.writer = SummaryWriter(...)` only under `if ... and
config['local_rank'] == 0:`, and `train()` ends with `if self.tensorboard_enable:
self.writer.close()` on every rank: AttributeError on all ranks but 0, at the end of a
whole training run.

The reading, kept narrow (lint50's for plain names leaves attributes alone because a
class may give them a default elsewhere): every store of `self.A` in the class, its
project bases and subclasses lies in the same arm of one rank test; no class-level `A`,
no `setattr`, `__getattr__` or `__dict__` in the family, and no `x.A = ...` on another
object anywhere in the project; a read of `self.A` in a method of the family runs on
every rank (no rank test around it, nor a caller that runs on some ranks only), is not
under a test of `self.A` itself (`if self.writer:`, `hasattr(self, "writer")`) and not in
a `try` that catches AttributeError. Said at the first such read, the store as its second
place."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddptui.lint.families import dynamic, family, self_attrs
from ddptui.lint.flow import Flow
from ddptui.lint.lint50 import caught, rank_arm, tested_around
from ddptui.lint.model import Hit
from ddptui.lint.script import Script

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_CATCHES = frozenset({"AttributeError", "Exception", "BaseException"})


def _class_level(fam: list[ast.ClassDef], attr: str) -> bool:
    """The class itself has `attr`: a class attribute, a method or a property
    (openpifpaf's trainer replaces its own `self.train_batch` method on rank 0 only)."""
    return any(
        (isinstance(st, ast.Assign | ast.AnnAssign)
        and any(
            isinstance(t, ast.Name) and t.id == attr
            for t in (st.targets if isinstance(st, ast.Assign) else [st.target])
        ))
        or (isinstance(st, (*_FUNCS, ast.ClassDef)) and st.name == attr)
        for cls in fam
        for st in cls.body
    )


def _runs(s: Script, read: ast.AST) -> bool:
    """The method holding the read is called or named somewhere in the project (a method
    left uncalled, its only call commented out, runs nowhere: RecBole-style trainers)."""
    fn = next((a for a in s.ancestors(read) if isinstance(a, _FUNCS)), None)
    if fn is None:
        return True
    if fn.name.startswith("__") or s.call_sites(fn):
        return True
    return any(
        isinstance(n, ast.Attribute | ast.Name)
        and (n.attr if isinstance(n, ast.Attribute) else n.id) == fn.name
        and isinstance(n.ctx, ast.Load)
        for n in s.nodes
    )


def _tested(s: Script, read: ast.Attribute, attr: str) -> bool:
    """Under `if self.A`, `if self.A is not None`, `if hasattr(self, "A")`, or in a `try`
    that catches AttributeError."""
    fn = next((a for a in s.ancestors(read) if isinstance(a, _FUNCS)), None)
    if fn is not None and caught(s, read, fn, _CATCHES):
        return True
    # `if self.writer:`, `self.writer is not None and self.writer.flush()`
    return tested_around(s, read, lambda test: _mentions(test, attr))


def _mentions(test: ast.AST, attr: str) -> bool:
    return any(
        (isinstance(n, ast.Attribute) and n.attr == attr) or (isinstance(n, ast.Constant) and n.value == attr)
        for n in ast.walk(test)
    )


def rank_only_attribute(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.distributed:
        return
    foreign = {
        n.attr
        for n in s.nodes
        if isinstance(n, ast.Attribute)
        and isinstance(n.ctx, ast.Store)
        and not (isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"))
    }
    said: set[tuple[int, str]] = set()
    # the classes that set an attribute of their own under a rank test
    candidates = {
        cls: None
        for n in s.nodes
        if isinstance(n, ast.Attribute)
        and isinstance(n.ctx, ast.Store)
        and isinstance(n.value, ast.Name)
        and n.value.id == "self"
        and (cls := s.class_of(n)) is not None
        and isinstance(f.local_guard(n), ast.If)
    }
    for cls in candidates:
        fam = family(s, cls)
        if any(dynamic(s, c) for c in fam):
            continue
        stores: dict[str, list[ast.Attribute]] = {}
        for c in fam:
            for n in self_attrs(s, c)[0]:
                stores.setdefault(n.attr, []).append(n)
        for attr, sites in stores.items():
            if attr in foreign or _class_level(fam, attr):
                continue
            arms = {rank_arm(f, n) for n in sites}
            if len(arms) != 1 or None in arms:
                continue
            arm = next(iter(arms))
            assert arm is not None
            guard = arm[0]
            reads = sorted(
                (
                    n
                    for c in fam
                    for n in self_attrs(s, c)[1]
                    if n.attr == attr
                    and not f.guarded(n)
                    and not _tested(s, n, attr)
                    and _runs(s, n)
                    and not any(n is x for st in getattr(guard, arm[1]) for x in ast.walk(st))
                ),
                key=lambda n: (s.path_of(n), n.lineno, n.col_offset),
            )
            key = (id(guard), attr)
            if not reads or key in said:
                continue
            said.add(key)
            read, store = reads[0], sites[0]
            yield Hit.at(
                "DDP-RANK-ONLY-NAME",
                read,
                (
                    f"`self.{attr}` is set only under the rank test at "
                    f"{s.path_of(guard)}:{guard.lineno} but read on every rank here: "
                    "AttributeError on the other ranks"
                ),
                also=((store, "set only under the rank test at"),),
                name=f"self.{attr}",
                test=ast.unparse(guard.test),
                read_line=read.lineno,
            )


RULES = (rank_only_attribute,)
