"""A project class's family (its project bases and every subclass, transitively) and the
`self.X` attributes its methods store and read, computed once per script: two rules ask
them for each class they look at (rules_rank_attr, rules_unwrapped_train), and a project
whose base class has hundreds of subclasses (flairNLP/flair: a blind AK2 project took 70 s
where each rule walked each family again) must not pay for it per class."""

from __future__ import annotations

import ast
import weakref
from dataclasses import dataclass, field

from ddptui.lint.frameworks import ddp_kind
from ddptui.lint.script import Script

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass
class _Facts:
    children: dict[ast.ClassDef, list[ast.ClassDef]] = field(default_factory=dict)
    bases: dict[ast.ClassDef, list[ast.ClassDef]] = field(default_factory=dict)
    families: dict[ast.ClassDef, list[ast.ClassDef]] = field(default_factory=dict)
    attrs: dict[ast.ClassDef, tuple[list[ast.Attribute], list[ast.Attribute]]] = field(
        default_factory=dict
    )
    dynamic: dict[ast.ClassDef, bool] = field(default_factory=dict)


_memo: weakref.WeakKeyDictionary[Script, _Facts] = weakref.WeakKeyDictionary()


def _facts(s: Script) -> _Facts:
    found = _memo.get(s)
    if found is None:
        found = _memo[s] = _Facts()
        for c in dict.fromkeys(s.classes.values()):
            bases = [b for b in (s.class_named(x) for x in c.bases) if b is not None and b is not c]
            found.bases[c] = bases
            for b in bases:
                found.children.setdefault(b, []).append(c)
    return found


def family(s: Script, cls: ast.ClassDef) -> list[ast.ClassDef]:
    """`cls`, its project bases and its project subclasses, each once."""
    facts = _facts(s)
    known = facts.families.get(cls)
    if known is not None:
        return known
    out = [cls]
    for edges in (facts.bases, facts.children):
        todo = [cls]
        while todo:
            c = todo.pop()
            for nxt in edges.get(c, ()):
                if nxt not in out:
                    out.append(nxt)
                    todo.append(nxt)
    facts.families[cls] = out
    return out


def self_attrs(s: Script, cls: ast.ClassDef) -> tuple[list[ast.Attribute], list[ast.Attribute]]:
    """(stores, loads) of `self.X` in the class's own methods."""
    facts = _facts(s)
    known = facts.attrs.get(cls)
    if known is not None:
        return known
    stores: list[ast.Attribute] = []
    loads: list[ast.Attribute] = []
    for fn in cls.body:
        if not isinstance(fn, _FUNCS) or not fn.args.args:
            continue
        me = fn.args.args[0].arg
        for n in ast.walk(fn):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == me:
                (stores if isinstance(n.ctx, ast.Store) else loads).append(n)
    facts.attrs[cls] = (stores, loads)
    return stores, loads


def dynamic(s: Script, cls: ast.ClassDef) -> bool:
    """The class sets or answers attributes by name (`__getattr__`, `setattr`,
    `__dict__`): what its instances hold is not visible."""
    facts = _facts(s)
    known = facts.dynamic.get(cls)
    if known is None:
        known = facts.dynamic[cls] = any(
            (isinstance(n, _FUNCS) and n.name in ("__getattr__", "__setattr__"))
            or (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "setattr")
            or (isinstance(n, ast.Attribute) and n.attr == "__dict__")
            for n in ast.walk(cls)
        )
    return known


_forwarding: weakref.WeakKeyDictionary[Script, bool] = weakref.WeakKeyDictionary()


def forwarding_wrappers_only(s: Script) -> bool:
    """Every DDP the project builds is a project subclass that answers attributes of the
    model itself (`def __getattr__(self, name): ... getattr(self.module, name)`:
    yzhangcs/parser's `supar.utils.parallel.DistributedDataParallel`, ShiqiYu/OpenGait's
    `DDPPassthrough`): `wrapper.loss(...)` then reaches the model, no AttributeError."""
    known = _forwarding.get(s)
    if known is not None:
        return known
    built = [c for c in s.calls if ddp_kind(s, c)]
    classes = [s.class_named(c.func) for c in built]
    answer = bool(built) and all(
        cls is not None
        and any(isinstance(m, _FUNCS) and m.name == "__getattr__" for m in cls.body)
        for cls in classes
    )
    _forwarding[s] = answer
    return answer
