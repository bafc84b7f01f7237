"""Round 39 (blind batch AD): a training loop that calls `loader.sampler.set_epoch(...)`
on a loader it gets from a plug-in (`self.downstream.model.get_dataloader('train')`, a
method of whichever task module the run loads by name) states that every loader reaching
it carries a DistributedSampler. The project's own DataLoaders that shuffle without a
sampler (`shuffle=True`, `shuffle=(split == 'train')`, a plain `WeightedRandomSampler`)
break that: every rank iterates the whole dataset, and `RandomSampler` has no
`set_epoch` (s3prl/s3prl 0fa0f78 downstream/emotion/expert.py, fluent_commands,
voxceleb1, ctc/data.py, speech_commands; the fix, PR #146, gives each a
DistributedSampler when the group is initialized).

Only when the loop's loader is not a DataLoader the lint can follow (then DDP-SAMPLER's
plain reading decides), and the set_epoch call is not itself guarded by a test of the
sampler (`hasattr(loader.sampler, "set_epoch")`, `isinstance(..., DistributedSampler)`:
the loop then accepts local samplers)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.rules_data import (
    _LOCAL_SAMPLERS,
    _assigned_name,
    _single_process_arm,
    is_loader,
    iterated,
    split_by_rank,
)
from ddptui.lint.script import Script
from ddptui.lint.syntax import const, kwarg, last

_EVAL: Final = re.compile(r"val|test|eval|dev|infer|predict", re.I)
_SAMPLER_TEST: Final = re.compile(r"hasattr|isinstance|set_epoch|Distributed")


def _epoch_on_unfollowed_loader(s: Script, f: Flow) -> ast.Call | None:
    """The `X.sampler.set_epoch(...)` call of a function whose training loop iterates `X`,
    where `X` comes from no DataLoader the lint follows."""
    for loop in f.training_loops():
        it = iterated(s, loop)
        if not isinstance(it, ast.Name) or any(is_loader(s, o) for o in s.origins(it)):
            continue
        scope = s.scope_of(loop)
        for n in own_nodes(scope):
            if not (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr == "set_epoch"
                and isinstance(n.func.value, ast.Attribute)
                and n.func.value.attr == "sampler"
                and isinstance(n.func.value.value, ast.Name)
                and n.func.value.value.id == it.id
            ):
                continue
            if not _sampler_tested(s, n):
                return n
    return None


def _sampler_tested(s: Script, call: ast.Call) -> bool:
    """`if hasattr(loader.sampler, "set_epoch"):` and the like around the call."""
    for a in s.ancestors(call):
        if isinstance(a, ast.If | ast.IfExp) and _SAMPLER_TEST.search(ast.unparse(a.test)):
            return True
        if isinstance(a, ast.Try):
            return True  # an AttributeError caught: local samplers accepted
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return False
    return False


def _shuffles(s: Script, loader: ast.Call) -> ast.AST | None:
    """Where a sampler-less loader shuffles (the line its fix changes): its `shuffle=`
    value (anything but a constant false), or its plain local random sampler; None when it does not shuffle or may be
    given a sampler."""
    if any(k.arg is None for k in loader.keywords) or kwarg(loader, "batch_sampler", 4):
        return None
    given = kwarg(loader, "sampler", 3)
    if given is not None:
        if isinstance(given, ast.Call) and last(s.call_name(given)) in _LOCAL_SAMPLERS - {
            "SequentialSampler"
        }:
            return given
        return None
    shuffle = kwarg(loader, "shuffle", 2)
    if shuffle is None or const(shuffle) in (False, None, 0):
        return None
    return shuffle


def _eval_side(s: Script, loader: ast.Call) -> bool:
    name = _assigned_name(s, loader) or ""
    scope = s.scope_of(loader)
    fn = scope.name if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef) else ""
    return bool(_EVAL.search(name) or _EVAL.search(fn))


def plugin_loader_sampler(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.ddp_calls:
        return
    epoch = _epoch_on_unfollowed_loader(s, f)
    if epoch is None:
        return
    for loader in s.calls:
        if not is_loader(s, loader) or s.module_of(loader) is s.module_of(epoch):
            continue
        at = _shuffles(s, loader)
        if at is None or _eval_side(s, loader):
            continue
        data = kwarg(loader, "dataset", 0)
        if (data is not None and split_by_rank(s, f, data)) or _single_process_arm(s, loader):
            continue
        yield Hit.at(
            "DDP-SAMPLER",
            at,
            (
                f"`{_assigned_name(s, loader) or 'DataLoader'}` shuffles without a "
                f"DistributedSampler, but the training loop calls "
                f"`{ast.unparse(epoch.func)}()` on the loader it gets (line {epoch.lineno}): "
                "every rank iterates the whole dataset"
            ),
            dataset=ast.unparse(data) if data else "dataset",
            loader=_assigned_name(s, loader) or "loader",
        )


RULES = (plugin_loader_sampler,)
