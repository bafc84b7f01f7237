"""DDP-WRAPPER-ATTR in the methods a subclass inherits and that run on its instances
(blind batch S, lint26).

AutoResearch/EEG-GAN @ 67456eb0 and @ 738f1f1f: `DDPTrainer(Trainer)` wraps in its own
method (`set_ddp_framework`: `self.discriminator = DDP(self.discriminator, ...)`), and the
process then runs `training.training(dataset)` on that instance (`_ddp_training(training:
DDPTrainer, opt)`), whose base-class body calls `self.batch_train(...)`, which reads
`self.discriminator.channels` (helpers/trainer.py:168; the wrapper has none: an
AttributeError) and tests `isinstance(self.generator, AutoencoderGenerator)` (:267; the
wrapper is no AutoencoderGenerator: the decoding never runs under DDP). Fixed by reading
through `.module` (961d651, 500ab9d).

The base methods that run are those the subclass does not override and that are called
on the subclass's instances (`self.m()` in the subclass, `obj.m()` where obj is annotated
with or built from the subclass), and the base methods those call on `self`. A read
under a test that tells the wrapper apart (`hasattr(self.generator, 'module')`,
`isinstance(x, DDP)`, a mode flag) is no finding; an isinstance test against one of the
project's own model classes is the finding itself."""

from __future__ import annotations

import ast
import re
import weakref
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.rules_project import _WRAPPER_API
from ddptui.lint.rules_wrapper import _attr_elsewhere, _project_bases, _wrapped_attrs
from ddptui.lint.script import Script

_TELLS: Final = re.compile(
    r"module|Parallel|DDP|distributed|ddp|deepspeed|fsdp|world|multi_gpu|num_gpus|n_gpu|rank",
    re.I,
)


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}


def _self_calls(fn: ast.FunctionDef) -> set[str]:
    return {
        n.func.attr
        for n in own_nodes(fn)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id == "self"
    }


def _instance_calls(s: Script, sub: ast.ClassDef) -> set[str]:
    """Methods called on names that hold the subclass: annotated with it, or built
    from it."""
    by_annotation, by_origin = _instance_index(s)
    return by_annotation.get(sub.name, set()) | by_origin.get(sub, set())


_INDEX: weakref.WeakKeyDictionary[
    Script, tuple[dict[str, set[str]], dict[ast.ClassDef, set[str]]]
] = weakref.WeakKeyDictionary()


def _instance_index(
    s: Script,
) -> tuple[dict[str, set[str]], dict[ast.ClassDef, set[str]]]:
    """Every `obj.method(...)` call on a name (not `self`), once per script: the methods
    called per annotated class name, and per project class the name was built from (a
    project of 200 files asked this once per class took 20 s; LibreYOLO)."""
    if s in _INDEX:
        return _INDEX[s]
    by_annotation: dict[str, set[str]] = {}
    by_origin: dict[ast.ClassDef, set[str]] = {}
    for c in s.calls:
        if not (isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Name)):
            continue
        name = c.func.value
        if name.id == "self":
            continue
        fn = s.scope_of(c)
        if isinstance(fn, ast.FunctionDef):
            for a in fn.args.args:
                if a.arg == name.id and a.annotation is not None:
                    cls_name = ast.unparse(a.annotation).split(".")[-1]
                    by_annotation.setdefault(cls_name, set()).add(c.func.attr)
        for o in s.origins(name, params=False):
            cls = s.class_named(o.func) if isinstance(o, ast.Call) else None
            if cls is not None:
                by_origin.setdefault(cls, set()).add(c.func.attr)
    _INDEX[s] = (by_annotation, by_origin)
    return _INDEX[s]


def _running(
    s: Script, sub: ast.ClassDef, bases: list[ast.ClassDef]
) -> list[tuple[ast.ClassDef, ast.FunctionDef]]:
    own = _methods(sub)
    inherited: dict[str, tuple[ast.ClassDef, ast.FunctionDef]] = {}
    for b in reversed(bases):
        inherited.update({k: (b, m) for k, m in _methods(b).items()})
    todo = {*(c for m in own.values() for c in _self_calls(m)), *_instance_calls(s, sub)}
    done: dict[str, tuple[ast.ClassDef, ast.FunctionDef]] = {}
    while todo:
        name = todo.pop()
        if name in own or name in done or name not in inherited or name == "__init__":
            continue
        done[name] = inherited[name]
        todo |= _self_calls(inherited[name][1])
    return sorted(done.values(), key=lambda bm: bm[1].lineno)


