"""Rules about the moments ranks wait for each other: rank-dependent control flow
around collectives (the critical one) and async collectives never waited for (19);
gradient accumulation without no_sync (9) is rules_nosync's."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Final

from ddptui.lint.branches import branch_colls as _branch_colls
from ddptui.lint.branches import dead_nest as _dead_nest
from ddptui.lint.flow import Flow, ident
from ddptui.lint.lint15 import mode_exit as _mode_exit
from ddptui.lint.lint16 import BUFFERS as _BUFFERS
from ddptui.lint.lint16 import in_training_loop as _in_training_loop
from ddptui.lint.lint19 import counted_steps
from ddptui.lint.lint41 import collective_answer
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.script import Script
from ddptui.lint.syntax import const, kwarg, last
from ddptui.lint.taint import depends, rank_tainted

_NO_GRAD: Final = ("no_grad", "inference_mode")
_BN: Final = re.compile(r"^(Lazy)?BatchNorm[123]d$")
_EXITS: Final = (ast.Break, ast.Continue, ast.Return)


def under_no_grad(s: Script, node: ast.AST) -> bool:
    for a in s.ancestors(node):
        if isinstance(a, ast.With | ast.AsyncWith) and any(
            any(w in ast.unparse(i.context_expr) for w in _NO_GRAD) for i in a.items
        ):
            return True
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef):
            return any(any(w in ast.unparse(d) for w in _NO_GRAD) for d in a.decorator_list)
    return False


class SyncFlow(Flow):
    """Flow whose DDP forwards under torch.no_grad() are not sync points (no gradient
    bucket is prepared; precision first), unless the model has buffers: then DDP's
    forward broadcasts them from rank 0 (broadcast_buffers, on by default) and the
    other ranks must join."""

    def __init__(self, script: Script) -> None:
        super().__init__(script)
        self.buffers = any(
            const(kwarg(c, "broadcast_buffers")) is not False and self._may_hold_buffers(c)
            for c in self.torch_ddp_calls
        )

    def _may_hold_buffers(self, ddp: ast.Call) -> bool:
        """The wrapped model shows buffers: BatchNorm or register_buffer in the project's
        code that runs, or a SyncBatchNorm conversion on the way to DDP (a model from
        outside the project shows nothing: precision first)."""
        s = self.s
        if any(
            (last(s.call_name(c)) == "register_buffer" or bool(_BN.match(last(s.call_name(c)))))
            and not _conditional(s, c)
            for c in s.calls
        ):
            return True
        return any(
            isinstance(o, ast.Call) and last(s.call_name(o)) == "convert_sync_batchnorm"
            for o in (s.origins(ddp.args[0]) if ddp.args else [])
        )

    def direct_sync(self, call: ast.Call) -> str | None:
        found = super().direct_sync(call)
        if found and found.startswith("the DDP forward") and under_no_grad(self.s, call):
            return found + _BUFFERS if self.buffers else None
        return found


def _conditional(s: Script, node: ast.AST) -> bool:
    """Under an `if` of its function (`if not self.flash: self.register_buffer(...)`):
    whether it runs depends on what the code cannot see."""
    for a in s.ancestors(node):
        if isinstance(a, ast.If | ast.IfExp):
            return True
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef):
            return False
    return False


def _branch_other(guard: ast.If, node: ast.AST, s: Script) -> list[ast.stmt]:
    inside_body = any(node is b or b in set(s.ancestors(node)) for b in guard.body)
    return guard.orelse if inside_body else guard.body


def rank_divergence(s: Script, f: Flow) -> Iterator[Hit]:
    sf = SyncFlow(s)
    yield from _guarded_syncs(s, sf)
    yield from _early_exits(s, sf)
    yield from _rank_bounded_loops(s, sf)


def _rank_bounded_loops(s: Script, f: SyncFlow) -> Iterator[Hit]:
    """`for i in range(rank, n, world):` or `while step < limit[rank]:` around a sync
    point: ranks run different numbers of iterations and the last ones wait forever."""
    for loop in s.nodes:
        if isinstance(loop, ast.For | ast.AsyncFor):
            it = loop.iter
            bound = (
                isinstance(it, ast.Call)
                and last(s.call_name(it)) == "range"
                and any(f.is_rank_expr(a) for a in it.args)
            )
        elif isinstance(loop, ast.While):
            bound = f.is_rank_test(loop.test)
        else:
            continue
        what = f.stmts_sync(loop.body) if bound else None
        if what:
            head = ast.unparse(loop.iter if isinstance(loop, ast.For | ast.AsyncFor) else loop.test)
            yield Hit.at(
                "DDP-RANK-DIVERGENCE",
                loop,
                (
                    f"the number of iterations depends on the rank (`{head}`), and each one "
                    f"waits for the other ranks in {what}: the ranks with more iterations "
                    "wait forever"
                ),
                condition=head,
                collective=what,
            )


def _guarded_syncs(s: Script, f: SyncFlow) -> Iterator[Hit]:
    found: list[tuple[ast.Call, ast.AST, str]] = []
    for call in s.calls:
        guard = f.local_guard(call) or _nested_exit(s, f, call)
        if guard is None or kwarg(call, "group") is not None:
            continue
        what = f.call_sync(call)
        if what and not _dead_nest(s, call):
            found.append((call, guard, what))
    for call, guard, what in found:
        if _paired(s, call, guard, what, found):
            continue
        if isinstance(guard, ast.If) and guard not in set(s.ancestors(call)):
            other: list[ast.stmt] = []  # an `if rank != 0: return` before the call
        elif isinstance(guard, ast.If):
            other = _branch_other(guard, call, s)
        else:
            continue
        if other and f.stmts_sync(other):
            continue  # both branches reach a collective (`if rank == 0: send... else: ...`)
        test = ast.unparse(guard.test)
        mode = _mode_exit(f, guard, call, s)
        # a return nested under the rank test (`if rank == 0: ... if x: return`): where
        # those ranks leave, as a second place
        nested = (
            _nested_return(guard, bare=False) if guard not in set(s.ancestors(call)) else None
        )
        paired_later = _BUFFERS in what and _in_training_loop(s, f, call, guard)
        yield Hit.at(
            "DDP-RANK-DIVERGENCE",
            call,
            (
                f"{what} runs only on the ranks where `{test}` (line {guard.lineno}); the other "
                "ranks never join it and wait forever"
                if guard in set(s.ancestors(call))
                else f"{what} runs only on the ranks that get past `if {test}:` (line "
                f"{guard.lineno}, which leaves early); the other ranks never join it and wait "
                "forever" + (f" (only in the mode `{mode}` selects)" if mode else "")
            )
            + (
                "; inside the training loop the other ranks' next training forward answers "
                "that broadcast (rank 0 then skips its own), so it hangs only after the last "
                "epoch"
                if paired_later
                else ""
            ),
            condition=test,
            collective=what,
            reading="rank-guarded",  # lint22 reads the kind of hit and its guard from these
            guard_line=guard.lineno,
            severity="warning" if mode or paired_later else None,
            also=((nested, "leaves early at"),) if nested is not None else (),
        )


def _nested_exit(s: Script, f: SyncFlow, call: ast.Call) -> ast.If | None:
    """An earlier `if <rank test>:` in the call's function whose body leaves the function
    deeper down with a bare `return` (`if trainer.is_global_zero: ... if wandb_logger is
    None: return`, sleap-nn's WandBVizCallback before PR #437): those ranks may leave
    before the collective the others then wait in. Bare returns only: `return -1` after
    an error message is the run giving up, not a skipped step (open_clip's main)."""
    child: ast.AST = call
    for a in s.ancestors(call):
        if isinstance(a, ast.Lambda | ast.Module):
            return None
        for stmts in (getattr(a, "body", None), getattr(a, "orelse", None)):
            if not isinstance(stmts, list) or child not in stmts:
                continue
            for earlier in stmts[: stmts.index(child)]:
                if (
                    isinstance(earlier, ast.If)
                    and f.is_rank_test(earlier.test)
                    and _nested_return(earlier, bare=True) is not None
                ):
                    return earlier
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef):
            return None
        child = a
    return None


def _nested_return(guard: ast.If, *, bare: bool) -> ast.Return | None:
    """The first `return` deeper in the test's body than its own statements (`if rank ==
    0: ... if x: return`); `bare`: only one that returns nothing."""
    for st in guard.body:
        if isinstance(st, ast.Return):
            continue
        for n in own_nodes(st):
            if isinstance(n, ast.Return) and (
                not bare
                or n.value is None
                or (isinstance(n.value, ast.Constant) and n.value.value is None)
            ):
                return n
    return None


def _paired(
    s: Script,
    call: ast.Call,
    guard: ast.AST,
    what: str,
    found: list[tuple[ast.Call, ast.AST, str]],
) -> bool:
    """The same collective under another rank test in the same function: each rank
    reaches it once, at a different place (`if local_rank not in [-1, 0]: barrier()`
    ... `if local_rank == 0: barrier()`, the "main process first" pattern), or in the
    other half of the same context manager (`__enter__` waits on the ranks that are not
    the main one, `__exit__` on the main one: avalanche's main-process-first section)."""
    scope = s.scope_of(call)
    return any(
        other is not call
        and w == what
        and g is not guard
        and not _same_test(g, guard)
        and (s.scope_of(other) is scope or _cm_halves(s, scope, s.scope_of(other)))
        for other, g, w in found
    )


def _same_test(a: ast.AST, b: ast.AST) -> bool:
    """Two guards that test the same condition (`if rank > 1:` twice in one step, round 18's
    blind AM1): the same ranks reach both collectives, the others neither; no pairing."""
    ta, tb = getattr(a, "test", None), getattr(b, "test", None)
    return ta is not None and tb is not None and ast.unparse(ta) == ast.unparse(tb)


_CM_HALVES: Final = ({"__enter__", "__exit__"}, {"__aenter__", "__aexit__"})


def _cm_halves(s: Script, a: ast.AST | None, b: ast.AST | None) -> bool:
    """`a` and `b` are the entering and leaving methods of one context-manager class."""
    if not isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef) or not isinstance(
        b, ast.FunctionDef | ast.AsyncFunctionDef
    ):
        return False
    if {a.name, b.name} not in _CM_HALVES:
        return False
    cls = s.class_of(a)
    return cls is not None and cls is s.class_of(b)


