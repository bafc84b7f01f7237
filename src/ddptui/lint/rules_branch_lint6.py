"""Parameters a model's forward skips depending on its configuration: a branch on a
setting of the model (`if self.num_layers == 3: ... elif self.num_layers == 2: ...`)
that leaves out a layer `__init__` always builds, under DDP without
find_unused_parameters (PatrickHua/SimSiam: `projector.layer2` skipped with
`--proj_layers 2`)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.reach import self_attr
from ddptui.lint.rules_lint6 import _flag_given
from ddptui.lint.rules_project import _layer
from ddptui.lint.script import Script

_MAX_DEPTH = 2


def _layers(s: Script, cls: ast.ClassDef) -> dict[str, ast.Assign]:
    """Layers `__init__` builds on every path (not under an `if`)."""
    out: dict[str, ast.Assign] = {}
    for init in s._methods(cls, "__init__"):
        for st in init.body:
            if (
                isinstance(st, ast.Assign)
                and len(st.targets) == 1
                and (name := self_attr(st.targets[0]))
                and _layer(s, st.value)
            ):
                out[name] = st
    return out


def _uses(stmts: list[ast.stmt]) -> set[str]:
    return {
        a
        for st in stmts
        for n in ast.walk(st)
        if isinstance(n, ast.Attribute)
        and isinstance(n.ctx, ast.Load)
        and (a := self_attr(n)) is not None
    }


def _branches(node: ast.If) -> list[list[ast.stmt]]:
    """The branches of an if/elif/else chain; an absent `else` is an empty branch."""
    out = [node.body]
    rest = node.orelse
    while len(rest) == 1 and isinstance(rest[0], ast.If):
        out.append(rest[0].body)
        rest = rest[0].orelse
    out.append(rest)
    return out


def _settable(s: Script, cls: ast.ClassDef, attr: str) -> bool:
    """The setting takes a value from outside: a parameter, an argument, a config, or
    more than one literal."""
    values = [v for v, _ in s.self_attr_values(cls.body[0], attr)] if cls.body else []
    literals = {ast.unparse(v) for v in values if isinstance(v, ast.Constant)}
    return len(literals) > 1 or any(not isinstance(v, ast.Constant) for v in values)


def _reached_elsewhere(s: Script, cls: ast.ClassDef, layer: str) -> bool:
    """The layer is used from outside its class (`self.decoder.token_embedding(ids)` in
    the owner) or its parameters are shared (`self.head.weight =
    self.token_embedding.weight`): no verdict."""
    own = set(ast.walk(cls))
    for m in s.modules:
        for n in m.nodes:
            if not isinstance(n, ast.Attribute):
                continue
            if n.attr == layer and n not in own and self_attr(n) is None:
                return True
            if n in own and self_attr(n.value) == layer:
                return True
    return False


def _skipped(s: Script, cls: ast.ClassDef) -> tuple[str, ast.If] | None:
    layers = _layers(s, cls)
    if not layers:
        return None
    for fwd in s._methods(cls, "forward"):
        params = {a.arg for a in fwd.args.args + fwd.args.kwonlyargs}
        chains = [n for n in ast.walk(fwd) if isinstance(n, ast.If)]
        inner = {id(b[0]) for n in chains for b in [n.orelse] if len(b) == 1}
        for node in chains:
            if id(node) in inner:
                continue  # an `elif`: judged with its chain
            names = [n for n in ast.walk(node.test) if isinstance(n, ast.Name)]
            settings = {a for n in ast.walk(node.test) if (a := self_attr(n)) is not None}
            if (
                not settings
                or "training" in settings
                or any(n.id in params - {"self"} for n in names)
                or not all(_settable(s, cls, a) for a in settings)
            ):
                continue
            branches = [b for b in _branches(node) if not (b and isinstance(b[-1], ast.Raise))]
            outside = _uses([st for st in fwd.body if st is not node]) - _uses([node])
            uses = [_uses(b) for b in branches]
            for layer in layers:
                if layer in outside or _reached_elsewhere(s, cls, layer):
                    continue
                if any(layer in u for u in uses) and not all(layer in u for u in uses):
                    return layer, node
    return None


def _owned(s: Script, cls: ast.ClassDef, depth: int = 0) -> Iterator[tuple[ast.ClassDef, str]]:
    """The class and the project classes its `__init__` builds into attributes."""
    yield cls, ""
    if depth >= _MAX_DEPTH:
        return
    for init in s._methods(cls, "__init__"):
        for st in ast.walk(init):
            if (
                isinstance(st, ast.Assign)
                and len(st.targets) == 1
                and (name := self_attr(st.targets[0]))
                and isinstance(st.value, ast.Call)
                and (sub := s.class_named(st.value.func)) is not None
                and sub is not cls
            ):
                for inner, path in _owned(s, sub, depth + 1):
                    yield inner, f"{name}.{path}" if path else name


def config_branch_unused(s: Script, f: Flow) -> Iterator[Hit]:
    for call in f.ddp_calls:
        if not call.args or _flag_given(call):
            continue
        for o in s.origins(call.args[0]):
            cls = s.class_named(o.func) if isinstance(o, ast.Call) else None
            if cls is None:
                continue
            for owner, path in _owned(s, cls):
                found = _skipped(s, owner)
                if found is None:
                    continue
                layer, branch = found
                where = f"{path}.{layer}" if path else layer
                yield Hit.at(
                    "DDP-FIND-UNUSED",
                    s.entry_anchor(call),
                    (
                        f"DDP wraps `{cls.name}` without find_unused_parameters, but "
                        f"`{owner.name}.forward` skips `self.{layer}` (`{where}`) when "
                        f"`{ast.unparse(branch.test)}` goes the other way "
                        f"({s.path_of(branch)}:{branch.lineno}), a setting of the model: "
                        "with that setting DDP waits for gradients that never come"
                    ),
                )
                return


RULES = (config_branch_unused,)
