"""Calibration and readings from blind batch S (lint26).

DDP-UNEVEN-BATCH on a loop that stops at a fixed step count. GaLore's torchrun_main.py
(jiaweizzhao/GaLore @ 2cc66f88, blind S, a correct project) streams C4 (`load_dataset(...,
streaming=True)`), splits it with `split_dataset_by_node(data, rank=global_rank,
world_size=world_size)` and loops `for batch_idx, batch in enumerate(dataloader):` with
`if update_step > args.num_training_steps: break`, a counter every rank advances alike:
the run ends at the step bound, long before any rank's share of the stream runs out.
Whether a shard can run out before that bound is not visible in the code, so the finding
is a warning that says so. A hand split looped over to its end (no step bound) stays an
error.
"""

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
from ddptui.lint.syntax import last


def _counters(loop: ast.For | ast.AsyncFor | ast.While) -> set[str]:
    """Names the loop body advances by a constant (`step += 1`, `self.global_step += 1`)."""
    return {
        ast.unparse(n.target)
        for st in loop.body
        for n in ast.walk(st)
        if isinstance(n, ast.AugAssign)
        and isinstance(n.op, ast.Add)
        and isinstance(n.value, ast.Constant)
    }


def _step_bound(loop: ast.For | ast.AsyncFor | ast.While) -> ast.If | None:
    """An `if <counter> >(=) <bound>: ... break` directly in the loop body, the counter one
    the body advances and the bound no value of the loop itself."""
    counted = _counters(loop)
    if isinstance(loop, ast.For | ast.AsyncFor):
        counted |= {ast.unparse(t) for t in ast.walk(loop.target) if isinstance(t, ast.Name)}
    for st in loop.body:
        if not (isinstance(st, ast.If) and isinstance(st.test, ast.Compare)):
            continue
        if not any(isinstance(b, ast.Break) for b in st.body):
            continue
        test = st.test
        if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Gt | ast.GtE):
            continue
        left, right = ast.unparse(test.left), ast.unparse(test.comparators[0])
        if left in counted and right not in counted and "len(" not in right:
            return st
    return None


def _loop_of(s: Script, node: ast.AST) -> ast.For | ast.AsyncFor | None:
    """The for loop the finding names: the node itself, or one iterating what it built."""
    if isinstance(node, ast.For | ast.AsyncFor):
        return node
    for n in s.nodes:
        if not isinstance(n, ast.For | ast.AsyncFor):
            continue
        it = n.iter
        while isinstance(it, ast.Call) and it.args:
            it = it.args[0]  # enumerate(...), tqdm(...)
        if it is node or (isinstance(it, ast.expr) and node in s.origins(it)):
            return n
    return None


def step_bounded(s: Script, hit: Hit) -> str | None:
    if hit.node is None:
        return None
    loop = _loop_of(s, hit.node)
    bound = _step_bound(loop) if loop is not None else None
    if bound is None:
        return None
    return (
        f"not certain: the loop stops after a fixed number of steps (`if "
        f"{ast.unparse(bound.test)}: break`, line {bound.lineno}), the same on every rank; "
        "the code does not show a rank's share running out before it"
    )


# --- seeds set in the launching process only, before mp.spawn ---------------------------
# thu-spmi/CAT @ d4858c54 and @ 787eaa16, scripts/ctc-crf/train.py: `torch.manual_seed(SEED)`,
# `np.random.seed(SEED)` under `if __name__ == "__main__":`, then `main(args)` calls
# `mp.spawn(main_worker, ...)`. The spawned interpreters import the script as
# `__mp_main__` and never run that block: main_worker builds the model unseeded (fixed in
# 5c34dc15 by seeding at the top of main_worker). Said at the worker's first line, where the
# seed belongs. Not said where the worker is also called directly (the ImageNet example's
# `else: main_worker(...)`), the seed is optional (`if args.seed is not None:`) or a
# literal (rasbt's DDP-script.py, `torch.manual_seed(123)` before mp.spawn, a correct case
# of blind batch P): what the user notices is a --seed setting the workers never see.

