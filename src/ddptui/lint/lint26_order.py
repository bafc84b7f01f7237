"""Checkpoint saves, loads and sync points in execution order, for DDP-CKPT-BARRIER
(moved from rules_io, lint26), with the two branches of an `if`/`else` kept apart.

Blind batch S, Point-MAE (Pang-Yatian/Point-MAE@7445a68, a correct project): main.py runs
`if args.finetune_model or args.scratch_model: finetune(...) else: pretrain(...)`; the
finetune runner ends with a rank-0 `save_checkpoint`, the pretrain runner starts with
`resume_model` (a `torch.load` on every rank). Read as one sequence, the save of the `if`
branch came before the load of the `else` branch: a write-then-read that no run does. The
walk now marks an `if` that has an `else` ("if", "else", "end" events): the `else` starts
from the state before the `if`, and after it either branch's state may hold."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddptui.lint.flow import Flow
from ddptui.lint.lint15 import one_shot, pretrained_kind
from ddptui.lint.nodes import calls_in
from ddptui.lint.project import FuncNode
from ddptui.lint.script import Script
from ddptui.lint.syntax import last


def torch_call(s: Script, call: ast.Call, name: str) -> bool:
    """`torch.save` / `torch.load` (any torch function called `name`), not torch.distributed's."""
    qn = s.call_name(call)
    return last(qn) == name and qn.startswith("torch") and "distributed" not in qn


# (kind, call, guarded, via); kind "if" / "else" / "end" marks the branches of an if/else
# (the node is then the `if` statement itself); `via`: the project calls that led from the
# walked statements down to the call, outermost first (lint43: the call sites of helpers)
Event = tuple[str, ast.AST, bool, tuple[ast.Call, ...]]


def in_order(
    stmts: list[ast.stmt], again: bool = False
) -> Iterator[ast.Call | ast.If | ast.With | ast.AsyncWith]:
    """Calls in execution order, a loop's body twice (the next iteration follows); on
    that second pass a one-shot branch (`if cfg['checkpoint'] is not None: load(...);
    cfg['checkpoint'] = None`) no longer runs. An `if` with an `else` is yielded
    itself before its body, between the branches and after them; a `with` is yielded
    itself after its body (its exit: a `@contextmanager`'s code after `yield` runs there)."""
    for st in stmts:
        if isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if isinstance(st, ast.For | ast.AsyncFor | ast.While):
            yield from calls_in([st.iter if isinstance(st, ast.For | ast.AsyncFor) else st.test])
            yield from in_order(st.body, again)
            yield from in_order(st.body, True)
            yield from in_order(st.orelse, again)
        elif isinstance(st, ast.If) and _distributed_on(st.test):
            yield from calls_in([st.test])  # under DDP the group is up: only the body runs
            yield from in_order(st.body, again)
        elif isinstance(st, ast.If):
            yield from calls_in([st.test])
            if st.orelse:
                yield st
            if not (again and one_shot(st)):
                yield from in_order(st.body, again)
            if st.orelse:
                yield st
                yield from in_order(st.orelse, again)
                yield st
        elif isinstance(st, ast.With | ast.AsyncWith):
            yield from calls_in([i.context_expr for i in st.items])
            yield from in_order(st.body, again)
            yield st
        elif isinstance(st, ast.Try):
            for part in (st.body, *(h.body for h in st.handlers), st.orelse, st.finalbody):
                yield from in_order(part, again)
        else:
            yield from calls_in([st])


