"""Round 29 (blind batch V, what lint28 left): a per-rank shard that strides by the
number of ranks but starts every rank at 0 (stanford-futuredata/ColBERT 501c29d
colbert/data/examples.py:44), and a local rank read from the scheduler's variable before
the launcher's `LOCAL_RANK` (mlfoundations/open_clip 6382b10 src/training/distributed.py:44)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.project import FuncNode
from ddptui.lint.script import Script
from ddptui.lint.syntax import const

# parameter names for this process's place in the job and for the job's size
_RANK: Final = re.compile(r"^(global_|process_|proc_)?rank(_id)?$")
_WORLD: Final = re.compile(r"^(n_?ranks|num_ranks|world_size|num_replicas|world|n_?procs)$")


def _params(fn: FuncNode) -> list[str]:
    return [a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]]


def _zero(node: ast.expr | None) -> bool:
    return node is None or const(node) == 0


def _used_as_index(var: str, within: ast.AST) -> bool:
    """`data[var]`: the loop variable picks one item (not a slice's bound: `data[i:i+n]`
    groups consecutive items, a batching, not a shard)."""
    return any(
        isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Name) and n.slice.id == var
        for n in ast.walk(within)
    )


def _stride_shards(fn: FuncNode, world: str) -> Iterator[ast.AST]:
    """Every-`world`-th item from index 0: `[d[i] for i in range(0, len(d), world)]`,
    `for i in range(0, n, world): out.append(d[i])`, `d[::world]`, `d[0::world]`."""
    for n in own_nodes(fn):
        if isinstance(n, ast.Slice):
            if isinstance(n.step, ast.Name) and n.step.id == world and _zero(n.lower):
                yield n
            continue
        gens: list[tuple[ast.expr, ast.expr, ast.AST]] = []
        if isinstance(n, ast.ListComp | ast.GeneratorExp | ast.SetComp):
            gens = [(g.target, g.iter, n.elt) for g in n.generators]
        elif isinstance(n, ast.For):
            gens = [(n.target, n.iter, ast.Module(body=n.body, type_ignores=[]))]
        for target, it, body in gens:
            if not (
                isinstance(target, ast.Name)
                and isinstance(it, ast.Call)
                and isinstance(it.func, ast.Name)
                and it.func.id == "range"
                and len(it.args) == 3
                and _zero(it.args[0])
                and isinstance(it.args[2], ast.Name)
                and it.args[2].id == world
            ):
                continue
            if _used_as_index(target.id, body):
                yield it


def _rank_only_checked(s: Script, fn: FuncNode, rank: str) -> bool:
    """The rank parameter is read only by `assert`s and `if` tests: nothing it selects."""
    for n in own_nodes(fn):
        if not (isinstance(n, ast.Name) and n.id == rank and isinstance(n.ctx, ast.Load)):
            continue
        stmt = next((a for a in s.ancestors(n) if isinstance(a, ast.stmt)), None)
        if isinstance(stmt, ast.Assert):
            continue
        if isinstance(stmt, ast.If) and any(m is n for m in ast.walk(stmt.test)):
            continue
        return False
    return True


def shard_without_rank(s: Script, f: Flow) -> Iterator[Hit]:
    """A function given the rank and the number of ranks that keeps every N-th item
    starting at item 0: each rank keeps the same items, so the ranks train on one shard
    (1/N of the data) N times over while the rest is never seen. The offset is the rank:
    `range(rank, len(d), nranks)`, `d[rank::nranks]`."""
    if not f.distributed:
        return
    for fn in [n for n in s.nodes if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]:
        names = _params(fn)
        ranks = [p for p in names if _RANK.match(p)]
        worlds = [p for p in names if _WORLD.match(p)]
        if len(ranks) != 1 or len(worlds) != 1 or not _rank_only_checked(s, fn, ranks[0]):
            continue
        for at in _stride_shards(fn, worlds[0]):
            yield Hit.at(
                "DDP-SAMPLER",
                at,
                (
                    f"`{fn.name}` takes every `{worlds[0]}`-th item starting at 0 although it "
                    f"is given `{ranks[0]}`: every rank keeps the same items (1/{worlds[0]} of "
                    f"the data, the rest never seen); start at `{ranks[0]}`"
                ),
                dataset="dataset",
                loader="loader",
            )
            break


# --- the scheduler's local id preferred to the launcher's LOCAL_RANK ----------------------
# `for v in ('SLURM_LOCALID', ..., 'LOCAL_RANK'): if v in os.environ: ...; break`: torchrun
# inside a Slurm allocation (one task per node, N workers each) leaves SLURM_LOCALID at the
# task's id for all N workers, so the first-found lookup gives each the same GPU; only a
# launcher sets LOCAL_RANK, so read it first (open_clip 6e00e7f "prioritize LOCAL_RANK").

_LAUNCHER_LOCAL: Final = "LOCAL_RANK"
_SCHEDULER_LOCAL: Final = re.compile(r"^(SLURM_LOCALID|MPI_LOCALRANKID|\w+_LOCAL_RANK)$")


def _first_found(s: Script, loop: ast.For) -> bool:
    """The loop reads the variable it names and stops at the first one set."""
    if not isinstance(loop.target, ast.Name):
        return False
    var = loop.target.id
    reads = any(
        isinstance(n, ast.Subscript | ast.Call)
        and ("environ" in ast.unparse(n) or "getenv" in ast.unparse(n))
        and any(isinstance(m, ast.Name) and m.id == var for m in ast.walk(n))
        for st in loop.body
        for n in ast.walk(st)
    )
    stops = any(isinstance(n, ast.Break | ast.Return) for st in loop.body for n in ast.walk(st))
    return reads and stops


def scheduler_local_rank_first(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.distributed:
        return
    for loop in s.nodes:
        if not isinstance(loop, ast.For) or not isinstance(loop.iter, ast.Tuple | ast.List):
            continue
        names = [const(e) for e in loop.iter.elts]
        if _LAUNCHER_LOCAL not in names or not _first_found(s, loop):
            continue
        before = [
            n for n in names[: names.index(_LAUNCHER_LOCAL)]
            if isinstance(n, str) and _SCHEDULER_LOCAL.match(n)
        ]  # fmt: skip
        if not before:
            continue
        yield Hit.at(
            "DDP-HARDCODED-DEVICE",
            loop,
            (
                f"the local rank is read from `{before[0]}` before `LOCAL_RANK`: under "
                "torchrun inside a scheduler's job every worker of a node finds the "
                f"scheduler's one task id in `{before[0]}` and takes the same GPU; read "
                "`LOCAL_RANK` first (only a launcher sets it)"
            ),
            severity="warning",
            seen=f"`{before[0]}` read before `LOCAL_RANK`",
        )


RULES = (shard_without_rank, scheduler_local_rank_first)
