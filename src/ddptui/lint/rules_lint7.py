"""Round 5b (lint7) rules: the GPU count of one node used as the job's size where data
is split between ranks (in any module the entry reaches, loaders and helpers included)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.script import Script
from ddptui.lint.syntax import last

_SHARE_OPS = (ast.Mult, ast.Div, ast.FloorDiv)


def _stmt_of(s: Script, node: ast.AST) -> ast.AST:
    for a in s.ancestors(node):
        if isinstance(a, ast.stmt):
            return a
    return node


def _global_rank_call(s: Script, expr: ast.AST) -> ast.Call | None:
    """A `get_rank()` call (torch.distributed's or a project helper's) in `expr`."""
    for n in ast.walk(expr):
        if isinstance(n, ast.Call) and last(s.call_name(n)) == "get_rank":
            return n
    return None


def _share_expr(s: Script, count: ast.Call) -> ast.BinOp | None:
    """The outermost `*`, `/`, `//` chain `count` takes part in (not `%`: `rank %
    device_count()` is the usual local-GPU index)."""
    node: ast.AST = count
    top: ast.BinOp | None = None
    for a in s.ancestors(count):
        if isinstance(a, ast.BinOp) and isinstance(a.op, _SHARE_OPS):
            top, node = a, a
            continue
        if isinstance(a, ast.Call) and node in a.args and last(s.call_name(a)) in {"int", "round"}:
            node = a
            continue
        break
    return top


def device_count_shards(s: Script, f: Flow) -> Iterator[Hit]:
    """`batch_size / torch.cuda.device_count() * dist.get_rank()`: a rank's offset or
    share of the data computed from this node's GPU count and the job-wide rank. On two
    nodes (or with fewer processes than GPUs) ranks read overlapping or missing shards
    (TextBox aef13a6 replaced device_count() by get_world_size()). The other
    `x / device_count()` divisions of a batch size in the same class or function are
    said too: they are the per-rank step of the same split."""
    if not f.distributed and not any(last(s.call_name(c)) == "get_rank" for c in s.calls):
        return
    counts = [c for c in s.calls if last(s.call_name(c)) == "device_count"]
    homes: set[ast.AST] = set()
    for c in counts:
        share = _share_expr(s, c)
        rank = _global_rank_call(s, share) if share is not None else None
        if share is None or rank is None:
            continue
        homes.add(s.class_of(c) or s.scope_of(c))
        yield Hit.at(
            "DDP-WORLD-FROM-DEVICE-COUNT",
            c,
            (
                f"`{ast.unparse(share)}` combines this node's GPU count with the job-wide "
                f"rank `{ast.unparse(rank)}`: on more than one node (or with fewer "
                "processes than GPUs) ranks take overlapping or missing shards; use "
                "`dist.get_world_size()`"
            ),
        )
    for c in counts:
        share = _share_expr(s, c)
        if share is None or (s.class_of(c) or s.scope_of(c)) not in homes:
            continue
        if _global_rank_call(s, share) is not None or not isinstance(
            share.op, ast.Div | ast.FloorDiv
        ):
            continue
        if share.right is not c or "batch" not in ast.unparse(share.left).lower():
            continue
        yield Hit.at(
            "DDP-WORLD-FROM-DEVICE-COUNT",
            c,
            (
                f"`{ast.unparse(share)}`: each rank's share of the batch divided by this "
                "node's GPU count, not by the number of processes in the job "
                "(`dist.get_world_size()`)"
            ),
        )


def _steps(body: list[ast.stmt]) -> bool:
    """The optimizer's step in these statements (`optimizer.step()`, `scaler.step(opt)`)."""
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "step"
        and re.search(r"optim|scaler|opt\b", ast.unparse(n.func.value), re.I) is not None
        for st in body
        for n in ast.walk(st)
    )  # fmt: skip


def no_sync_on_update(s: Script, f: Flow) -> Iterator[Hit]:
    """`if update_grads: with model.no_sync(): backward` and later `if update_grads:
    optimizer.step()`: no_sync holds the one micro-step whose gradients the optimizer
    uses, and the accumulation steps all-reduce (LVSM PR #22 swapped the branches)."""
    if not f.wrapper_calls:
        return
    for w in [n for n in s.nodes if isinstance(n, ast.With | ast.AsyncWith)]:
        if not any(
            isinstance(it.context_expr, ast.Call)
            and isinstance(it.context_expr.func, ast.Attribute)
            and it.context_expr.func.attr == "no_sync"
            for it in w.items
        ):
            continue
        gate = next((a for a in s.ancestors(w) if isinstance(a, ast.If)), None)
        if gate is None or w not in _flat(gate.body) or _negated(gate.test):
            continue
        test = ast.unparse(gate.test)
        steps = [
            n
            for n in ast.walk(s.scope_of(w))
            if isinstance(n, ast.If)
            and n is not gate
            and n.lineno > w.lineno
            and test in _conjuncts(n.test)
            and _steps(n.body)
        ]
        if not steps and not _steps(gate.body):
            continue
        at = steps[0] if steps else gate
        yield Hit.at(
            "DDP-NO-SYNC",
            w,
            (
                f"`{ast.unparse(w.items[0].context_expr)}` is entered when "
                f"`{ast.unparse(gate.test)}`, the test the optimizer step takes too (line "
                f"{at.lineno}): the update's gradients are not all-reduced and every "
                "accumulation step is; swap the branches"
            ),
        )