_SPAWNS: Final = frozenset({"spawn", "start_processes"})
_SEEDISH: Final = re.compile(r"seed", re.I)
_GLOBAL: Final = frozenset(
    {"torch.manual_seed", "torch.cuda.manual_seed_all", "torch.cuda.manual_seed",
     "np.random.seed", "numpy.random.seed", "random.seed"}
)  # fmt: skip


def _reachable(s: Script, fn: FuncNode, limit: int = 60) -> list[FuncNode]:
    seen: list[FuncNode] = [fn]
    i = 0
    while i < len(seen) and len(seen) < limit:
        for c in (n for n in own_nodes(seen[i]) if isinstance(n, ast.Call)):
            seen += [g for g in s.callees(c) if g not in seen]
        i += 1
    return seen


def _main_block(s: Script, node: ast.AST) -> bool:
    return any(
        isinstance(a, ast.If)
        and "__name__" in ast.unparse(a.test)
        and "__main__" in ast.unparse(a.test)
        for a in s.ancestors(node)
    )


def _optional(s: Script, c: ast.Call) -> bool:
    """Under `if args.seed is not None:` (the ImageNet example): a seed asked for only now
    and then, not the run's reproducibility."""
    return any(isinstance(a, ast.If) and "seed" in ast.unparse(a.test) for a in s.ancestors(c))


def _configured(s: Script, c: ast.Call) -> bool:
    """The seed comes from the run's settings (`SEED = args.seed`), not a literal
    (`torch.manual_seed(123)` in a teaching script, rasbt's DDP-script.py): a --seed
    option the workers never see is what the user notices."""
    if not c.args or isinstance(c.args[0], ast.Constant):
        return False
    return any(not isinstance(o, ast.Constant) for o in s.origins(c.args[0]))


def _worker(s: Script, spawn: ast.Call) -> FuncNode | None:
    target = spawn.args[0] if spawn.args else None
    if not isinstance(target, ast.Name):
        return None
    mod = s.module_of(spawn)
    found = s.resolve(mod, target.id)
    if isinstance(found, ast.FunctionDef | ast.AsyncFunctionDef):
        return found
    own = [g for g in mod.functions.get(target.id, ()) if s.class_of(g) is None]
    return own[0] if len(own) == 1 else None


def spawn_unseeded(s: Script, f: Flow) -> Iterator[Hit]:
    for spawn in s.calls:
        if last(s.call_name(spawn)) not in _SPAWNS or "multiprocessing" not in s.call_name(spawn):
            continue
        worker = _worker(s, spawn)
        if worker is None or s.call_sites(worker):
            continue  # (also called in this process: `else: main_worker(...)`, seeded there)
        reached = _reachable(s, worker)
        if any(
            _SEEDISH.search(last(s.call_name(c)) or "")
            for g in reached
            for c in own_nodes(g)
            if isinstance(c, ast.Call)
        ):
            return  # the worker seeds (or may: a helper named for it)
        parent = s.scope_of(spawn)
        seeds = [
            c
            for c in s.calls
            if s.call_name(c) in _GLOBAL
            and not any(s.scope_of(c) is g for g in reached)
            and (_main_block(s, c) or (s.scope_of(c) is parent and c.lineno < spawn.lineno))
            and not _optional(s, c)
            and _configured(s, c)
        ]
        if not seeds:
            continue
        body = [
            st
            for st in worker.body
            if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant))
        ]
        seed = seeds[0]
        at = body[0] if body else worker
        where = (
            f"line {seed.lineno}"
            if s.path_of(seed) == s.path_of(at)
            else f"{s.path_of(seed)}:{seed.lineno}"
        )
        yield Hit.at(
            "DDP-SEED",
            at,
            (
                f"`{ast.unparse(seed)}` ({where}) seeds only the "
                f"launching process: the processes `{ast.unparse(spawn.func)}` starts run "
                f"`{worker.name}` in fresh interpreters that never run that code, and nothing "
                f"`{worker.name}` calls sets a seed"
            ),
            model="the model",
        )
        return


