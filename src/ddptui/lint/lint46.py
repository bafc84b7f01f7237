"""A map-style dataset class that deals its files to the ranks itself, built through a
decorator registry (lint46, DDP-UNEVEN-BATCH).

Open Catalyst (Open-Catalyst-Project/ocp@d23774524ed92283114d4d33347e89d002da2609,
ocpmodels/datasets/trajectory_lmdb.py): `@registry.register_dataset("trajectory_lmdb")
class TrajectoryLmdbDataset(Dataset)` takes `db_paths[rank:num_full_dbs:world_size]` in
its `__init__`, sums the lengths of its own files into `self.num_samples`, and `__len__`
returns it. The trainer builds it as `registry.get_dataset_class(
self.config["task"]["dataset"])(...)` under `if self.config["task"]["dataset"] ==
"trajectory_lmdb":` and loops a DataLoader over it with no sampler: files differ in size,
so ranks run different numbers of steps (fix e6fdfb0d pads every replica to one size).

Two readings: the class a registry lookup builds, when the key is a literal or is
compared to one in an enclosing `if` (no literal: no class, nothing guessed); and a class
whose own code slices a list by rank with a world-size stride and reports a length summed
from that share. Said at the length the class reports (where the fix evens it out)."""

from __future__ import annotations

import ast
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.script import Script
from ddptui.lint.syntax import const

# words of code that evens the ranks' shares out (torch's DistributedSampler pads to
# `total_size`; a cut to the shortest share takes a `min(`)
_EVEN: Final = ("pad", "total_size", "drop_last", "min(", "truncate", "all_reduce", "all_gather")


def dealing_class(s: Script, f: Flow, call: ast.Call) -> ast.AST | None:
    """A map-style dataset class the call builds (by name or through a decorator
    registry) that deals its files to the ranks itself: where it sets its length."""
    classes = registry_classes(s, call)
    if not classes and (cls := s.class_named(call.func)) is not None:
        classes = [cls]
    return next((at for c in classes if (at := dealt_length(f, c)) is not None), None)


def registry_classes(s: Script, call: ast.Call) -> list[ast.ClassDef]:
    """`registry.get_dataset_class(key)(config)`: the project classes a decorator
    registers under the literal `key` names (`@registry.register_dataset("lmdb")`)."""
    inner = call.func
    if not (
        isinstance(inner, ast.Call)
        and isinstance(inner.func, ast.Attribute)
        and inner.func.attr.startswith("get")
        and len(inner.args) == 1
    ):
        return []
    key = _key_literal(s, inner.args[0])
    if key is None:
        return []
    out: list[ast.ClassDef] = []
    for m in s.modules:
        for cls in m.classes.values():
            if any(_registers(d, key) for d in cls.decorator_list) and cls not in out:
                out.append(cls)
    return out


def _key_literal(s: Script, key: ast.expr) -> str | None:
    value = const(key)
    if isinstance(value, str):
        return value
    text = ast.unparse(key)
    for a in s.ancestors(key):
        if not isinstance(a, ast.If):
            continue
        t = a.test
        if (
            isinstance(t, ast.Compare)
            and len(t.ops) == 1
            and isinstance(t.ops[0], ast.Eq)
            and ast.unparse(t.left) == text
            and isinstance(lit := const(t.comparators[0]), str)
        ):
            return lit
    return None


def _registers(d: ast.expr, key: str) -> bool:
    return (
        isinstance(d, ast.Call)
        and "regist" in ast.unparse(d.func).lower()
        and any(const(a) == key for a in [*d.args, *(k.value for k in d.keywords)])
    )


def dealt_length(f: Flow, cls: ast.ClassDef) -> ast.AST | None:
    """Where a map-style dataset class sets the length it reports from this rank's share
    of a list it slices by rank with a world-size stride (`paths[rank::world]`), with
    nothing that evens the shares out; None otherwise."""
    if any("Iterable" in ast.unparse(b) for b in cls.bases):
        return None  # a stream: rules_data reads those
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    init, size = methods.get("__init__"), methods.get("__len__")
    if init is None or size is None:
        return None
    text = ast.unparse(cls)
    if any(w in text for w in _EVEN):
        return None
    dealt = next((n for n in ast.walk(init) if _strided_by_rank(f, n)), None)
    reported = _reported_attr(size)
    if dealt is None or reported is None:
        return None
    for n in ast.walk(init):
        if (
            isinstance(n, ast.Assign)
            and any(ast.unparse(t) == f"self.{reported}" for t in n.targets)
            and n.lineno > getattr(dealt, "lineno", 0)
        ):
            return n
    return None


def _strided_by_rank(f: Flow, n: ast.AST) -> bool:
    if not (isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Slice)):
        return False
    sl = n.slice
    return (
        sl.lower is not None
        and sl.step is not None
        and f.is_rank_expr(sl.lower)
        and any(w in ast.unparse(sl.step).lower() for w in ("world", "replicas", "num_ranks"))
    )


def _reported_attr(size: ast.FunctionDef) -> str | None:
    """`return self.num_samples` or `return len(self.samples)`: the attribute."""
    rets = [n for n in ast.walk(size) if isinstance(n, ast.Return) and n.value is not None]
    if len(rets) != 1:
        return None
    v = rets[0].value
    if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "len" and v.args:
        v = v.args[0]
    if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id == "self":
        return v.attr
    return None