def _negated(test: ast.expr) -> bool:
    return any(isinstance(u, ast.UnaryOp) and isinstance(u.op, ast.Not) for u in ast.walk(test))


def _conjuncts(test: ast.expr) -> list[str]:
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [ast.unparse(v) for v in test.values]
    return [ast.unparse(test)]


def _flat(body: list[ast.stmt]) -> list[ast.AST]:
    return [n for st in body for n in ast.walk(st)]


_SEEDS = frozenset(
    {"random.seed", "torch.manual_seed", "numpy.random.seed", "np.random.seed",
     "torch.cuda.manual_seed", "torch.cuda.manual_seed_all"}
)  # fmt: skip
_SPLIT_DRAWS = frozenset(
    {"numpy.random.choice", "np.random.choice", "numpy.random.permutation",
     "np.random.permutation", "random.sample", "torch.randperm", "random.shuffle",
     "numpy.random.shuffle", "np.random.shuffle"}
)  # fmt: skip
_SPLIT_FUNC = re.compile(r"split|labeled|subset|partition|fold|sample_\w*data", re.I)


def rank_seed_before_split(s: Script, f: Flow) -> Iterator[Hit]:
    """`torch.manual_seed(args.seed + args.gpu)` (a per-rank seed) in a project whose
    data-split helper draws the subset at random (`np.random.choice` in
    `sample_labeled_data`): every rank trains on a different split (TorchSSL ee56376)."""
    seeds = [
        c for c in s.calls if s.call_name(c) in _SEEDS and c.args and f.is_rank_expr(c.args[0])
    ]
    if not seeds:
        return
    for c in s.calls:
        if s.call_name(c) not in _SPLIT_DRAWS:
            continue
        fn = s.scope_of(c)
        if not isinstance(fn, ast.FunctionDef) or not _SPLIT_FUNC.search(fn.name):
            continue
        first = min(seeds, key=lambda x: (s.path_of(x) != s.path, x.lineno))
        yield Hit.at(
            "DDP-SEED",
            first,
            (
                f"`{ast.unparse(first)}` seeds each rank differently, and "
                f"`{fn.name}` ({s.path_of(c)}:{c.lineno}) draws the data split with "
                f"`{ast.unparse(c.func)}`: every rank trains on a different split"
            ),
            severity="warning",
            model="the dataset split",
        )
        return


def rank_only_loop_bound(s: Script, f: Flow) -> Iterator[Hit]:
    """`if rank_0: opt.train_epoch_count = visualizer.load_data()` and then
    `for epoch in range(opt.train_epoch_count, ...)` whose iterations run DDP's forward
    and backward: the other ranks keep the old start and run a different number of
    iterations (joliGEN 471fbbc: resume restored on rank 0 only). Silent when the value
    is broadcast between the two."""
    if not f.wrapper_calls:
        return
    for loop in [n for n in s.nodes if isinstance(n, ast.For)]:
        it = loop.iter
        if not (isinstance(it, ast.Call) and last(s.call_name(it)) == "range"):
            continue
        sync = f.stmts_sync(loop.body)
        if not sync:
            continue
        scope = s.scope_of(loop)
        keys = {
            ast.unparse(n)
            for a in it.args
            for n in ast.walk(a)
            if isinstance(n, ast.Attribute | ast.Name)
        }
        assigns = sorted(
            (
                n
                for n in ast.walk(scope)
                if isinstance(n, ast.Assign)
                and n.lineno < loop.lineno
                and s.scope_of(n) is scope
                and any(ast.unparse(t) in keys for t in n.targets)
            ),
            key=lambda n: n.lineno,
        )
        for key in sorted(keys):
            mine = [a for a in assigns if any(ast.unparse(t) == key for t in a.targets)]
            if not mine or f.local_guard(mine[-1]) is None:
                continue
            between = [
                c
                for c in s.function_calls(scope)
                if mine[-1].lineno < c.lineno < loop.lineno
                and ("broadcast" in s.call_name(c) or f.collective(c))
            ]
            if between:
                continue
            guard = f.local_guard(mine[-1])
            cond = (
                ast.unparse(guard.test) if isinstance(guard, ast.If | ast.IfExp) else "a rank test"
            )
            yield Hit.at(
                "DDP-RANK-DIVERGENCE",
                mine[-1],
                (
                    f"`{key}` is set only where `{cond}` "
                    f"(line {getattr(guard, 'lineno', 0)}), and bounds the loop at line "
                    f"{loop.lineno} whose iterations wait in {sync}: the ranks run different "
                    "numbers of iterations"
                ),
                condition=cond,
                collective=sync,
                # set from a checkpoint that may not exist (`if os.path.exists(ckpt):` on
                # rank 0, YOLOP's resume): the ranks part only when resuming
                severity="warning" if _only_if_file(s, mine[-1], guard) else None,
            )
            break


def _only_if_file(s: Script, node: ast.AST, guard: ast.AST | None) -> bool:
    for a in s.ancestors(node):
        if a is guard:
            return False
        if isinstance(a, ast.If) and re.search(
            r"\b(exists|isfile|isdir)\b|resume", ast.unparse(a.test)
        ):
            return True
    return False


RULES = (device_count_shards, no_sync_on_update, rank_seed_before_split, rank_only_loop_bound)
