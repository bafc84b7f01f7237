"""Round 31 (blind batch X): a project sampler that never reads the rank, handed to the
training DataLoader of a DDP run (clovaai/voxceleb_trainer 3883cd4 DatasetLoader.py
`voxceleb_sampler`: `__iter__` shuffles every speaker's utterances and returns the whole
list on every rank; the fix slices it per rank, as DistributedSampler does)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow, ident
from ddptui.lint.lint30 import _bases
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.rules_data import (
    _assigned_name,
    _reads_rank,
    split_by_rank,
    training_loaders,
)
from ddptui.lint.script import Script
from ddptui.lint.syntax import kwarg

# words of a class that may pick this rank's part under another name (precision first)
_PART_WORDS: Final = re.compile(r"rank|world|replica|shard|node|partition|distributed", re.I)


def _external_bases(s: Script, cls: ast.ClassDef) -> set[str]:
    """The names of the non-project classes the class derives from (its own and its
    project bases')."""
    return {
        name
        for c in _bases(s, cls)
        for b in c.bases
        if s.class_named(b) is None and (name := ident(b)) is not None
    }


def _mentions_part(s: Script, cls: ast.ClassDef) -> bool:
    return any(
        isinstance(n, ast.Name | ast.Attribute | ast.arg | ast.keyword)
        and _PART_WORDS.search(
            n.id
            if isinstance(n, ast.Name)
            else n.attr
            if isinstance(n, ast.Attribute)
            else n.arg or ""
        )
        for c in _bases(s, cls)
        for n in ast.walk(c)
    )


def _iter_return(cls: ast.ClassDef) -> ast.AST | None:
    """The last `return` (or `yield`) of the class's own `__iter__`: where the indices
    every rank iterates are handed out."""
    for fn in cls.body:
        if isinstance(fn, ast.FunctionDef) and fn.name == "__iter__":
            outs = [
                n for n in own_nodes(fn) if isinstance(n, ast.Return | ast.Yield | ast.YieldFrom)
            ]
            return max(outs, key=lambda n: n.lineno, default=None)
    return None


def _local_class(s: Script, f: Flow, o: ast.expr) -> ast.ClassDef | None:
    """The project Sampler subclass `o` builds, when nothing about it picks a part by
    rank: not a DistributedSampler's subclass, given nothing rank-valued, already split
    by rank or another sampler (a batch sampler over one: that one splits), and never
    reading the rank or world size (itself, its project bases or a class it builds)."""
    cls = s.class_named(o.func) if isinstance(o, ast.Call) else None
    if not isinstance(o, ast.Call) or cls is None:
        return None
    bases = _external_bases(s, cls)
    args = [*o.args, *(k.value for k in o.keywords)]
    if (
        not any(b.endswith("Sampler") for b in bases)
        or any("Distributed" in b for b in bases)
        or any(k.arg is None for k in o.keywords)
        or any(f.rank_valued(a) or f.is_rank_expr(a) or split_by_rank(s, f, a) for a in args)
        or any(
            isinstance(x, ast.Call) and "Sampler" in s.call_name(x)
            for a in args
            for x in [a, *s.origins(a)]
        )
        or any(_reads_rank(s, f, c) or _mentions_part(s, c) for c in _bases(s, cls))
    ):
        return None
    return cls


def _whole_data_sampler(
    s: Script, f: Flow, value: ast.expr
) -> tuple[ast.Call, ast.ClassDef] | None:
    """`sampler=MySampler(dataset, ...)`: every origin a project sampler that reads no
    rank (_local_class)."""
    found: tuple[ast.Call, ast.ClassDef] | None = None
    for o in s.origins(value):
        cls = _local_class(s, f, o)
        if cls is None or not isinstance(o, ast.Call):
            return None
        found = (o, cls)
    return found


def project_sampler_whole_data(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.torch_ddp_calls:
        return
    for loader in training_loaders(s, f):
        value = kwarg(loader, "sampler", 3) or kwarg(loader, "batch_sampler", 4)
        if value is None:
            continue
        data = kwarg(loader, "dataset", 0)
        if data is not None and split_by_rank(s, f, data):
            continue
        picked = _whole_data_sampler(s, f, value)
        if picked is None:
            continue
        call, cls = picked
        at = _iter_return(cls) or call
        yield Hit.at(
            "DDP-SAMPLER",
            at,
            (
                f"the training loader's sampler `{cls.name}` never reads the rank: every "
                "rank iterates the whole dataset (pick this rank's part of the indices, as "
                "DistributedSampler does)"
            ),
            dataset=ast.unparse(data) if data is not None else "dataset",
            loader=_assigned_name(s, loader) or "loader",
        )


# --- find_unused_parameters flipped on a schedule that freezes parameters ---------------
# xinntao/BasicSR (edvr_model.py `optimize_parameters`: the non-fusion parameters frozen
# for the first `train_tsa_iter` iterations, then `self.net_g.find_unused_parameters =
# False`) and open-mmlab/mmediting (basicvsr.py `train_step`: SPyNet frozen for
# `fix_iter` steps with `self.generator.find_unused_parameters = True`, PR #290 sets the
# flag in the config instead). DDP reads the flag when it builds its reducer: toggled in
# the step, the wrapper and its reducer disagree ("Expected to have finished reduction in
# the prior iteration", mmediting issue #273).


def _sets_requires_grad(fn: ast.AST) -> bool:
    """The function freezes or unfreezes parameters: `p.requires_grad = False`,
    `m.requires_grad_(True)`."""
    for n in own_nodes(fn):
        if isinstance(n, ast.Assign) and any(
            isinstance(t, ast.Attribute) and t.attr == "requires_grad" for t in n.targets
        ):
            return True
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "requires_grad_"
        ):
            return True
    return False


def toggled_find_unused(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.distributed:
        return
    said: set[ast.AST] = set()
    for n in dict.fromkeys(s.nodes):  # the reached code
        if not (
            isinstance(n, ast.Assign)
            and len(n.targets) == 1
            and isinstance(t := n.targets[0], ast.Attribute)
            and t.attr == "find_unused_parameters"
            and isinstance(n.value, ast.Constant)
            and isinstance(n.value.value, bool)
        ):
            continue
        fn = s.scope_of(n)
        if (
            not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
            or fn.name == "__init__"
            or fn in said
            or not _sets_requires_grad(fn)
        ):
            continue
        said.add(fn)
        yield Hit.at(
            "DDP-FIND-UNUSED",
            n,
            (
                f"`{ast.unparse(n)}` in `{fn.name}()`, which freezes or unfreezes "
                "parameters: DDP read find_unused_parameters when it built its reducer, "
                'so the flag toggled mid-run does not match it ("Expected to have '
                'finished reduction"); build the wrapper with '
                "find_unused_parameters=True for a run that freezes parameters"
            ),
        )


RULES = (project_sampler_whole_data, toggled_find_unused)
