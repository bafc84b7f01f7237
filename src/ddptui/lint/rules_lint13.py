"""A sampler that deals whole shards to the ranks (blind batch J, lint13): its
`__iter__` takes `shards[self.rank::self.num_replicas]` and yields every sample of each
of its shards, with nothing that pads or cuts the ranks to one length. Shards differ in
size, so ranks iterate different numbers of samples and batches, and the rank with the
fewest leaves the loop while the others wait in the all-reduce of their extra batches
(particleflow's DistributedShardConsecutiveSampler before PR #467)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.script import Script

_EVEN_WORDS = ("total_size", "num_samples", "pad", "drop_last", "min(", "[:n", "truncate")


def shard_sampler(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.distributed:
        return
    for fn in dict.fromkeys(n for n in s.nodes if isinstance(n, ast.FunctionDef)):
        if fn.name != "__iter__":
            continue
        text = ast.unparse(fn)
        if any(w in text for w in _EVEN_WORDS):
            continue  # padded or cut to one length per rank (torch's own DistributedSampler)
        for n in own_nodes(fn):
            if not (isinstance(n, ast.Assign) and len(n.targets) == 1):
                continue
            tgt = n.targets[0]
            if isinstance(tgt, ast.Name) and _dealt(f, n.value) and _expanded(fn, tgt.id):
                yield Hit.at(
                    "DDP-UNEVEN-BATCH",
                    n,
                    (
                        f"`{ast.unparse(n)[:70]}` deals whole shards to the ranks, and each rank "
                        "yields every sample of its shards: shards of different sizes give the "
                        "ranks different numbers of batches"
                    ),
                    dataset=ast.unparse(n.value.value) if isinstance(n.value, ast.Subscript) else "",
                )


def _dealt(f: Flow, e: ast.expr) -> bool:
    """`shards[self.rank::self.num_replicas]`: every world-size-th item from the rank."""
    if not (isinstance(e, ast.Subscript) and isinstance(e.slice, ast.Slice)):
        return False
    sl = e.slice
    return (
        sl.lower is not None
        and sl.upper is None
        and sl.step is not None
        and (f.is_rank_expr(sl.lower) or "rank" in ast.unparse(sl.lower).lower())
        and any(w in ast.unparse(sl.step).lower() for w in ("replicas", "world", "num_ranks"))
    )


def _expanded(fn: ast.FunctionDef, name: str) -> bool:
    """`for start, end in mine: ... range(start, end) ...`: each item is a group of
    samples, not one sample."""
    for loop in own_nodes(fn):
        if (
            isinstance(loop, ast.For)
            and isinstance(loop.iter, ast.Name)
            and loop.iter.id == name
            and any(
                (isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == "range")
                or isinstance(c, ast.For | ast.YieldFrom)
                or (isinstance(c, ast.Attribute) and c.attr == "extend")
                for st in loop.body
                for c in ast.walk(st)
            )
        ):
            return True
    return False


RULES = (shard_sampler,)
