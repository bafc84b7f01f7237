"""DDP-SOLO-PASS-TIMEOUT: one rank runs a whole pass over a data loader (an evaluation)
while every other rank goes on into a collective and waits for it, under the process
group's default timeout.

nnaisense/bayesian-flow-networks@b62568e (train.py 156-168; PR #6, the maintainer's answer:
"IIRC the default timeout is 30 mins so if the val takes longer than that nccl will throw an
error", and the fix he chose: "increasing the timeout or reducing val iters"):
`if is_main and (step % cfg.val_interval == 0): val_loss = validate(...)`, whose loop runs
over the whole validation loader, inside the step loop whose next `accelerator.backward`
all-reduces on every rank. The other ranks block there for the whole evaluation; past the
timeout (NCCL 10 minutes in recent torch, 30 in older; gloo 30) the watchdog kills a job
that was making progress. The same in huggingface/finetrainers#114 (one GPU validates,
the others stall, "increase NCCL timeout"), Synthefy/synthefy-nori#86 and
EleutherAI/bergson#444 (rank-0-only work, then a collective the others block in).

Precision first: only a `for` loop over a loader (a DataLoader or a value named a loader)
that runs a pass (no unconditional `break` in its body), under a rank test in its own
function or at a call site up to two callers above; only when the code after that test
(the rest of its block, or the loop around it) reaches a sync on every rank; silent when
any `init_process_group` / `InitProcessGroupKwargs` / `init_distributed` call sets a
`timeout` (or passes `**kwargs`), and when the pass itself runs a collective (that is a
hang: DDP-RANK-DIVERGENCE's)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import LAUNCHERS, Flow
from ddptui.lint.model import Hit
from ddptui.lint.nodes import calls_in
from ddptui.lint.project import FuncNode
from ddptui.lint.rules_data import is_loader, iterated
from ddptui.lint.script import Script
from ddptui.lint.syntax import kwarg, last

ID: Final = "DDP-SOLO-PASS-TIMEOUT"
_LOADER_NAME: Final = re.compile(r"loader|dataloader", re.I)
_INITS: Final = frozenset({"init_process_group", "InitProcessGroupKwargs", "init_distributed"})
_HOPS: Final = 2


def _timeout_set(s: Script) -> ast.Call | None:
    """An init call that sets the timeout (or may, through `**kwargs`)."""
    for c in s.calls:
        if last(s.call_name(c)) in _INITS and (
            kwarg(c, "timeout") is not None or any(k.arg is None for k in c.keywords)
        ):
            return c
    return None


def _init_call(s: Script) -> ast.Call | None:
    """Where the timeout goes: the process group's start, else the launcher's object."""
    for names in (_INITS, LAUNCHERS):
        found = next((c for c in s.calls if last(s.call_name(c)) in names), None)
        if found is not None:
            return found
    return None


def _collective_in(s: Script, f: Flow, stmts: list[ast.stmt], depth: int = 0) -> bool:
    """A collective in these statements or the functions they call (three hops). A DDP
    forward is none here: under no_grad, as evaluations run, it syncs nothing."""
    for c in calls_in(stmts):
        if f.collective(c):
            return True
        if depth < 3 and any(_collective_in(s, f, fn.body, depth + 1) for fn in s.callees(c)):
            return True
    return False


def _data_pass(s: Script, loop: ast.For | ast.AsyncFor) -> ast.expr | None:
    it = iterated(s, loop)
    if it is None:
        return None
    if any(isinstance(st, ast.Break) for st in loop.body):
        return None  # one batch, then out: a sample, not a pass
    if _LOADER_NAME.search(ast.unparse(it)) or any(is_loader(s, o) for o in s.origins(it)):
        return it
    return None


def _short(expr: ast.expr, n: int = 60) -> str:
    text = ast.unparse(expr)
    return text if len(text) <= n else text[: n - 3] + "..."


def _function_of(s: Script, node: ast.AST) -> FuncNode | None:
    for a in s.ancestors(node):
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef):
            return a
    return None


def _guard_above(s: Script, f: Flow, node: ast.AST, hops: int = 0) -> ast.If | None:
    """The rank `if` whose body holds `node` in its function, or holds a call of that
    function (up to two callers above)."""
    g = f.local_guard(node)
    if isinstance(g, ast.If):
        return g if any(node is n for st in g.body for n in ast.walk(st)) else None
    func = _function_of(s, node)
    if func is None or hops >= _HOPS:
        return None
    for site in s.call_sites(func):
        found = _guard_above(s, f, site, hops + 1)
        if found is not None:
            return found
    return None


def _others_wait(s: Script, f: Flow, guard: ast.If) -> ast.stmt | None:
    """Where the ranks that skip `guard` sync next: a statement after it in its block, or
    the loop around it (its next turn)."""
    child: ast.AST = guard
    for a in s.ancestors(guard):
        for name in ("body", "orelse", "finalbody"):
            stmts: list[ast.stmt] | None = getattr(a, name, None)
            if isinstance(stmts, list) and child in stmts:
                for st in stmts[stmts.index(child) + 1 :]:
                    if _syncs(s, f, st):
                        return st
        if isinstance(a, ast.For | ast.AsyncFor | ast.While):
            for st in a.body:
                if st is not child and _syncs(s, f, st):
                    return st
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.Module):
            return None
        child = a
    return None


def _syncs(s: Script, f: Flow, st: ast.stmt) -> bool:
    """The statement makes every rank wait for the others: a sync point flow.py knows, or,
    where a launcher (accelerate, Fabric) wraps the model out of sight, a backward pass
    (its gradient all-reduce), here or in a function it calls."""
    if f.stmts_sync([st]):
        return True
    return f.uses(*LAUNCHERS) and any(
        f.is_backward(c) or any(f.has_backward(fn) for fn in s.callees(c)) for c in calls_in([st])
    )


def solo_pass(s: Script, f: Flow) -> Iterator[Hit]:
    if not (f.distributed or f.uses(*LAUNCHERS)) or _timeout_set(s) is not None:
        return
    seen: set[ast.If] = set()
    for loop in (n for n in s.nodes if isinstance(n, ast.For | ast.AsyncFor)):
        it = _data_pass(s, loop)
        if it is None or _collective_in(s, f, loop.body):
            continue
        guard = _guard_above(s, f, loop)
        if guard is None or guard in seen or _collective_in(s, f, guard.body):
            continue  # what runs under the test syncs: a hang (DDP-RANK-DIVERGENCE's)
        waits = _others_wait(s, f, guard)
        if waits is None:
            continue
        seen.add(guard)
        init = _init_call(s)
        also: tuple[tuple[ast.AST, str], ...] = ((loop, "pass over the loader at"),)
        also += ((waits, "the other ranks wait at"),)
        if init is not None:
            also += ((init, "set timeout= at"),)
        yield Hit.at(
            ID,
            guard,
            f"only the ranks where `{_short(guard.test)}` holds run the pass over "
            f"`{_short(it)}` (line {loop.lineno}); the others go on and wait in "
            f"the next sync (line {waits.lineno}) for as long as it takes: past the process "
            "group's timeout the watchdog kills the job",
            also=also,
            test=_short(guard.test, 100),
        )


RULES = (solo_pass,)