def _early_exits(s: Script, f: SyncFlow) -> Iterator[Hit]:
    for loop in [n for n in s.nodes if isinstance(n, ast.For | ast.AsyncFor | ast.While)]:
        if not f.stmts_sync(loop.body):
            continue
        tainted: set[str] | None = None
        for node in own_nodes(loop):
            if not isinstance(node, ast.If) or _loop_of(s, node) is not loop:
                continue
            for exit_ in _exits_in(node.body):
                inner = next(a for a in s.ancestors(exit_) if isinstance(a, ast.If))
                if (
                    inner is not node
                    and not _varies(s, f, inner.test, loop)
                    and not f.is_rank_test(node.test)
                ):
                    # `if flag: ... if x: return`: the exit's own test decides; under a
                    # rank test the exit is that rank's alone whatever the inner test
                    # (mace 8c77569: `if rank == 0:` ... patience ... `break`)
                    continue
                skipped = (
                    _sync_after(s, f, node, loop)
                    if isinstance(exit_, ast.Continue)
                    else f.stmts_sync(loop.body)
                )
                # a run bounded by its completed steps: the backward passes pair up
                paired = isinstance(exit_, ast.Continue) and not f.buffers
                if not skipped or (paired and counted_steps(s, node, loop)):
                    continue
                if f.is_rank_test(node.test):
                    why = "a rank-dependent condition"
                elif not _over_data(s, f, loop):
                    continue  # a loop over a dict or a list: the same on every rank
                else:
                    if tainted is None:
                        tainted = rank_tainted(s, f, loop)
                    if not depends(s, f, node.test, tainted) or collective_answer(s, f, node.test):
                        continue  # (a join a collective decides: lint41)
                    why = "a condition on this rank's own data, loss or clock"
                kind = type(exit_).__name__.lower()
                effect = (
                    "skips the rest of this iteration"
                    if kind == "continue"
                    else f"leaves the loop (line {loop.lineno})"
                )
                # a collective only this branch runs is where the ranks part (a skip
                # flag all_reduced by the ranks that skip): said there
                coll = next(iter(_branch_colls(f, node, exit_)), None) if inner is node else None
                yield Hit.at(
                    "DDP-RANK-DIVERGENCE",
                    coll or exit_,
                    (
                        (f"`{ast.unparse(coll.func)}` and " if coll else "")
                        + f"`{kind}` under `{ast.unparse(node.test)}` ({why}) {effect} on some "
                        f"ranks, while the others wait in {skipped}"
                    ),
                    condition=ast.unparse(node.test),
                    collective=skipped,
                    reading="rank-test" if f.is_rank_test(node.test) else "own-data",
                )
                break