def _told(s: Script, node: ast.AST) -> bool:
    """Under a test that tells the wrapper from the model (the test's own isinstance of a
    project model class does not)."""
    child: ast.AST = node
    for a in s.ancestors(node):
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef):
            return False
        if (
            isinstance(a, ast.If | ast.IfExp)
            and a.test is not child
            and _TELLS.search(test(a.test, node))
        ):
            return True
        child = a
    return False


def test(expr: ast.expr, node: ast.AST) -> str:
    """A test's text; for a read under `isinstance(self.X, ModelCls)` (the body never runs
    under DDP: the isinstance is the finding), "module" (told)."""
    held = (
        node.args[0] if isinstance(node, ast.Call) and node.args else getattr(node, "value", None)
    )
    for c in ast.walk(expr):
        if (
            isinstance(c, ast.Call)
            and isinstance(c.func, ast.Name)
            and c.func.id == "isinstance"
            and c.args
            and held is not None
            and ast.unparse(c.args[0]) == ast.unparse(held)
            and c is not node
        ):
            return "module"
    return ast.unparse(expr)


def _read(s: Script, n: ast.AST, wrapped: set[str]) -> tuple[str, str] | None:
    """(held attribute, what is read) for `self.X.attr` or `isinstance(self.X, ModelCls)`."""
    if (
        isinstance(n, ast.Attribute)
        and isinstance(n.ctx, ast.Load)
        and isinstance(n.value, ast.Attribute)
        and isinstance(n.value.value, ast.Name)
        and n.value.value.id == "self"
        and n.value.attr in wrapped
        and not n.attr.startswith("_")
        and n.attr not in _WRAPPER_API
    ):
        return n.value.attr, n.attr
    if (
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id == "isinstance"
        and len(n.args) == 2
        and isinstance(n.args[0], ast.Attribute)
        and ast.unparse(n.args[0].value) == "self"
        and n.args[0].attr in wrapped
        and s.class_named(n.args[1]) is not None
    ):
        return n.args[0].attr, f"isinstance {ast.unparse(n.args[1])}"
    return None


def wrapper_attr_inherited_run(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.ddp_calls:
        return
    for sub in dict.fromkeys(n for n in s.nodes if isinstance(n, ast.ClassDef)):
        wrapped = _wrapped_attrs(s, f, sub)
        bases = _project_bases(s, sub) if wrapped else []
        said: set[ast.AST] = set()
        for base, fn in _running(s, sub, bases):
            for n in sorted(
                own_nodes(fn), key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0))
            ):
                got = _read(s, n, wrapped)
                if got is None or _told(s, n):
                    continue
                held, what = got
                values = (
                    [v for v, _ in s.self_attr_values(n, held)]
                    if not what.startswith("isinstance")
                    else []
                )
                if values and _attr_elsewhere(s, f, values, what):
                    continue
                stmt = next((a for a in s.ancestors(n) if isinstance(a, ast.stmt)), n)
                if stmt in said:
                    continue
                said.add(stmt)
                yield _hit(n, base, fn, sub, held, what)


def _hit(
    n: ast.AST, base: ast.ClassDef, fn: ast.FunctionDef, sub: ast.ClassDef, held: str, what: str
) -> Hit:
    if what.startswith("isinstance"):
        said = (
            f"`{ast.unparse(n)}` in `{base.name}.{fn.name}` is never true under DDP: "
            f"`{sub.name}` sets `self.{held}` to the DDP wrapper, which is no "
            f"`{what.split()[1]}` (test `self.{held}.module`)"
        )
        attr = what.split()[1]
    else:
        said = (
            f"`{ast.unparse(n)}` in `{base.name}.{fn.name}` reads `{what}` from "
            f"`self.{held}`, which `{sub.name}` sets to the DDP wrapper before this runs on "
            f"its instance: the wrapper has none (the model is `self.{held}.module`)"
        )
        attr = what
    return Hit.at("DDP-WRAPPER-ATTR", n, said, model=f"self.{held}", attr=attr)


RULES: Final = (wrapper_attr_inherited_run,)
