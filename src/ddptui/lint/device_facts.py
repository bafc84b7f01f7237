"""Where the code puts a module or its processes' GPUs, as facts for the device rules
(rules_model): a module built under `with torch.device("meta")` (no storage until
`to_empty`), and CUDA_VISIBLE_DEVICES set by the script to one GPU per process (so that
`cuda:0` is each process's own GPU) rather than to the same list in every process."""

from __future__ import annotations

import ast

from ddptui.lint.flow import ident
from ddptui.lint.reach import built_classes
from ddptui.lint.script import Script
from ddptui.lint.syntax import const, last


def on_meta(s: Script, expr: ast.expr) -> ast.With | None:
    """The `with torch.device("meta"):` a module `expr` is built under (ecmwf/
    WeatherGenerator's trainer, blind AI1), with no `to_empty` on the way."""
    for o in s.origins(expr):
        if isinstance(o, ast.Call) and isinstance(o.func, ast.Attribute) and o.func.attr in (
            "to_empty",
            "to",
            "cuda",
        ):
            return None
    for o in s.origins(expr):
        if not isinstance(o, ast.Call):
            continue
        for a in s.ancestors(o):
            if (
                isinstance(a, ast.With)
                and isinstance(ctx := a.items[0].context_expr, ast.Call)
                and last(s.call_name(ctx)) == "device"
                and any(const(x) == "meta" for x in ctx.args)
            ):
                return a
    return None


def sets_visible_devices(s: Script) -> bool:
    """The script sets CUDA_VISIBLE_DEVICES itself, so `cuda:0` may be each process's own
    GPU. Not when every value it sets is a join of several GPUs (`",".join(str(i) for i in
    gpus)`, the same list in every process: DBNet.pytorch's train.py at 0bd5ae1, whose
    trainer then puts every rank on `torch.device("cuda:0")`)."""
    values = [
        p.value
        for n in s.nodes
        if isinstance(n, ast.Constant)
        and n.value == "CUDA_VISIBLE_DEVICES"
        and isinstance(sub := s.parents.get(n), ast.Subscript)
        and isinstance(p := s.parents.get(sub), ast.Assign)
    ]
    return any(not _joined(v) for v in values)


def _joined(value: ast.expr) -> bool:
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr == "join"
        and isinstance(value.func.value, ast.Constant)
    )


def moves_itself(s: Script, call: ast.Call) -> bool:
    """The class `call` builds puts itself on its device in its own `__init__` (or a
    base's): `self.to(flair.device)` at the end of flairNLP/flair's SequenceTagger
    constructor (a correct blind AK2 project, wrapped with device_ids right after)."""
    for cls in built_classes(s, call):
        for init in s._methods(cls, "__init__"):
            for n in ast.walk(init):
                if (
                    isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Attribute)
                    and n.func.attr in ("to", "cuda")
                    and isinstance(n.func.value, ast.Name)
                    and n.func.value.id == "self"
                    and (n.args or n.keywords or n.func.attr == "cuda")
                ):
                    return True
    return False


def device_string(c: ast.AST) -> ast.expr | None:
    """X of `"cuda:{}".format(X)`, `f"cuda:{X}"` and `"cuda:" + str(X)`."""
    if (
        isinstance(c, ast.BinOp)
        and isinstance(c.op, ast.Add)
        and const(c.left) == "cuda:"
        and isinstance(c.right, ast.Call)
        and ident(c.right.func) == "str"
        and len(c.right.args) == 1
    ):
        return c.right.args[0]
    if (
        isinstance(c, ast.Call)
        and isinstance(c.func, ast.Attribute)
        and c.func.attr == "format"
        and len(c.args) == 1
        and const(c.func.value) == "cuda:{}"
    ):
        return c.args[0]
    if (
        isinstance(c, ast.JoinedStr)
        and len(c.values) == 2
        and const(c.values[0]) == "cuda:"
        and isinstance(c.values[1], ast.FormattedValue)
    ):
        return c.values[1].value
    if (  # f"{device_type}:{rank}" (round 18, blind AN1: torch.accelerator's device type)
        isinstance(c, ast.JoinedStr)
        and len(c.values) == 3
        and isinstance(c.values[0], ast.FormattedValue)
        and "device" in (ident(c.values[0].value) or "").lower()
        and const(c.values[1]) == ":"
        and isinstance(c.values[2], ast.FormattedValue)
    ):
        return c.values[2].value
    return None
