"""Calibration and readings of lint27, from the false errors of blind batch T.

- DDP-WRAP-BEFORE-TO, a module built with a device argument (`LidarCenterNet(config,
  device, ...)`, TransFuser; `build_engine(..., aot_model=self.model, gpu_id=self.gpu)`,
  AOT): its constructor may place its parameters on that device before DDP wraps it, so a
  later `.cuda()` or an unseen `.to()` proves nothing; the finding is a warning that says
  so. A module built without one (`Net(cfg)`) stays an error.
- DDP-SAMPLER, a loader with `batch_size=None` (wekws): the dataset yields its own batches,
  an iterable pipeline that may split the data by rank itself; whether it does is not
  shown. A loader that batches (`batch_size=32`) stays an error.
- DDP-FIND-UNUSED: a child layer of a submodule read directly (`self.tf_row.blocks[-1]`,
  TabICL) runs that layer; such a use is no plain attribute (`self.x.size`).
"""

from __future__ import annotations

import ast
import re
from typing import Final

from ddptui.lint.model import Hit
from ddptui.lint.script import Script

_WRAPPER: Final = re.compile(r"(DistributedDataParallel|DDP|DataParallel)$")
_DEVICE_ARG: Final = re.compile(r"(^|_)(device|dev|gpu|gpu_id|gpu_ids|local_rank|cuda)$", re.I)


def doubt27(s: Script, hit: Hit) -> str | None:
    """Why this error's reading is not certain, or None."""
    node = hit.node
    if hit.id == "DDP-WRAP-BEFORE-TO" and isinstance(node, ast.Call) and node.args:
        given = _device_given(s, node.args[0], node)
        if given is not None:
            return (
                f"not certain: the module is built with `{given}`; the code does not show "
                "whether its constructor places the parameters on that device before the wrap"
            )
    if hit.id == "DDP-SAMPLER" and isinstance(node, ast.Call) and _unbatched(node):
        return (
            "not certain: the loader has batch_size=None, so the dataset yields its own "
            "batches; the code does not show whether that pipeline splits the data by rank"
        )
    if hit.id == "DDP-HARDCODED-DEVICE" and node is not None:
        return _chosen_class(s, node)
    return None


def _chosen_class(s: Script, node: ast.AST) -> str | None:
    """A fixed GPU inside a class the project builds only in an arm chosen by a string
    option (`elif args.sample_strategy == 'wwm': WholeWordMasking(tokenizer)`,
    DiffusionBERT, whose default is 'Categorical'): whether a distributed run picks that
    arm is not shown. A class built unconditionally stays an error."""
    cls = next((a for a in s.ancestors(node) if isinstance(a, ast.ClassDef)), None)
    if cls is None:
        return None
    sites = [c for c in s.calls if s.class_named(c.func) is cls]
    tests = [_string_arm(s, c) for c in sites]
    if not sites or any(t is None for t in tests):
        return None
    return (
        f"not certain: `{cls.name}` is built only when `{tests[0]}` (line {sites[0].lineno}); "
        "the code does not show a distributed run choosing that option"
    )


def _string_arm(s: Script, call: ast.Call) -> str | None:
    """The test of the nearest `if` whose body holds this call, where it compares an
    option with a string (`args.x == 'name'`)."""
    child: ast.AST = call
    for a in s.ancestors(call):
        if isinstance(a, ast.If):
            t = a.test
            if (
                any(child is b for b in a.body)
                and isinstance(t, ast.Compare)
                and len(t.ops) == 1
                and isinstance(t.ops[0], ast.Eq)
                and isinstance(t.comparators[0], ast.Constant)
                and isinstance(t.comparators[0].value, str)
            ):
                return ast.unparse(t)
            return None
        if isinstance(a, ast.FunctionDef | ast.ClassDef | ast.Module):
            return None
        child = a
    return None


def _unbatched(call: ast.Call) -> bool:
    return any(
        k.arg == "batch_size" and isinstance(k.value, ast.Constant) and k.value.value is None
        for k in call.keywords
    )


def _device_given(s: Script, expr: ast.expr, wrap: ast.Call, depth: int = 0) -> str | None:
    """The device argument a constructor this value comes from was given (two calls deep:
    `convert_sync_batchnorm(Net(cfg, device))`)."""
    if depth > 2:
        return None
    for o in s.origins(expr):
        if not isinstance(o, ast.Call) or o is wrap or _WRAPPER.search(ast.unparse(o.func)):
            continue  # the wrapper itself (`model = DDP(model, ...)` rebinds the name)
        for k in o.keywords:
            if k.arg is not None and _DEVICE_ARG.search(k.arg):
                return f"{k.arg}={ast.unparse(k.value)}"
        for a in o.args:
            text = ast.unparse(a)
            if isinstance(a, ast.Name | ast.Attribute) and _DEVICE_ARG.search(text.split(".")[-1]):
                return text
        for a in [*o.args, *(k.value for k in o.keywords)]:
            if isinstance(a, ast.Name | ast.Attribute) and a is not expr:
                inner = _device_given(s, a, wrap, depth + 1)
                if inner is not None:
                    return inner
    return None


def layer_attrs(sub: ast.ClassDef) -> set[str]:
    """Attributes `sub.__init__` assigns from a call (a child layer, a ModuleList): reading
    one from outside (`self.x.blocks[-1](q)`) runs that layer."""
    out: set[str] = set()
    for fn in sub.body:
        if not (isinstance(fn, ast.FunctionDef) and fn.name == "__init__"):
            continue
        for n in ast.walk(fn):
            if not isinstance(n, ast.Assign | ast.AnnAssign):
                continue
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if n.value is None or not any(isinstance(c, ast.Call) for c in ast.walk(n.value)):
                continue
            for t in targets:
                if (
                    isinstance(t, ast.Attribute)
                    and isinstance(t.value, ast.Name)
                    and t.value.id == "self"
                ):
                    out.add(t.attr)
    return out