def _varies(s: Script, f: Flow, test: ast.expr, loop: ast.For | ast.AsyncFor | ast.While) -> bool:
    """The test differs between ranks: on the rank, or on this rank's data, loss or clock."""
    return f.is_rank_test(test) or (
        _over_data(s, f, loop) and depends(s, f, test, rank_tainted(s, f, loop))
    )


def _over_data(s: Script, f: Flow, loop: ast.AST) -> bool:
    """A loop over the training data: it runs backward passes, or iterates a DataLoader."""
    if loop in f.training_loops():
        return True
    it = loop.iter if isinstance(loop, ast.For | ast.AsyncFor) else None
    while (
        isinstance(it, ast.Call)
        and it.args
        and last(s.call_name(it)) in ("enumerate", "tqdm", "iter", "zip")
    ):
        it = it.args[0]
    return it is not None and any(
        isinstance(o, ast.Call) and last(s.call_name(o)) == "DataLoader" for o in s.origins(it)
    )


def _loop_of(s: Script, node: ast.AST) -> ast.AST | None:
    for a in s.ancestors(node):
        if isinstance(
            a, ast.For | ast.AsyncFor | ast.While | ast.FunctionDef | ast.AsyncFunctionDef
        ):
            return a
    return None


def _exits_in(body: list[ast.stmt]) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for st in body:
        if isinstance(st, _EXITS):
            out.append(st)
        elif isinstance(st, ast.If | ast.With | ast.Try):
            for field in ("body", "orelse", "handlers", "finalbody"):
                out += _exits_in([x for x in getattr(st, field, []) if isinstance(x, ast.stmt)])
    return out