# --- a sum over all ranks averaged by this node's GPU count ------------------------------
# thu-spmi/CAT @ d4858c54, scripts/ctc-crf/utils.py:414-415 (test()): `dist.all_reduce(
# real_loss, dist.ReduceOp.SUM)` then `real_loss = real_loss / torch.cuda.device_count()`:
# the sum runs over every rank of every node, the division over one node's GPUs (fixed in
# c3101b9 by `dist.get_world_size()`, PR #45, "dev loss incorrect when using nodes > 1").


def _summed(f: Flow, reduce: ast.Call) -> str | None:
    """The tensor a SUM all_reduce (the default op) reduces in place."""
    if not (f.collective(reduce) or "").endswith("all_reduce") or not reduce.args:
        return None
    op = reduce.args[1] if len(reduce.args) > 1 else None
    op = next((k.value for k in reduce.keywords if k.arg == "op"), op)
    if op is not None and not ast.unparse(op).endswith("SUM"):
        return None
    return ast.unparse(reduce.args[0])


def sum_over_device_count(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.distributed:
        return
    for c in s.calls:
        div = s.parents.get(c)
        if not (
            last(s.call_name(c)) == "device_count"
            and isinstance(div, ast.BinOp)
            and isinstance(div.op, ast.Div | ast.FloorDiv)
            and div.right is c
        ):
            continue
        scope = s.scope_of(c)
        summed = next(
            (
                r
                for r in s.calls
                if s.scope_of(r) is scope
                and r.lineno < c.lineno
                and _summed(f, r) == ast.unparse(div.left)
            ),
            None,
        )
        if summed is None:
            continue
        yield Hit.at(
            "DDP-WORLD-FROM-DEVICE-COUNT",
            c,
            (
                f"`{ast.unparse(div)}` averages a sum over every rank (`{ast.unparse(summed)}`, "
                f"line {summed.lineno}) by this node's GPU count: from the second node on the "
                "mean is too large; divide by `dist.get_world_size()`"
            ),
        )


# --- the global rank handed to a parameter named for the local one -----------------------
# meta-llama/llama-cookbook (then llama-recipes) @ c19c5c69 (blind S),
# utils/train_utils.py:138: `train(..., local_rank=None, rank=None)` calls `evaluation(model,
# train_config, eval_dataloader, rank, tokenizer)` whose parameter is `local_rank` and
# which moves batches with `.to(local_rank)`: where both names are at hand, the global one
# went into the local one's place (from the second node on, a GPU that does not exist).


def _params(fn: FuncNode) -> list[str]:
    return [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]


def rank_for_local_rank(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.distributed:
        return
    for c in s.calls:
        scope = s.scope_of(c)
        if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if "local_rank" not in _params(scope) or "rank" not in _params(scope):
            continue  # both names at hand in the caller: a mix-up, not a one-node design
        for fn in s.callees(c):
            names = _params(fn)
            offset = 1 if names[:1] == ["self"] and isinstance(c.func, ast.Attribute) else 0
            for i, arg in enumerate(c.args):
                j = i + offset
                if isinstance(arg, ast.Name) and arg.id == "rank" and j < len(names):
                    if names[j] != "local_rank":
                        continue
                    yield Hit.at(
                        "DDP-HARDCODED-DEVICE",
                        c,
                        (
                            f"`{ast.unparse(c)[:70]}` passes the global rank `rank` where "
                            f"`{fn.name}` takes `local_rank`, the GPU on this node, while the "
                            "caller has `local_rank` at hand: from the second node on it names "
                            "a GPU that does not exist"
                        ),
                        seen="the global rank `rank` passed as `local_rank`",
                    )


RULES: Final = (spawn_unseeded, sum_over_device_count, rank_for_local_rank)
