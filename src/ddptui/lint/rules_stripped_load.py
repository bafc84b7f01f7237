"""DDP-LOAD-INTO-WRAPPER, read from the keys themselves: a state dict whose `module.` prefix
the code strips is loaded into the DDP wrapper, whose keys all carry it.

mlfoundations/open_lm@66efccf (open_lm/main.py 101-110, blind batch AS2; fixed in 09d3561):
`load_model(args, model)` takes a resumed checkpoint, turns `sd = {k[len("module."):]: v for
k, v in sd.items()}` and calls `model.load_state_dict(sd)` on the model main() wrapped in
DistributedDataParallel before calling it: strict loading fails with every key missing and
unexpected (strict=False loads nothing). The reading lint32 makes from what the project saves
stays silent here (the function names "module" itself, which usually means it handles the
prefix); the stripping says which way it went.

Precision first: only a dict comprehension (or `.replace` / `removeprefix` / a slice of
`len("module.")` or 7 in one) over the keys in the same function, loaded directly; only
when the receiver is a DDP wrapper on every path the code shows (`is_ddp_value`) and not
`x.module`."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.lint32 import state_dict_loads, wrapped_before
from ddptui.lint.model import Hit
from ddptui.lint.script import Script
from ddptui.lint.syntax import const

ID: Final = "DDP-LOAD-INTO-WRAPPER"
_PREFIX: Final = "module."


def _strips(expr: ast.AST) -> bool:
    """A key expression that drops the `module.` prefix."""
    for n in ast.walk(expr):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            args = [const(a) for a in n.args]
            if n.func.attr == "replace" and args[:1] == [_PREFIX]:
                return True
            if n.func.attr == "removeprefix" and args[:1] == [_PREFIX]:
                return True
        if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Slice):
            lower = n.slice.lower
            if const(lower) == len(_PREFIX):
                return True
            if (
                isinstance(lower, ast.Call)
                and isinstance(lower.func, ast.Name)
                and lower.func.id == "len"
                and lower.args
                and const(lower.args[0]) == _PREFIX
            ):
                return True
    return False


def _stripped(s: Script, scope: ast.AST, arg: ast.expr) -> ast.DictComp | None:
    """The dict comprehension that built `arg` with the prefix dropped from its keys."""
    if isinstance(arg, ast.DictComp):
        return arg if _strips(arg.key) else None
    if isinstance(arg, ast.Name):
        for value in s.assigned(scope, arg.id):  # type: ignore[arg-type]
            if isinstance(value, ast.DictComp) and _strips(value.key):
                return value
    return None


def stripped_into_wrapper(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.ddp_calls:
        return
    for c, receiver in state_dict_loads(s):
        if isinstance(receiver, ast.Attribute) and receiver.attr == "module":
            continue
        scope = s.scope_of(c)
        comp = _stripped(s, scope, c.args[0])
        if comp is None or not f.is_ddp_value(receiver) or not wrapped_before(s, f, c):
            continue
        model = ast.unparse(receiver)
        yield Hit.at(
            ID,
            c,
            (
                f"the keys lose their `module.` prefix (line {comp.lineno}), then load into "
                f"`{model}`, the DDP wrapper, whose keys all carry it: every key is missing "
                "and unexpected"
            ),
            also=((comp, "prefix stripped at"),),
            model=model,
        )


RULES = (stripped_into_wrapper,)
