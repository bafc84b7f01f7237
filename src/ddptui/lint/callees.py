"""Which project functions one call reaches (`Script.callees`, which memoises the
answer and guards cycles): kept out of script.py, which holds the per-name facts this
resolution is built on. Pure core: the `ast` module only."""

from __future__ import annotations

import ast

from ddptui.lint import reach as R
from ddptui.lint.project import FuncNode
from ddptui.lint.reach import Script, built_classes, partial_target


def resolve_callees(s: Script, call: ast.Call) -> tuple[FuncNode, ...]:  # noqa: PLR0911, PLR0912
    """The project functions a call reaches: `f()` (of this file or imported from a
    project module), `utils.f()`, `self.m()`, `obj.m()` where obj was built from a
    class of the project, and `Cls()` (its __init__)."""
    f = call.func
    if isinstance(f, ast.Call):  # `getattr(utils, "init_dist_%s" % launcher)(...)`
        picked = R.named_by_getattr(s, f)
        return tuple(
            m
            for t in picked
            for m in (s._methods(t, "__init__") if isinstance(t, ast.ClassDef) else [t])
        )
    cls = s.class_named(f)
    if cls is not None:
        return tuple(s._methods(cls, "__init__"))
    if isinstance(f, ast.Name):
        mod = s.module_of(call)
        found = s.resolve(mod, f.id)
        if isinstance(found, FuncNode):
            return (found,)
        if f.id in mod.aliases or f.id in mod.local:
            return ()
        bound = partial_target(s, call, f.id) or R.held_functions(s, call)
        if bound:
            return bound
        return tuple(
            fn
            for fn in mod.functions.get(f.id, ())
            if s.class_of(fn) is None or _nested_in(s, fn, call)
        )
    if isinstance(f, ast.Attribute):
        if isinstance(f.value, ast.Name) and f.value.id == "self":
            own = s.class_of(call)  # (or a subclass's override of it)
            return tuple(s._methods(own, f.attr)) + R.overrides(s, own, f.attr) if own else ()
        if (
            isinstance(f.value, ast.Call)
            and isinstance(f.value.func, ast.Name)
            and f.value.func.id == "super"
        ):  # `super().__init__(...)`: the base class's method
            own = s.class_of(call)
            bases = [s.class_named(b) for b in own.bases] if own else []
            return tuple(
                m
                for b in bases
                if b is not None and b is not own
                for m in s._methods(b, f.attr)
            )
        owner = s.class_named(f.value)
        if owner is not None:  # `DeepSpeech.serialize(model)`: a static or class method
            return tuple(m for m in s._methods(owner, f.attr) if R.static_or_class(m))
        module = s._module_value(f.value)
        if module is not None:
            target = s.resolve_in(module, f.attr)
            return (target,) if isinstance(target, FuncNode) else ()
        entries = R.registry_modules(s, f.value)  # `PARSERS[name].run(...)`
        if entries:
            handed = [s.resolve_in(m, f.attr) for m in entries]
            return tuple(dict.fromkeys(h for h in handed if isinstance(h, FuncNode)))
        methods: list[FuncNode] = []
        for origin in s.origins(f.value, 1, params=False):
            if isinstance(origin, ast.Call):
                for cls_node in built_classes(s, origin):
                    methods += s._methods(cls_node, f.attr)
        return tuple(dict.fromkeys(methods))
    return ()


def _nested_in(s: Script, fn: FuncNode, call: ast.Call) -> bool:
    scope = s.scope_of(fn)
    return not isinstance(scope, ast.Module) and scope is s.scope_of(call)