def events(
    s: Script,
    f: Flow,
    stmts: list[ast.stmt],
    guarded: bool,
    seen: frozenset[FuncNode],
    memo: dict[tuple[FuncNode, bool], list[Event]],
) -> list[Event]:
    """Checkpoint saves, loads and sync points in execution order, same-file calls
    followed (each function's events computed once)."""
    out: list[Event] = []
    marks: dict[ast.If, int] = {}
    for call in in_order(stmts):
        if isinstance(call, ast.With | ast.AsyncWith):
            out += _exits(s, f, call, guarded, seen, memo)
            continue
        if isinstance(call, ast.If):
            marks[call] = marks.get(call, 0) + 1
            out.append((("if", "else", "end")[(marks[call] - 1) % 3], call, guarded, ()))
            continue
        g = guarded or f.local_guard(call) is not None
        if torch_call(s, call, "save"):
            out.append(("save", call, g, ()))
        elif torch_call(s, call, "load"):
            out.append(("load", call, g, ()))
        elif (pk := pretrained_kind(call)) is not None:
            out.append((pk, call, g, ()))
        elif f.direct_sync(call):
            out.append(("sync", call, g, ()))
        for fn in s.callees(call):
            if fn in seen or len(seen) >= 8:
                continue
            if (fn, g) not in memo:  # a context manager runs up to its `yield` on entry
                body = around_yield(fn)[0] if is_context_manager(fn) else fn.body
                memo[(fn, g)] = events(s, f, body, g, seen | {fn}, memo)
            out += [(k, c, gg, (call, *via)) for k, c, gg, via in memo[(fn, g)]]
    return out


def _exits(
    s: Script,
    f: Flow,
    with_: ast.With | ast.AsyncWith,
    guarded: bool,
    seen: frozenset[FuncNode],
    memo: dict[tuple[FuncNode, bool], list[Event]],
) -> list[Event]:
    """The events of leaving a `with`: each project context manager's code after its
    `yield` (a `sync_workers()` whose exit is a barrier)."""
    out: list[Event] = []
    for item in with_.items:
        ce = item.context_expr
        if not isinstance(ce, ast.Call):
            continue
        for fn in s.callees(ce):
            if fn not in seen and is_context_manager(fn):
                tail = events(s, f, around_yield(fn)[1], guarded, seen | {fn}, memo)
                out += [(k, c, gg, (ce, *via)) for k, c, gg, via in tail]
    return out


def _distributed_on(test: ast.expr) -> bool:
    """`dist.is_initialized()`, `dist.is_available() and dist.is_initialized()`: true in
    every run this audit is about, so the `else` (`torch.cuda.synchronize()` in NVIDIA's
    `barrier()` helper) never runs there and cannot leave a write unwaited for."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    return all(
        isinstance(p, ast.Call)
        and isinstance(p.func, ast.Attribute)
        and p.func.attr in {"is_initialized", "is_available"}
        and ast.unparse(p.func.value).split(".")[-1] in {"dist", "distributed"}
        and not p.args
        for p in parts
    )


def is_context_manager(fn: FuncNode) -> bool:
    """A generator turned into a context manager (`@contextmanager`, `@contextlib.
    contextmanager`, the async twin)."""
    return any(ast.unparse(d).endswith("contextmanager") for d in fn.decorator_list)


def around_yield(fn: FuncNode) -> tuple[list[ast.stmt], list[ast.stmt]]:
    """A context manager's statements before its `yield` (run on entering the `with`) and
    after it (run on leaving: a `finally` around the `yield` included). NVIDIA's
    Transformer-XL `sync_workers()`: `rank = get_rank(); yield rank; barrier()`."""
    for i, st in enumerate(fn.body):
        if not any(isinstance(n, ast.Yield) for n in ast.walk(st)):
            continue
        if isinstance(st, ast.Try):
            return fn.body[:i] + st.body, st.finalbody + fn.body[i + 1 :]
        return fn.body[:i], fn.body[i + 1 :]
    return fn.body, []


# (pending write, written dirs) at the end of the `if` body, and before the `if`
Frame = tuple[ast.Call | None, list[ast.Call], ast.Call | None, list[ast.Call]]


def branch(
    kind: str, stack: list[Frame], pending: ast.Call | None, written: list[ast.Call]
) -> tuple[ast.Call | None, list[ast.Call]]:
    """The state after an "if" / "else" / "end" event: the `else` starts from the state
    before the `if`; after the `end`, what either branch left may hold."""
    if kind == "if":
        stack.append((pending, written, pending, list(written)))
        return pending, written
    if kind == "else":
        before, done = stack[-1][2], stack[-1][3]
        stack[-1] = (pending, written, before, done)
        return before, list(done)
    body, body_written, _, _ = stack.pop()
    # a union, not a sum: the body's list starts as a copy of the state before the `if`,
    # and summing would double it at each if/else (2**n on a long chain of them)
    return pending or body, written + [w for w in body_written if w not in written]
