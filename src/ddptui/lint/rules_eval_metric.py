"""DDP-EVAL-LOCAL-METRIC: an evaluation loop over a sharded loader sums its figures on this
rank only and uses them with no collective.

ryul99/pytorch-project-template@32bfbe1^ (utils/test_model.py:13-16; fixed in 32bfbe1, "aggregate
loss of all gpus in test_model", PR #11): the test loader is built with
`DistributedSampler(dataset, world_size, rank)` (dataset/dataloader.py), `test_model()` adds
`loss_v.item()` to `total_test_loss` over its batches, divides by its own count and logs
it: every rank's "test loss" covers 1/world of the test set, and rank 0's log, the best
checkpoint and early stopping follow that fraction (the figure changes with the number of
GPUs). The same mistake runs through blind batches since round 5 ("metrics never
reduced", "a metric kept on the primary worker", "a validation loss computed on one rank's
shard").

Precision first: only a loop in an evaluation context (nothing in it runs a backward pass;
`torch.no_grad()` / `inference_mode()` around it, in it or on the function, or a `.eval()`
call before it), over a loader whose `sampler=` comes from a `Distributed...Sampler(...)` or
that a launcher prepared (accelerate's `prepare`, Fabric's `setup_dataloaders`); only sums,
appends and meter updates in that loop that the function reads after it; and silent when
anything from the loop on (to the end of the loop around it), the functions called there
(three hops), or the function's callers after the call combine the ranks' figures
(torch.distributed's collectives but a barrier or broadcast, a launcher's `gather_for_metrics`,
a project `reduce_tensor` or `synchronize_between_processes`, a torchmetrics `compute()`)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import LAUNCHERS, Flow
from ddptui.lint.model import Hit
from ddptui.lint.nodes import calls_in, own_nodes
from ddptui.lint.project import FuncNode
from ddptui.lint.rules_data import iterated
from ddptui.lint.script import Script
from ddptui.lint.syntax import kwarg, last

ID: Final = "DDP-EVAL-LOCAL-METRIC"
_SHARDING: Final = re.compile(r"^Distributed\w*Sampler$")
# names of calls that combine the ranks' figures (library and project helpers alike)
_COMBINES: Final = re.compile(
    r"reduce|gather|sync_|_sync|^sync$|between_processes|collect_results|^compute$|merge_results"
)
_METER: Final = re.compile(r"Meter|Metric|Average|Avg|Tracker|Accumulat|Counter|Statistic")
_HOPS: Final = 3
# collectives that move no figure between the ranks (a broadcast hands rank 0's own figure on)
_WAITS_ONLY: Final = frozenset(
    {"barrier", "monitored_barrier", "wait_for_everyone", "broadcast", "broadcast_object_list"}
)
_PREPARES: Final = frozenset({"prepare", "prepare_data_loader", "setup_dataloaders"})


def _no_grad(s: Script, node: ast.AST) -> bool:
    if isinstance(node, ast.Call):
        qn: str | None = s.call_name(node)
    else:
        qn = s.qualname(node) if isinstance(node, ast.expr) else None
    return last(qn or "") in {"no_grad", "inference_mode"}


def _eval_context(s: Script, f: Flow, func: FuncNode, loop: ast.For | ast.AsyncFor) -> bool:
    """The loop evaluates: nothing in it runs a backward pass, and gradients are off around
    it or inside it (`torch.no_grad()`, `inference_mode()`), or the model was put in eval
    mode before it in the function."""
    if f.stmts_backward(loop.body):
        return False
    if any(_no_grad(s, d) for d in func.decorator_list):
        return True
    for anc in s.ancestors(loop):
        if anc is func:
            break
        if isinstance(anc, ast.With | ast.AsyncWith) and any(
            _no_grad(s, item.context_expr) for item in anc.items
        ):
            return True
    if any(_no_grad(s, c) for c in calls_in(loop.body)):
        return True
    return any(
        isinstance(c.func, ast.Attribute)
        and c.func.attr == "eval"
        and not c.args
        and c.lineno <= loop.lineno
        for c in calls_in(func.body)
    )


def _sharding(s: Script, loader: ast.expr) -> ast.Call | None:
    """What shards the loader iterated here, if anything does: the `Distributed...Sampler(...)`
    it is given, or the launcher that prepared it (accelerate's `prepare`, Fabric's
    `setup_dataloaders`: each process then iterates its own part)."""
    for o in s.origins(loader):
        if not isinstance(o, ast.Call):
            continue
        if _launcher_prepared(s, o):
            return o
        given = kwarg(o, "sampler", 3 if last(s.call_name(o)) == "DataLoader" else None)
        if given is None:
            continue
        for so in s.origins(given):
            if isinstance(so, ast.Call) and _SHARDING.match(last(s.call_name(so))):
                return so
    return None


def _launcher_prepared(s: Script, call: ast.Call) -> bool:
    f = call.func
    return (
        isinstance(f, ast.Attribute)
        and f.attr in _PREPARES
        and any(
            isinstance(o, ast.Call) and last(s.call_name(o)) in LAUNCHERS
            for o in s.origins(f.value)
        )
    )


def _accumulated(s: Script, loop: ast.For | ast.AsyncFor) -> dict[str, ast.AST]:
    """What the loop body adds up on this rank: `x += ...`, `xs.append(...)`, a meter's
    `.update(...)`; each by its text, with the first place it is added to."""
    out: dict[str, ast.AST] = {}
    for n in (x for st in loop.body for x in (st, *own_nodes(st))):
        target: ast.expr | None = None
        if isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add):
            target = n.target
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.args
            and (
                n.func.attr in {"append", "extend"}
                or (n.func.attr == "update" and _is_meter(s, n.func.value))
            )
        ):
            target = n.func.value
        if isinstance(target, ast.Name | ast.Attribute):
            out.setdefault(ast.unparse(target), n)
    return out


def _is_meter(s: Script, expr: ast.expr) -> bool:
    return any(
        isinstance(o, ast.Call) and _METER.search(last(s.call_name(o))) is not None
        for o in s.origins(expr)
    )


def _combines(s: Script, f: Flow, calls: list[ast.Call]) -> bool:
    def combining(c: ast.Call) -> bool:
        coll = f.collective(c)
        if coll and last(coll) not in _WAITS_ONLY:
            return True
        name = last(s.call_name(c))
        return bool(_COMBINES.search(name)) and name != "synchronize"  # cuda's: timing

    return f.reaches(calls, combining, _HOPS)


def _callers_combine(s: Script, f: Flow, func: FuncNode) -> bool:
    for site in s.call_sites(func):
        scope = s.scope_of(site)
        later = [c for c in calls_in([scope]) if c.lineno > site.lineno]
        if _combines(s, f, later):
            return True
    return False


def _after(s: Script, func: FuncNode, loop: ast.For | ast.AsyncFor) -> list[ast.Call]:
    """The calls of `func` from the evaluation loop on, up to the end of the loop around it
    (an epoch loop's next turn trains again): where a combine of its sums can be."""
    end = max((getattr(n, "end_lineno", 0) or 0) for n in ast.walk(func))
    for a in s.ancestors(loop):
        if a is func:
            break
        if isinstance(a, ast.For | ast.AsyncFor | ast.While):
            end = a.end_lineno or end
            break
    return [c for c in calls_in(func.body) if loop.lineno <= c.lineno <= end]


def _first_read(func: FuncNode, names: dict[str, ast.AST], after: int) -> ast.AST | None:
    """The first statement after line `after` that reads one of the sums (of a compound
    statement, its own header: an `if`'s test, a `for`'s iterable)."""
    stmts = sorted(
        (n for n in own_nodes(func) if isinstance(n, ast.stmt) and n.lineno > after),
        key=lambda n: (n.lineno, n.col_offset),
    )
    for st in stmts:
        if _reads_of(st) & names.keys():
            return st
    return None


def _reads_of(st: ast.stmt) -> set[str]:
    """The names and attributes a statement reads, by their text (a compound statement's
    header only)."""
    heads: list[ast.AST] = [st]
    if isinstance(st, ast.If | ast.While):
        heads = [st.test]
    elif isinstance(st, ast.For | ast.AsyncFor):
        heads = [st.iter]
    elif isinstance(st, ast.With | ast.AsyncWith):
        heads = [i.context_expr for i in st.items]
    elif isinstance(st, ast.Try | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        heads = []
    return {
        ast.unparse(x)
        for h in heads
        for x in ast.walk(h)
        if isinstance(x, ast.Name | ast.Attribute) and isinstance(x.ctx, ast.Load)
    }


def _loops(func: FuncNode) -> Iterator[ast.For | ast.AsyncFor]:
    for n in own_nodes(func):
        if isinstance(n, ast.For | ast.AsyncFor):
            yield n


def _said(s: Script, call: ast.Call) -> str:
    if isinstance(call.func, ast.Attribute) and call.func.attr in _PREPARES:
        return ast.unparse(call.func)
    return last(s.call_name(call))


def eval_local_metric(s: Script, f: Flow) -> Iterator[Hit]:
    if not (f.distributed or f.uses(*LAUNCHERS)):
        return
    for func in (n for n in s.nodes if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
        hit = _judge(s, f, func)
        if hit is not None:
            yield hit


def _judge(s: Script, f: Flow, func: FuncNode) -> Hit | None:
    for loop in _loops(func):
        it = iterated(s, loop)
        sums = _accumulated(s, loop) if it is not None else {}
        if it is None or not sums:
            continue
        used = _first_read(func, sums, loop.end_lineno or loop.lineno)
        if used is None or not _eval_context(s, f, func, loop):
            continue
        sampler = _sharding(s, it)
        if sampler is None:
            continue
        if _combines(s, f, _after(s, func, loop)) or _callers_combine(s, f, func):
            return None
        names = ", ".join(f"`{n}`" for n in list(sums)[:3])
        first = min(sums.values(), key=lambda n: getattr(n, "lineno", 0))
        return Hit.at(
            ID,
            used,
            f"`{func.name}()` adds up {names} over this rank's batches of "
            f"`{ast.unparse(it)[:60]}` (sharded by `{_said(s, sampler)}`) and uses "
            "them with no all_reduce or all_gather: each rank's figure covers 1/world of the set",
            also=((first, "summed on this rank at"), (sampler, "sharded by")),
            func=func.name,
            names=names,
        )
    return None


RULES = (eval_local_metric,)
