"""DDP-SPAWN-ARGS, from a miss of blind batch AF1: `mp.spawn(main, nprocs=n, args=(cfg))`
(guochengqian/PointNeXt@15c8290, examples/segmentation/main.py). Parentheses around one
value make no tuple; `torch.multiprocessing.spawn` (and `start_processes`) call
`fn(i, *args)`, so each process gets the fields of `cfg` unpacked as its arguments, or
fails at once ("argument after * must be an iterable"). The fix writes `args=(cfg,)`.

Read from the source text, not the tree: `(cfg)` and `cfg` parse alike, and a plain name
that holds a tuple is right. A parenthesised name whose value is seen to be a tuple or a
list, and a parenthesised call (which may return one), stay silent."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.script import Script
from ddptui.lint.syntax import kwarg, last

_SPAWNERS = frozenset({"spawn", "start_processes"})
# One value in parentheses; a parenthesised call may return a tuple and stays silent.
_SINGLE = (ast.Name, ast.Attribute, ast.Subscript, ast.Constant, ast.Dict, ast.JoinedStr)


def _source_before(lines: list[str], node: ast.expr) -> str:
    """The source text of the node's own line up to the node (its column is in bytes)."""
    line = lines[node.lineno - 1] if 0 < node.lineno <= len(lines) else ""
    return line.encode()[: node.col_offset].decode(errors="replace")


def _source_after(lines: list[str], node: ast.expr) -> str:
    end = node.end_lineno or node.lineno
    line = lines[end - 1] if 0 < end <= len(lines) else ""
    return line.encode()[node.end_col_offset or 0 :].decode(errors="replace")


def _in_parens(lines: list[str], value: ast.expr) -> bool:
    """`args=(cfg)` or `, (cfg)`: an opening parenthesis right before the value (after
    `=` or `,`) and a closing one right after it, on the value's own lines."""
    before = _source_before(lines, value).rstrip()
    if not before.endswith("("):
        return False
    head = before[:-1].rstrip()
    return head.endswith(("=", ",")) and _source_after(lines, value).lstrip().startswith(")")


def _sequence(s: Script, value: ast.expr) -> bool:
    """The value is seen to be a tuple or a list somewhere: then `(value)` is right."""
    return any(
        isinstance(o, ast.Tuple | ast.List | ast.ListComp | ast.BinOp | ast.Starred)
        or (isinstance(o, ast.Call) and s.call_name(o) in ("tuple", "list"))
        for o in s.origins(value)
    )


def _one_value(s: Script, value: ast.expr) -> bool:
    """Every value the name is seen to take is one object (a class built, a constant)."""
    found = s.origins(value)
    return bool(found) and all(
        isinstance(o, ast.Constant | ast.Dict | ast.JoinedStr)
        or (
            isinstance(o, ast.Call)
            and (s.class_named(o.func) is not None or last(s.call_name(o))[:1].isupper())
        )
        for o in found
    )


def _takes_one_more(s: Script, fn: ast.expr | None) -> bool:
    """The spawned function, found in the project, takes the rank and one argument more
    (`def main(gpu, cfg)`): args= is meant to hold that one value."""
    if not isinstance(fn, ast.Name):
        return False
    defs = s.module_of(fn).functions.get(fn.id, [])
    return bool(defs) and all(
        isinstance(d, ast.FunctionDef | ast.AsyncFunctionDef)
        and d.args.vararg is None
        and len(d.args.posonlyargs) + len(d.args.args) == 2
        for d in defs
    )


def spawn_args_not_tuple(s: Script, f: Flow) -> Iterator[Hit]:
    del f  # the launch itself is the evidence: no DDP wrap needs to be seen
    for c in s.calls:
        qn = s.call_name(c)
        if last(qn) not in _SPAWNERS or not qn.startswith("torch.multiprocessing"):
            continue
        value = kwarg(c, "args", 1)
        if not isinstance(value, _SINGLE) or _sequence(s, value):
            continue
        if not (
            _takes_one_more(s, c.args[0] if c.args else kwarg(c, "fn")) or _one_value(s, value)
        ):
            continue
        if not _in_parens(s.module_of(c).lines, value):
            continue
        text = ast.unparse(value)
        yield Hit.at(
            "DDP-SPAWN-ARGS",
            value,
            f"`args=({text})` passes `{text}` itself, not a one-element tuple: spawn calls "
            f"`fn(rank, *{text})`",
            value=text,
        )


RULES = (spawn_args_not_tuple,)
