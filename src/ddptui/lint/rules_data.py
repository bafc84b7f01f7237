"""Rules about the data each rank sees: the sampler, its epoch, shuffle, its seed, and
the readings of a split made by hand that rules_uneven.py builds on (pitfalls 3, 4, 18,
20)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow, ident
from ddptui.lint.lint46 import dealing_class
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.script import Script
from ddptui.lint.syntax import const, kwarg, last

_UNWRAP: Final = frozenset({"enumerate", "tqdm", "iter", "zip", "islice", "cycle", "track"})
_STREAMING: Final = re.compile(r"Iterable|Stream|Shard|WebDataset|IterDataPipe", re.I)
_EVAL_NAME: Final = re.compile(r"val|test|eval|dev_", re.I)
_SHARDERS: Final = frozenset({"split_dataset_by_node", "shard", "split_by_node"})
_EPOCH: Final = re.compile(r"epoch", re.I)
_LOCAL_SAMPLERS: Final = frozenset({"RandomSampler", "SequentialSampler", "WeightedRandomSampler"})
_SPLITTERS: Final = frozenset({"array_split", "chunk", "tensor_split", "split"})


# torch's DataLoader and drop-in loaders that take the same sampler/shuffle arguments
# (torchdata's StatefulDataLoader: meta-pytorch/torchft train_ddp.py)
_LOADERS: Final = frozenset({"DataLoader", "StatefulDataLoader"})


def is_loader(s: Script, call: ast.AST) -> bool:
    return isinstance(call, ast.Call) and last(s.call_name(call)) in _LOADERS


def iterated(s: Script, loop: ast.AST) -> ast.expr | None:
    """What a for loop iterates, through enumerate/tqdm/zip/... (None for other nodes)."""
    if not isinstance(loop, ast.For | ast.AsyncFor):
        return None
    it = loop.iter
    while isinstance(it, ast.Call) and it.args and last(s.call_name(it)) in _UNWRAP:
        it = it.args[0]
    return it


def training_loaders(s: Script, f: Flow) -> list[ast.Call]:
    """The DataLoaders that training loops iterate, names followed across functions."""
    found: list[ast.Call] = []
    for loop in f.training_loops():
        it = iterated(s, loop)
        if it is None:
            continue
        for o in s.origins(it):
            if isinstance(o, ast.Call) and is_loader(s, o) and o not in found:
                found.append(o)
    return found


def _has(call: ast.Call, name: str, position: int, *, maybe: bool = True) -> bool:
    """The call is given `name`; with `maybe`, also when `**kwargs` may carry it."""
    if maybe and any(k.arg is None for k in call.keywords):
        return True  # `**kwargs`: may carry it (precision first)
    v = kwarg(call, name, position)
    return v is not None and const(v) is not None


def sharded(s: Script, f: Flow, expr: ast.expr, depth: int = 0) -> ast.AST | None:
    k = ("sharded", expr, depth)
    if k not in f.memo:
        f.memo[k] = None  # while computing: a cycle finds nothing more
        f.memo[k] = _sharded(s, f, expr, depth)
    found = f.memo[k]
    return found if isinstance(found, ast.AST) else None


def _sharded(  # noqa: PLR0911 - one case per way of splitting by hand
    s: Script, f: Flow, expr: ast.expr, depth: int = 0
) -> ast.AST | None:
    """The expression where a dataset is split by rank by hand, if it is: a slice or an
    index by rank (`data[rank::world]`, `np.array_split(x, world)[rank]`), `Subset` with
    rank-computed indices, `.shard(...)`, `split_dataset_by_node`, or an IterableDataset
    of this file that reads the rank; followed through wrappers like
    `TensorDataset(torch.from_numpy(part))`."""
    for o in s.origins(expr):
        if isinstance(o, ast.Subscript) and _uneven_pick(s, f, o):
            return o
        if not isinstance(o, ast.Call):
            continue
        name = last(s.call_name(o))
        if name in _SHARDERS:
            return o
        parts = [*o.args, *(k.value for k in o.keywords)]
        if any(isinstance(p, ast.Subscript) and _uneven_pick(s, f, p) for p in parts):
            return o
        if name == "Subset" and len(o.args) > 1 and f.is_rank_expr(o.args[1]):
            return o
        cls = s.classes.get(name) if isinstance(o.func, ast.Name) else None
        if (
            cls is not None
            and any("Iterable" in ast.unparse(b) for b in cls.bases)
            and _reads_rank(s, f, cls)
        ):
            return o
        dealt = dealing_class(s, f, o)
        if dealt is not None:
            return dealt
        if depth < 3:
            for p in parts:
                inner = sharded(s, f, p, depth + 1)
                if inner is not None:
                    return inner
    return None


def _reads_rank(s: Script, f: Flow, cls: ast.ClassDef) -> bool:
    """The class reads the rank, itself or in a project class it builds (a sampler
    object that picks `data[rank::world]`)."""
    if _mentions_rank(f, cls):
        return True
    return any(
        isinstance(n, ast.Call)
        and (inner := s.class_named(n.func)) is not None
        and inner is not cls
        and _mentions_rank(f, inner)
        for n in ast.walk(cls)
    )


def _mentions_rank(f: Flow, cls: ast.ClassDef) -> bool:
    return any(
        isinstance(n, ast.Name | ast.Attribute | ast.Call) and f.rank_valued(n)
        for n in ast.walk(cls)
    )


def _uneven_pick(s: Script, f: Flow, sub: ast.Subscript) -> bool:
    """`x[rank::world]` (strided: sizes differ by one) or `np.array_split(x, n)[rank]`;
    not a block `x[rank * n:(rank + 1) * n]`, whose shards are equal."""
    sl = sub.slice
    if isinstance(sl, ast.Slice):
        return sl.step is not None and f.is_rank_expr(sl)
    value = sub.value
    return (
        f.is_rank_expr(sl)
        and isinstance(value, ast.Call)
        and last(s.call_name(value)) in _SPLITTERS
        # `idx.split(n // world)[rank]`: chunks of one size, the remainder in a chunk no
        # rank takes (pytorch_geometric's distributed_sampling.py)
        and not (
            last(s.call_name(value)) == "split"
            and value.args
            and isinstance(value.args[0], ast.BinOp)
            and isinstance(value.args[0].op, ast.FloorDiv)
        )
    )


def split_by_rank(s: Script, f: Flow, expr: ast.expr, depth: int = 0) -> bool:
    """Whether the dataset is this rank's part already (evenly or not), or a stream that
    splits itself (an iterable dataset takes no sampler)."""
    k = ("split", expr, depth)
    if k not in f.memo:
        f.memo[k] = False
        f.memo[k] = _split_by_rank(s, f, expr, depth)
    return f.memo[k] is True


def _split_by_rank(s: Script, f: Flow, expr: ast.expr, depth: int) -> bool:
    # (not yet a dataset class that deals its files, lint46: the loader-side rules keep
    # their findings on it until a reading of the sampler built and never given stands)
    shard = sharded(s, f, expr)
    if shard is not None and not isinstance(shard, ast.Assign):
        return True
    for o in s.origins(expr):
        if isinstance(o, ast.Subscript) and any(
            isinstance(n, ast.Subscript) and f.is_rank_expr(n.slice) for n in ast.walk(o)
        ):
            return True  # `paths[rank::world]`, `paths[shard:][::num_shards]`
        if isinstance(o, ast.Call) and any(
            f.rank_valued(a) for a in [*o.args, *(k.value for k in o.keywords)]
        ):
            return True  # `ImageDataset(paths, shard=rank, num_shards=world)` shards itself
        if isinstance(o, ast.Call) and (
            _STREAMING.search(s.call_name(o))
            or any(k.arg in ("nodesplitter", "streaming") for k in o.keywords)
            or any(
                isinstance(n, ast.Name | ast.Attribute) and ident(n) in _SHARDERS
                for n in ast.walk(o)
            )
        ):
            return True
        if isinstance(o, ast.Call) and (
            (depth == 0 and _builder_picks_rank(s, f, o))
            or (depth < 3 and any(split_by_rank(s, f, p, depth + 1) for p in _parts(o)))
        ):
            return True
    return False


def _parts(call: ast.Call) -> list[ast.expr]:
    return [*call.args, *(k.value for k in call.keywords)]


def _picks_part(s: Script, f: Flow, sub: ast.Subscript) -> bool:
    """`x[rank::world]`, `np.array_split(x, world)[rank]`, `list(x.chunk(n))[rank]`: a part
    of the data picked by rank (not any value that a rank indexes)."""
    if isinstance(sub.slice, ast.Slice):
        return f.is_rank_expr(sub.slice)
    inner = sub.value
    if isinstance(inner, ast.Call) and last(s.call_name(inner)) in ("list", "tuple") and inner.args:
        inner = inner.args[0]
    return (
        isinstance(inner, ast.Call)
        and last(s.call_name(inner)) in _SPLITTERS
        and f.is_rank_expr(sub.slice)
    )


def _builder_picks_rank(s: Script, f: Flow, call: ast.Call) -> bool:
    """The dataset comes straight from a project function that picks this rank's part inside it,
    itself or in the project functions it calls (3 calls deep, 30 functions at most):
    `load_data(opt)` -> `load_dataset(path)` ->
    `np.array_split(files, get_world_size())[get_rank()]` (facebookresearch/contriever's
    src/data.py). Each rank then iterates only its own files: a local sampler is right."""
    seen: set[object] = set()
    todo = [(fn, 0) for fn in s.callees(call)]
    while todo and len(seen) < 30:
        fn, depth = todo.pop()
        if fn in seen:
            continue
        seen.add(fn)
        for n in own_nodes(fn):
            if isinstance(n, ast.Subscript) and _picks_part(s, f, n):
                return True
            if isinstance(n, ast.Call) and depth < 3:
                todo.extend((g, depth + 1) for g in s.callees(n))
    return False


def sampler(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.wrapper_calls or f.uses("prepare"):
        return
    loaders = training_loaders(s, f)
    if not loaders and not f.uses("DistributedSampler") and f.training_loops():
        loaders = [
            c
            for c in s.calls
            if is_loader(s, c) and not _EVAL_NAME.search(_assigned_name(s, c) or "")
        ]
    for loader in loaders:
        local = _local_sampler(s, kwarg(loader, "sampler", 3))
        if local is None and (_has(loader, "sampler", 3) or _has(loader, "batch_sampler", 4)):
            continue
        data = kwarg(loader, "dataset", 0)
        if data is not None and split_by_rank(s, f, data):
            continue
        if local is None and _single_process_arm(s, loader):
            continue
        yield Hit.at(
            "DDP-SAMPLER",
            local or loader,
            (
                f"`{_assigned_name(s, loader) or 'DataLoader'}` has no DistributedSampler: every "
                "rank iterates the whole dataset"
            ),
            dataset=ast.unparse(data) if data else "dataset",
            loader=_assigned_name(s, loader) or "loader",
            also=_shuffle_place(loader, local or loader),
        )


def _shuffle_place(loader: ast.Call, at: ast.AST) -> tuple[tuple[ast.AST, str], ...]:
    """`shuffle=True` on a line of its own in the loader's call: the fix replaces it with
    the DistributedSampler (hzxie/CityDreamer fffc9ff core/train.py), so it is a place too."""
    shuffle = kwarg(loader, "shuffle")
    if shuffle is None or const(shuffle) is not True or shuffle.lineno == getattr(at, "lineno", 0):
        return ()
    return ((shuffle, "shuffles the whole dataset in every process at"),)


def _single_process_arm(s: Script, loader: ast.Call) -> bool:
    """The loader is one arm of an `if` whose other arm builds the loader with a sampler
    (`if dist.is_initialized(): DataLoader(ds, batch_sampler=...) else: DataLoader(ds,
    shuffle=True)`, CoinCheung/BiSeNet lib/data/get_dataloader.py): the arm without one
    is the single-process run, chosen by the author."""
    child: ast.AST = loader
    for a in s.ancestors(loader):
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.Module):
            return False
        if isinstance(a, ast.If | ast.IfExp) and child is not a.test:
            body = a.body if isinstance(a.body, list) else [a.body]
            orelse = a.orelse if isinstance(a.orelse, list) else [a.orelse]
            other = orelse if any(child is n for n in body) else body
            if any(
                (isinstance(n, ast.Call) and is_loader(s, n) and _given_sampler(n))
                or (isinstance(n, ast.Call) and "DistributedSampler" in s.call_name(n))
                for st in other
                for n in ast.walk(st)
            ):
                return True
        child = a
    return False


def _given_sampler(loader: ast.Call) -> bool:
    return any(
        v is not None and not (isinstance(v, ast.Constant) and v.value is None)
        for v in (kwarg(loader, "sampler", 3), kwarg(loader, "batch_sampler", 4))
    )


def _local_sampler(s: Script, value: ast.expr | None) -> ast.Call | None:
    """`sampler=RandomSampler(data)` (directly or through a name): a sampler over the
    whole dataset on every rank, reported where the DistributedSampler belongs."""
    if value is None:
        return None
    origins = s.origins(value)
    local = [
        o for o in origins if isinstance(o, ast.Call) and last(s.call_name(o)) in _LOCAL_SAMPLERS
    ]
    # every origin: `RandomSampler(d) if local_rank == -1 else DistributedSampler(d)` is right
    return local[0] if local and len(local) == len(origins) else None


def _assigned_name(s: Script, node: ast.AST) -> str | None:
    parent = s.parents.get(node)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
        return ast.unparse(parent.targets[0])
    if isinstance(parent, ast.Return):
        return None
    return None


def set_epoch(s: Script, f: Flow) -> Iterator[Hit]:
    samplers = [
        c
        for c in s.calls
        if "DistributedSampler" in {last(n) for n in s.call_names(c)}
        and const(kwarg(c, "shuffle", 3)) is not False
    ]
    if not samplers or f.uses("set_epoch"):
        return
    loops = f.training_loops()
    epoch_loops = [
        loop
        for loop in loops
        if [m for m in loops if m is not loop and loop in set(s.ancestors(m))]
        or _calls_training_loop(s, f, loop, set())
    ]
    # the epoch loop calls into code not followed (a trainer from a registry): a loop
    # over epochs by its name
    epoch_loops += [n for n in s.nodes if isinstance(n, ast.For | ast.While) and _epoch_named(n)]
    # `while True: for batch in loader: yield batch`: each pass over the loader is an epoch
    epoch_loops += _reiterated(s)
    # a loop its author names the epoch loop comes first: a loop that merely holds loader
    # loops can be an evaluation pass (per layer, per split) in another module
    # (Jingkang50/OpenOOD 3de61c4: the pipeline's `for epoch_idx in ...` calls a trainer
    # from a registry; a postprocessor's `for layer_index ...` holds loader loops)
    # among those, the loop in the function that builds the sampler, then in its module:
    # an epoch loop of another module may train on a loader with no sampler at all
    # (BatsResearch/taglets e50b783: a module's own `_train` beside the spawned
    # `_do_train` that builds the DistributedSampler)
    home = s.scope_of(samplers[0])
    epoch_loops.sort(
        key=lambda n: (
            not _epoch_named(n),
            s.scope_of(n) is not home,
            s.module_of(n) is not s.module_of(samplers[0]),
        )
    )
    for loop in epoch_loops[:1]:
        where = (
            f"line {samplers[0].lineno}"
            if s.module_of(samplers[0]) is s.module_of(loop)
            else f"{s.path_of(samplers[0])}:{samplers[0].lineno}"
        )
        yield Hit.at(
            "DDP-SET-EPOCH",
            loop,
            (
                "the DistributedSampler's shuffle is never re-seeded: "
                f"`sampler.set_epoch(...)` is not called in this loop (sampler at {where})"
            ),
            sampler=_assigned_name(s, samplers[0]) or "sampler",
            epoch=ast.unparse(loop.target) if isinstance(loop, ast.For) else "epoch",
        )


def _epoch_named(loop: ast.AST) -> bool:
    """A loop its author names the epoch loop: `for epoch in ...`, `while epoch < n`."""
    if isinstance(loop, ast.For):
        return bool(_EPOCH.search(ast.unparse(loop.target) + ast.unparse(loop.iter)))
    return isinstance(loop, ast.While) and bool(_EPOCH.search(ast.unparse(loop.test)))


def _reiterated(s: Script) -> list[ast.For]:
    """Loops over a DataLoader (names and parameters followed) inside another loop of
    the same function: the loader starts a new epoch each time round."""
    out: list[ast.For] = []
    for n in s.nodes:
        if not isinstance(n, ast.For) or not any(
            isinstance(a, ast.For | ast.While) for a in _enclosing(s, n)
        ):
            continue
        it = iterated(s, n)
        if it is not None and any(is_loader(s, o) for o in s.origins(it)):
            out.append(n)
    return out


def _enclosing(s: Script, node: ast.AST) -> Iterator[ast.AST]:
    for a in s.ancestors(node):
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.Module):
            return
        yield a


def _calls_training_loop(s: Script, f: Flow, root: ast.AST, seen: set[ast.AST]) -> bool:
    for n in own_nodes(root):
        if isinstance(n, ast.Call):
            for fn in s.callees(n):
                if fn in seen:
                    continue
                seen.add(fn)
                if any(
                    isinstance(m, ast.For | ast.While) and m in f.training_loops()
                    for m in own_nodes(fn)
                ) or _calls_training_loop(s, f, fn, seen):
                    return True
    return False


def shuffle_sampler(s: Script, f: Flow) -> Iterator[Hit]:
    for c in s.calls:
        if (
            is_loader(s, c)
            and const(kwarg(c, "shuffle", 2)) is True
            and (_has(c, "sampler", 3, maybe=False) or _has(c, "batch_sampler", 4, maybe=False))
        ):
            yield Hit.at(
                "DDP-SHUFFLE-SAMPLER",
                kwarg(c, "shuffle", 2) or c,
                (
                    "DataLoader(shuffle=True, sampler=...): the DataLoader refuses this "
                    "combination at start"
                ),
                loader=_assigned_name(s, c) or "loader",
            )
        elif (flag := _shuffle_flag(s, c)) is not None:
            yield Hit.at(
                "DDP-SHUFFLE-SAMPLER",
                flag,
                (
                    f"`shuffle={ast.unparse(flag)}` beside a DistributedSampler: when the "
                    "setting is on, the DataLoader refuses the combination at start"
                ),
                severity="warning",
                loader=_assigned_name(s, c) or "loader",
            )


def _shuffle_flag(s: Script, c: ast.Call) -> ast.expr | None:
    """`shuffle=config.shuffle_train, sampler=DistributedSampler(data)` in a DataLoader or a
    project loader factory's call (advsecurenet's DDP trainer): a user's shuffle setting,
    on by default in most configs, handed on beside a sampler. Only a flag named for
    shuffling; `shuffle=(sampler is None)` and the like say something else."""
    flag = kwarg(c, "shuffle")
    if not (
        isinstance(flag, ast.Name | ast.Attribute) and "shuffle" in ast.unparse(flag).lower()
    ):
        return None
    sampler = kwarg(c, "sampler")
    if sampler is None:
        return None
    return (
        flag
        if any(
            isinstance(o, ast.Call) and "DistributedSampler" in last(s.call_name(o))
            for o in [sampler, *s.origins(sampler)]
        )
        else None
    )


def sampler_seed(s: Script, f: Flow) -> Iterator[Hit]:
    """`DistributedSampler(data, seed=base * rank)` (or from the clock): each rank
    shuffles the dataset its own way and takes its slice of a different permutation, so
    the slices overlap and some samples are never seen."""
    for c in s.calls:
        if "DistributedSampler" not in {last(n) for n in s.call_names(c)}:
            continue
        seed = kwarg(c, "seed", 4)
        if seed is None:
            continue
        timed = any(
            isinstance(o, ast.Call) and s.call_name(o) in ("time.time", "time.time_ns")
            for n in ast.walk(seed)
            if isinstance(n, ast.expr)
            for o in [n, *s.origins(n)]
        )
        # the value may travel: `flags.seed = worker_seeds[local_rank]` in main(), then
        # `DistributedSampler(ds, seed=flags.seed)` in the loader's builder (mlcommons'
        # unet3d: its per-worker seed became the sampler's)
        if timed or any(f.is_rank_expr(o) for o in [seed, *s.origins(seed)]):
            yield Hit.at(
                "DDP-SAMPLER-SEED",
                c,
                (
                    f"`seed={ast.unparse(seed)}` differs per rank"
                    + (" (the clock)" if timed else "")
                    + ": each rank slices a different permutation, so ranks see overlapping "
                    "samples and skip others"
                ),
                seed=ast.unparse(seed),
            )


RULES = (sampler, set_epoch, shuffle_sampler, sampler_seed)
