"""Data plumbing the plain DDP-SAMPLER rule does not see: a project's own DataLoader
subclass built in a helper, loaders of a launcher that runs torch DDP for you
(ColossalAI's `torch_ddp`), and a per-rank shard that is computed and then not used
by the loader built next to it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.rules_data import is_loader, iterated, split_by_rank
from ddptui.lint.script import Script
from ddptui.lint.syntax import const, kwarg, last

# Launchers that run every process as a data-parallel rank of torch DDP
_DDP_LAUNCH: Final = ("colossalai.launch", "colossalai.initialize")
_DIST_SAMPLERS: Final = (
    "DistributedSampler",
    "DistributedSamplerWrapper",
    "DistributedBatchSampler",
)


def _loader_class(s: Script, func: ast.expr, depth: int = 0) -> bool:
    """A class of the project that derives from torch's DataLoader."""
    cls = s.class_named(func)
    if cls is None or depth > 3:
        return False
    return any(
        last(s.qualname(b) or ast.unparse(b)) == "DataLoader" or _loader_class(s, b, depth + 1)
        for b in cls.bases
    )


def _given(call: ast.Call, name: str) -> bool:
    if any(k.arg is None for k in call.keywords):
        return True  # `**kwargs` may carry it (precision first)
    v = kwarg(call, name)
    return v is not None and const(v) is not None


def _ddp_launched(s: Script) -> bool:
    return any(s.call_name(c).startswith(_DDP_LAUNCH) for c in s.calls)


def helper_loaders(s: Script, f: Flow) -> Iterator[Hit]:
    """The loaders the training loops iterate, when the plain rule cannot see them: a
    DataLoader subclass of the project (built in a helper, returned through a tuple), or
    any loader when a launcher runs torch DDP itself. Said at the loader; a loader built
    beside it over the same dataset without a sampler is said too."""
    ddp = bool(f.wrapper_calls)
    launched = not ddp and _ddp_launched(s)
    if not (ddp or launched) or f.uses("prepare", *_DIST_SAMPLERS):
        return
    found: list[ast.Call] = []
    for loop in f.training_loops():
        it = iterated(s, loop)
        for o in s.origins(it) if it is not None else []:
            if not isinstance(o, ast.Call) or o in found:
                continue
            if _loader_class(s, o.func) or (launched and is_loader(s, o)):
                found.append(o)
    for loader in list(found):
        scope = s.scope_of(loader)
        data = kwarg(loader, "dataset", 0)
        for other in ast.walk(scope):
            if (
                isinstance(other, ast.Call)
                and other not in found
                and (_loader_class(s, other.func) or is_loader(s, other))
                and data is not None
                and (od := kwarg(other, "dataset", 0)) is not None
                and ast.unparse(od) == ast.unparse(data)
            ):
                found.append(other)
    for loader in found:
        if _given(loader, "sampler") or _given(loader, "batch_sampler"):
            continue
        data = kwarg(loader, "dataset", 0)
        if data is not None and split_by_rank(s, f, data):
            continue
        parent = s.parents.get(loader)
        name = (
            ast.unparse(parent.targets[0])
            if isinstance(parent, ast.Assign) and len(parent.targets) == 1
            else last(s.call_name(loader)) or "loader"
        )
        yield Hit.at(
            "DDP-SAMPLER",
            loader,
            (
                f"`{name}` ({last(s.call_name(loader))}) has no DistributedSampler and the "
                "job runs data-parallel: every rank iterates the whole dataset"
            ),
            dataset=ast.unparse(data) if data is not None else "dataset",
            loader=name,
        )


_SPLITS: Final = frozenset({"split", "chunk", "array_split", "tensor_split"})


def _rank_pick(s: Script, f: Flow, expr: ast.expr) -> bool:
    """`idx.split(n)[rank]`, `np.array_split(x, w)[rank]`, `idx[rank::world]`."""
    for n in ast.walk(expr):
        if not isinstance(n, ast.Subscript):
            continue
        if isinstance(n.slice, ast.Slice):
            if n.slice.step is not None and f.is_rank_expr(n.slice):
                return True
        elif (
            isinstance(n.value, ast.Call)
            and last(s.call_name(n.value)) in _SPLITS
            and f.is_rank_expr(n.slice)
        ):
            return True
    return False


def unused_shard(s: Script, f: Flow) -> Iterator[Hit]:
    """`part = idx.split(n)[rank]` and then never read, while a loader built after it in
    the same function takes the whole set (pytorch_geometric#6312)."""
    if not f.distributed:
        return
    for node in s.nodes:
        if not (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and _rank_pick(s, f, node.value)
        ):
            continue
        name = node.targets[0].id
        scope = s.scope_of(node)
        later = [
            n
            for n in ast.walk(scope)
            if isinstance(n, ast.Name)
            and n.id == name
            and isinstance(n.ctx, ast.Load)
            and n.lineno > (node.end_lineno or node.lineno)
        ]
        if later:
            continue
        loader = next(
            (
                c
                for c in ast.walk(scope)
                if isinstance(c, ast.Call)
                and c.lineno > node.lineno
                and last(s.call_name(c)).endswith("Loader")
            ),
            None,
        )
        if loader is None:
            continue
        yield Hit.at(
            "DDP-SAMPLER",
            loader,
            (
                f"`{name}` (line {node.lineno}) is this rank's part of the data, but it is "
                f"never used: `{last(s.call_name(loader))}(...)` takes the whole set, so every "
                "rank trains on all of it"
            ),
            dataset=name,
            loader=last(s.call_name(loader)),
        )


RULES = (helper_loaders, unused_shard)