def _sync_after(s: Script, f: Flow, node: ast.AST, loop: ast.AST) -> str | None:
    """The first sync point of the rest of this loop iteration after `node`."""
    child = node
    for a in s.ancestors(node):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(a, field, None)
            if isinstance(stmts, list) and child in stmts:
                found = f.stmts_sync(stmts[stmts.index(child) + 1 :])
                if found:
                    return found
        if a is loop:
            return None
        child = a
    return None


def mixed_collectives(s: Script, f: Flow) -> Iterator[Hit]:
    for call in s.calls:
        what = f.collective(call)
        if not what or const(kwarg(call, "async_op")) is not True:
            continue
        parent = s.parents.get(call)
        here = any(_is_wait(c) for c in s.function_calls(s.scope_of(call)))
        # returned or passed on: waited for elsewhere; `handles.append(...)`: then waits
        later = (
            _handed_on(s, parent)
            if isinstance(parent, ast.Assign)
            else any(_is_wait(c) for c in s.calls)
        )
        early = _read_before_wait(s, call, parent)
        if early is not None:
            yield Hit.at(
                "DDP-MIXED-COLLECTIVES",
                call,
                (
                    f"{what}(..., async_op=True): `{ast.unparse(call.args[0])}` is read at line "
                    f"{early} before the work handle's wait()"
                ),
                collective=what,
            )
        elif isinstance(parent, ast.Expr) or not (here or later):
            yield Hit.at(
                "DDP-MIXED-COLLECTIVES",
                call,
                (
                    f"{what}(..., async_op=True): its work handle is "
                    + ("thrown away" if isinstance(parent, ast.Expr) else "never waited for")
                    + ", so the tensor is read before the reduction has finished"
                ),
                collective=what,
            )


def _handed_on(s: Script, assign: ast.Assign) -> bool:
    """The work handle leaves the function: returned, stored, or passed to a call."""
    names = {ast.unparse(t) for t in assign.targets}
    for n in ast.walk(s.scope_of(assign)):
        if isinstance(n, ast.Return) and n.value is not None and ast.unparse(n.value) in names:
            return True
        if isinstance(n, ast.Call) and any(ast.unparse(a) in names for a in n.args):
            return True
        if (
            isinstance(n, ast.Assign)
            and n is not assign
            and any(ast.unparse(v) in names for v in [n.value])
        ):
            return True
    return False


def _read_before_wait(s: Script, call: ast.Call, parent: ast.AST | None) -> int | None:
    """The line where the async collective's tensor is used before `handle.wait()`."""
    if not (isinstance(parent, ast.Assign) and len(parent.targets) == 1 and call.args):
        return None
    handle, tensor = ast.unparse(parent.targets[0]), ast.unparse(call.args[0])
    calls = s.function_calls(s.scope_of(call))
    waits = [
        c.lineno
        for c in calls
        if _is_wait(c)
        and isinstance(c.func, ast.Attribute)
        and ast.unparse(c.func.value) == handle
        and c.lineno > call.lineno
    ]
    if not waits:
        return None
    for n in ast.walk(s.scope_of(call)):
        if (
            isinstance(n, ast.Name | ast.Attribute)
            and isinstance(n.ctx, ast.Load)
            and ast.unparse(n) == tensor
            and call.end_lineno is not None
            and call.end_lineno < n.lineno < min(waits)
        ):
            return n.lineno
    return None


def _is_wait(c: ast.Call) -> bool:
    return (isinstance(c.func, ast.Attribute) and c.func.attr in ("wait", "get_future")) or (
        ident(c.func) == "wait_all"
    )


RULES = (rank_divergence, mixed_collectives)
