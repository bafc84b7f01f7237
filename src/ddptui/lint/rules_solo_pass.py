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

Also when the pass sits in a function that an earlier `if not is_master(args): return`
leaves on the other ranks: they return at once and go on from its call, where the finding
is said (mlfoundations/open_clip@a9ad60c, blind batch AR2; fixed in bfd2f34 by a barrier).

Precision first: only a `for` loop over a loader (a DataLoader, or a name or attribute named
a loader) that runs a pass (no unconditional `break` in its body), under a rank test in its
own function or at a call site up to two callers above; only when the code after that test
(the rest of its block, or the loop around it) reaches a sync on every rank; silent when
any `init_process_group` / `InitProcessGroupKwargs` / `init_distributed` call sets a
`timeout` (or passes `**kwargs`), and when the pass itself runs a collective (that is a
hang: DDP-RANK-DIVERGENCE's)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from ddptui.lint.flow import LAUNCHERS, Flow
from ddptui.lint.model import Hit
from ddptui.lint.nodes import calls_in
from ddptui.lint.project import FuncNode
from ddptui.lint.rules_data import is_loader, iterated
from ddptui.lint.rules_notapplied import stmt_of
from ddptui.lint.script import Script
from ddptui.lint.syntax import kwarg, last

ID: Final = "DDP-SOLO-PASS-TIMEOUT"
_LOADER_NAME: Final = re.compile(r"loader", re.I)
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


def _collective_in(s: Script, f: Flow, stmts: list[ast.stmt]) -> bool:
    """A collective in these statements or the functions they call (three hops). A DDP
    forward is none here: under no_grad, as evaluations run, it syncs nothing."""
    return f.reaches(calls_in(stmts), lambda c: bool(f.collective(c)), 3)


def _data_pass(s: Script, loop: ast.For | ast.AsyncFor) -> ast.expr | None:
    it = iterated(s, loop)
    if it is None:
        return None
    if any(isinstance(st, ast.Break) for st in loop.body):
        return None  # one batch, then out: a sample, not a pass
    named = isinstance(it, ast.Name | ast.Attribute) and _LOADER_NAME.search(ast.unparse(it))
    if named or any(is_loader(s, o) for o in s.origins(it)):
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


@dataclass(frozen=True)
class _Site:
    """Where one rank's pass is entered: `stmt`, the statement the other ranks skip (the
    rank `if`, or the call of a function that leaves early on the others), the rank `test`,
    and the statements that run on the passing rank only (`alone`)."""

    stmt: ast.stmt
    test: ast.expr
    alone: list[ast.stmt]
    early: bool  # the test leaves the function early (`if not is_master(args): return`)


def _sites(s: Script, f: Flow, node: ast.AST, hops: int = 0) -> Iterator[_Site]:
    """The rank `if` whose body holds `node` in its function, or holds a call of that
    function (up to two callers above); or the calls of a function that an earlier
    `if not main: return` leaves on the other ranks (they go on at the call at once)."""
    g = f.local_guard(node)
    func = _function_of(s, node)
    if isinstance(g, ast.If) and any(node is n for st in g.body for n in ast.walk(st)):
        yield _Site(g, g.test, g.body, early=False)
        return
    if func is None or hops >= _HOPS:
        return
    for site in s.call_sites(func):
        if isinstance(g, ast.If):
            stmt = stmt_of(s, site)
            if stmt is not None and f.local_guard(site) is None:
                yield _Site(stmt, g.test, [stmt], early=True)
        else:
            yield from _sites(s, f, site, hops + 1)


def _others_wait(s: Script, f: Flow, guard: ast.stmt) -> ast.stmt | None:
    """Where the ranks that skip `guard` sync next: a statement after it in its block, or
    the loop around it (its next turn); none when its block leaves first (`return`)."""
    child: ast.AST = guard
    for a in s.ancestors(guard):
        for name in ("body", "orelse", "finalbody"):
            stmts: list[ast.stmt] | None = getattr(a, name, None)
            if isinstance(stmts, list) and child in stmts:
                for st in stmts[stmts.index(child) + 1 :]:
                    if _syncs(s, f, st):
                        return st
                    if isinstance(st, ast.Return | ast.Raise):
                        return None
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
    return bool(f.stmts_sync([st])) or (f.uses(*LAUNCHERS) and f.stmts_backward([st]))


def solo_pass(s: Script, f: Flow) -> Iterator[Hit]:
    if not (f.distributed or f.uses(*LAUNCHERS)) or _timeout_set(s) is not None:
        return
    seen: set[ast.stmt] = set()
    for loop in (n for n in s.nodes if isinstance(n, ast.For | ast.AsyncFor)):
        it = _data_pass(s, loop)
        if it is None or _collective_in(s, f, loop.body):
            continue
        found = [
            (site, waits)
            for site in _sites(s, f, loop)
            if site.stmt not in seen and not _collective_in(s, f, site.alone)
            for waits in [_others_wait(s, f, site.stmt)]
            if waits is not None
        ]  # a site whose rank-only code syncs is a hang (DDP-RANK-DIVERGENCE's)
        if not found:
            continue
        site, waits = found[0]
        seen.add(site.stmt)
        init = _init_call(s)
        also: tuple[tuple[ast.AST, str], ...] = ((loop, "pass over the loader at"),)
        also += ((waits, "the other ranks wait at"),)
        if init is not None:
            also += ((init, "set timeout= at"),)
        who = (
            f"the ranks that get past `if {_short(site.test)}:` (line {site.test.lineno}, "
            "which returns early)"
            if site.early
            else f"the ranks where `{_short(site.test)}` holds"
        )
        yield Hit.at(
            ID,
            site.stmt,
            f"only {who} run the pass over `{_short(it)}` (line {loop.lineno}); the others go on "
            f"and wait in the next sync (line {waits.lineno}) for as long as it takes: past "
            "the process group's timeout the watchdog kills the job",
            also=also,
            who=who,
        )


RULES = (solo_pass,)
