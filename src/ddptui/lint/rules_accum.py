"""Gradient accumulation whose `no_sync()` is on the wrong micro-batches: the test that
picks `no_sync` and the test that steps the optimizer count micro-steps from different
origins (`batch_idx % n != 0` against `(batch_idx + 1) % n == 0`), so the micro-batch
the optimizer steps on is never all-reduced."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from ddptui.lint.flow import Flow, ident
from ddptui.lint.model import Hit
from ddptui.lint.script import Script
from ddptui.lint.syntax import const


@dataclass(frozen=True)
class Phase:
    """`(base + offset) % modulus == 0` (`equal`) or `!= 0`."""

    base: str
    offset: int
    modulus: str
    equal: bool


def phase(test: ast.expr) -> Phase | None:
    """The one modulo test of an expression, if it has exactly one."""
    found = [n for n in ast.walk(test) if isinstance(n, ast.Compare) and _mod_zero(n)]
    if len(found) != 1:
        return None
    cmp = found[0]
    assert isinstance(cmp.left, ast.BinOp)
    left, modulus = cmp.left.left, cmp.left.right
    offset = 0
    if isinstance(left, ast.BinOp) and isinstance(left.op, ast.Add | ast.Sub):
        k = const(left.right)
        if not isinstance(k, int) or isinstance(k, bool):
            return None
        offset = k if isinstance(left.op, ast.Add) else -k
        left = left.left
    base, mod = ident(left), ident(modulus)
    if base is None or mod is None:
        return None
    return Phase(base, offset, mod, isinstance(cmp.ops[0], ast.Eq))


def _mod_zero(cmp: ast.Compare) -> bool:
    return (
        len(cmp.ops) == 1
        and isinstance(cmp.ops[0], ast.Eq | ast.NotEq)
        and isinstance(cmp.left, ast.BinOp)
        and isinstance(cmp.left.op, ast.Mod)
        and const(cmp.comparators[0]) == 0
    )


def _mentions_no_sync(nodes: list[ast.AST]) -> bool:
    return any(
        isinstance(n, ast.Attribute) and n.attr == "no_sync" for x in nodes for n in ast.walk(x)
    )


def _steps_optimizer(nodes: list[ast.stmt]) -> bool:
    for st in nodes:
        for n in ast.walk(st):
            if (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr == "step"
                and "sched" not in ast.unparse(n.func.value).lower()
            ):
                return True
    return False


def _sync_residue(node: ast.If | ast.IfExp, p: Phase) -> int | None:
    """The offset whose multiples sync: no_sync on the branch taken when the test
    holds (or not)."""
    body = node.body if isinstance(node.body, list) else [node.body]
    orelse = node.orelse if isinstance(node.orelse, list) else [node.orelse]
    in_body, in_else = _mentions_no_sync(list(body)), _mentions_no_sync(list(orelse))
    if in_body == in_else:
        return None
    # no_sync where the test holds: syncs where it fails; `!= 0` fails on the multiples
    syncs_on_multiples = in_body != p.equal
    return p.offset if syncs_on_multiples else None


def no_sync_phase(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.torch_ddp_calls or not f.uses("no_sync"):
        return
    steps: list[tuple[ast.If, Phase]] = []
    for n in s.nodes:
        if isinstance(n, ast.If) and _steps_optimizer(n.body) and not n.orelse:
            p = phase(n.test)
            if p is not None and p.equal:
                steps.append((n, p))
    for n in s.nodes:
        if not isinstance(n, ast.If | ast.IfExp):
            continue
        p = phase(n.test)
        if p is None:
            continue
        sync = _sync_residue(n, p)
        if sync is None:
            continue
        for step_if, q in steps:
            if (q.base, q.modulus) == (p.base, p.modulus) and q.offset != sync:
                yield Hit.at(
                    "DDP-NO-SYNC",
                    n,
                    (
                        f"`no_sync()` is chosen by `{ast.unparse(n.test)}`, but the optimizer "
                        f"steps where `{ast.unparse(step_if.test)}` ({s.path_of(step_if)}:"
                        f"{step_if.lineno}): the micro-batch it steps on runs under no_sync, "
                        "so its gradients are never all-reduced and the ranks drift apart"
                    ),
                    model=next(
                        (
                            ast.unparse(a.value)
                            for a in ast.walk(n)
                            if isinstance(a, ast.Attribute) and a.attr == "no_sync"
                        ),
                        "model",
                    ),
                )
                return


RULES = (no_sync_phase,)
