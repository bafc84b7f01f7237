"""Rules about ranks that run a different number of batches (DDP-UNEVEN-BATCH): data
split by rank by hand with nothing to even it out, and a strided index sampler on a
loader that keeps its last batch. Out of rules_data.py (which reads how the data is
split, and which these rules ask) to keep that module small."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddptui.lint.flow import Flow, ident
from ddptui.lint.lint24 import trimmed
from ddptui.lint.model import Hit
from ddptui.lint.rules_data import _has, is_loader, iterated, sharded
from ddptui.lint.script import Script
from ddptui.lint.syntax import const, kwarg, last


def _join_handed(s: Script, n: ast.AST) -> bool:
    """`ctx = model.join if ddp else nullcontext`, then `with ctx():` (CosyVoice's
    executor): the join method is taken, not called, and entered later."""
    parent = s.parents.get(n)
    return (
        isinstance(n, ast.Attribute)
        and n.attr == "join"
        and isinstance(n.ctx, ast.Load)
        and isinstance(n.value, ast.Name)
        and not (isinstance(parent, ast.Call) and parent.func is n)
    )


def uneven_batch(s: Script, f: Flow) -> Iterator[Hit]:
    if (
        not f.wrapper_calls
        or any(
            last(s.call_name(c)) == "Join"
            or (
                isinstance(c.func, ast.Attribute)
                and c.func.attr == "join"
                and f.is_ddp_value(c.func.value)
            )
            for c in s.calls
        )
        or any(_join_handed(s, n) for n in s.nodes)
    ):
        return  # DDP's join() evens out the batches
    for loop in f.training_loops():
        it = iterated(s, loop)
        if it is None:
            continue
        for o in s.origins(it):
            if is_loader(s, o):
                assert isinstance(o, ast.Call)
                data = kwarg(o, "dataset", 0)
                shard = sharded(s, f, data) if data is not None else None
                if (
                    shard is None
                    or _sampler_alternative(s, shard)
                    or trimmed(s, shard)
                    or _has(o, "sampler", 3)
                    or const(kwarg(o, "drop_last", 8)) is True
                ):
                    continue
                # the loader beside its loop, else the loop (where join() goes)
                at: ast.AST = o if s.scope_of(o) is s.scope_of(loop) else loop
                # a split the entry script makes itself, looped over in another file
                # (sparsify's `dataset.shard(world, rank)`): said at the split
                at = shard if s.module_of(shard) is s.entry is not s.module_of(at) else at
                if isinstance(shard, ast.Assign):
                    at = shard  # the length a dealing dataset class reports (lint46)
                yield _uneven(s, at, shard, ident(data) if data else None)
                return
        shard = sharded(s, f, it)
        if shard is not None and not _sampler_alternative(s, shard) and not trimmed(s, shard):
            yield _uneven(s, shard, shard, ident(it))
            return


def _sampler_alternative(s: Script, shard: ast.AST) -> bool:
    """The hand split is the other branch of one that builds a DistributedSampler
    (`if shuffle: DistributedSampler(...) else: Subset(data, range(rank, n, world))`,
    denoiser's distrib.loader): the author chose the split for the loaders that do not
    train (no shuffle, no backward, metrics averaged with their counts after the loop),
    where DistributedSampler would pad with repeated samples."""

    def samples(nodes: list[ast.stmt]) -> bool:
        return any(
            isinstance(n, ast.Call) and last(s.call_name(n)) == "DistributedSampler"
            for st in nodes
            for n in ast.walk(st)
        )

    for a in s.ancestors(shard):
        if not isinstance(a, ast.If):
            continue
        inside = [a.body, a.orelse]
        mine = next((b for b in inside if any(shard in set(ast.walk(st)) for st in b)), None)
        if mine is None:
            continue
        other = a.orelse if mine is a.body else a.body
        if samples(other):
            return True
    return False


def strided_sampler(s: Script, f: Flow) -> Iterator[Hit]:
    """`SubsetRandomSampler(np.arange(rank, len(data), world))` given to a DataLoader that
    keeps its last batch, in a project whose loops call collectives: ranks get
    len(data) // world or one more items, so they can run a different number of batches
    (Swin-Transformer's validation loader before DistributedSampler)."""
    if not f.distributed or not _collective_in_loop(s, f):
        return
    for loader in s.calls:
        if not is_loader(s, loader) or const(kwarg(loader, "drop_last", 8)) is True:
            continue
        value = kwarg(loader, "sampler", 3)
        for o in s.origins(value) if value is not None else []:
            if not (isinstance(o, ast.Call) and o.args):
                continue
            idx = next((i for i in s.origins(o.args[0]) if _strided_range(s, f, i)), None)
            if idx is not None:
                yield _uneven(s, o, idx, None)
                return


def _strided_range(s: Script, f: Flow, e: ast.AST) -> bool:
    return (
        isinstance(e, ast.Call)
        and last(s.call_name(e)) in ("arange", "range")
        and len(e.args) == 3
        and f.is_rank_expr(e.args[0])
        and "world" in ast.unparse(e.args[2]).lower()
    )


def _collective_in_loop(s: Script, f: Flow) -> bool:
    """A collective runs per iteration of some loop: directly or in a helper it calls."""
    for c in s.calls:
        if not f.collective(c):
            continue
        fn = s.scope_of(c)
        if any(isinstance(a, ast.For | ast.While) for a in s.ancestors(c)):
            return True
        if isinstance(fn, ast.FunctionDef) and any(
            fn in s.callees(k) and any(isinstance(a, ast.For | ast.While) for a in s.ancestors(k))
            for k in s.calls
        ):
            return True
    return False


def _uneven(s: Script, at: ast.AST, shard: ast.AST, data: str | None) -> Hit:
    line = getattr(shard, "lineno", "?")
    where = f"line {line}" if s.path_of(shard) == s.path_of(at) else f"{s.path_of(shard)}:{line}"
    return Hit.at(
        "DDP-UNEVEN-BATCH",
        at,
        (
            f"the data is split by rank by hand (`{ast.unparse(shard)[:60]}`, {where}) and "
            "nothing evens out the number of batches"
        ),
        dataset=data or "dataset",
    )


RULES = (uneven_batch, strided_sampler)
