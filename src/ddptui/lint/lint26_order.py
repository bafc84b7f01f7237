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

from ddptui.lint.flow import Flow, calls_in
from ddptui.lint.lint15 import one_shot, pretrained_kind
from ddptui.lint.project import FuncNode
from ddptui.lint.script import Script, last


def torch_call(s: Script, call: ast.Call, name: str) -> bool:
    """`torch.save` / `torch.load` (any torch function called `name`), not torch.distributed's."""
    qn = s.call_name(call)
    return last(qn) == name and qn.startswith("torch") and "distributed" not in qn


# (kind, call, guarded, via); kind "if" / "else" / "end" marks the branches of an if/else
# (the node is then the `if` statement itself); `via`: the project calls that led from the
# walked statements down to the call, outermost first (lint43: the call sites of helpers)
Event = tuple[str, ast.AST, bool, tuple[ast.Call, ...]]


def in_order(stmts: list[ast.stmt], again: bool = False) -> Iterator[ast.Call | ast.If]:
    """Calls in execution order, a loop's body twice (the next iteration follows); on
    that second pass a one-shot branch (`if cfg['checkpoint'] is not None: load(...);
    cfg['checkpoint'] = None`) no longer runs. An `if` with an `else` is yielded
    itself before its body, between the branches and after them."""
    for st in stmts:
        if isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if isinstance(st, ast.For | ast.AsyncFor | ast.While):
            yield from calls_in([st.iter if isinstance(st, ast.For | ast.AsyncFor) else st.test])
            yield from in_order(st.body, again)
            yield from in_order(st.body, True)
            yield from in_order(st.orelse, again)
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
            if (fn, g) not in memo:
                memo[(fn, g)] = events(s, f, fn.body, g, seen | {fn}, memo)
            out += [(k, c, gg, (call, *via)) for k, c, gg, via in memo[(fn, g)]]
    return out


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
