"""Round 23 (blind P): readings of shapes the rules missed on real projects.

- The DDP wrapper kept in an attribute of a project class (`self.game =
  DistributedDataParallel(self.game, ...)` in egg's `Trainer.__init__`) and saved by
  another object that holds that class's instance under the class's own name:
  `torch.save(Checkpoint(model_state_dict=self.trainer.game.state_dict()), path)` in
  egg's CheckpointSaver (fixed in 3443e09 "fix distributed model saving" by taking
  `game.module`). The attribute's owner is matched by name (`trainer` for `Trainer`,
  `self.trainer` set by the callback machinery), never by the attribute alone.
- A shared folder checked, then created, on every rank: `if not os.path.exists("logs"):
  os.mkdir("logs")` in graph-rcnn's main.py under torch.distributed.launch (fixed in PR
  #37 by `and get_rank() == 0`): between one rank's check and its mkdir another rank
  creates the folder, and the slower one dies with FileExistsError. `exist_ok=True` (or
  a rank test) is the fix; a create without the check is left to the other rules."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.lint15 import none_guarded
from ddptui.lint.model import Hit
from ddptui.lint.rules_io import _state_dict_receivers, _torch, _unwrapped
from ddptui.lint.script import Script, const, kwarg, last

_EXISTS: Final = frozenset({"exists", "isdir", "is_dir"})


def _wrapped_attrs(s: Script, f: Flow) -> dict[str, set[str]]:
    """Attribute name -> lower-case names of the project classes whose methods store a
    DDP wrapper in `self.<attribute>` (`self.game = DistributedDataParallel(...)`)."""
    out: dict[str, set[str]] = {}
    for call in f.ddp_calls:
        stmt = s.parents.get(call)
        if not isinstance(stmt, ast.Assign):
            continue
        cls = s.class_of(call)
        if cls is None:
            continue
        for t in stmt.targets:
            if (
                isinstance(t, ast.Attribute)
                and isinstance(t.value, ast.Name)
                and t.value.id == "self"
            ):
                out.setdefault(t.attr, set()).add(cls.name.lower())
    return out


def _owner_matches(owner: ast.expr, classes: set[str]) -> bool:
    """`self.trainer` / `trainer` names an instance of the class `Trainer` (or
    `GameTrainer`, whose name ends with it); `self` itself is the same-class case the
    other rules read."""
    name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
    name = name.lower().lstrip("_")
    return len(name) >= 4 and name != "self" and any(c.endswith(name) for c in classes)


def save_wrapper_of_owner(s: Script, f: Flow) -> Iterator[Hit]:
    """`torch.save(... self.trainer.game.state_dict() ...)` where `Trainer` wrapped
    `self.game` in DDP: the saved keys carry the `module.` prefix."""
    if not f.torch_ddp_calls:
        return
    wrapped = _wrapped_attrs(s, f)
    if not wrapped:
        return
    for c in s.calls:
        if not _torch(s, c, "save") or not c.args:
            continue
        for recv in _state_dict_receivers(s, c.args[0]):
            if (
                not isinstance(recv, ast.Attribute)
                or recv.attr not in wrapped
                or not _owner_matches(recv.value, wrapped[recv.attr])
                or f.is_ddp_value(recv)  # the rules_io reading says it
                or _unwrapped(s, recv)
            ):
                continue
            at = s.parents.get(recv, c)
            yield Hit.at(
                "DDP-SAVE-WRAPPER",
                at,
                (
                    f"`{ast.unparse(recv)}.state_dict()` is saved, and `{recv.attr}` holds "
                    "the DDP wrapper (set in the class's own method): every key starts "
                    "with `module.`"
                ),
                model=ast.unparse(recv),
            )


def _mkdir(s: Script, c: ast.Call) -> bool:
    """`os.mkdir(p)` / `os.makedirs(p)` / `Path(p).mkdir()` that fails when the folder is
    already there (no `exist_ok=True`)."""
    qn = s.call_name(c)
    name = last(qn)
    if name == "makedirs" or (name == "mkdir" and qn.startswith("os")):
        return const(kwarg(c, "exist_ok", 2)) is not True
    if name == "mkdir" and isinstance(c.func, ast.Attribute):
        return const(kwarg(c, "exist_ok", 1)) is not True and "os" not in qn.split(".")[:1]
    return False


def _not_exists_test(test: ast.expr) -> bool:
    """`not os.path.exists(p)`, `not os.path.isdir(p)`, `not p.exists()`."""
    return (
        isinstance(test, ast.UnaryOp)
        and isinstance(test.op, ast.Not)
        and isinstance(test.operand, ast.Call)
        and isinstance(test.operand.func, ast.Attribute | ast.Name)
        and (
            test.operand.func.attr
            if isinstance(test.operand.func, ast.Attribute)
            else test.operand.func.id
        )
        in _EXISTS
    )


def mkdir_race(s: Script, f: Flow) -> Iterator[Hit]:
    """`if not os.path.exists(d): os.mkdir(d)` on every rank of a distributed run."""
    if not f.distributed:
        return
    for c in s.calls:
        if not _mkdir(s, c):
            continue
        parent = s.parents.get(s.parents.get(c, c))
        if not (
            isinstance(parent, ast.If)
            and _not_exists_test(parent.test)
            and any(isinstance(st, ast.Expr) and st.value is c for st in parent.body)
        ):
            continue
        if f.guarded(c) or none_guarded(s, f, c) or f.is_rank_expr(c.args[0] if c.args else c):
            continue
        yield Hit.at(
            "DDP-ALL-RANKS-IO",
            parent,
            (
                f"every rank checks, then creates `{ast.unparse(c.args[0]) if c.args else '?'}`: "
                "a rank that checks before another's mkdir and creates after it dies with "
                "FileExistsError (`exist_ok=True`, or create on rank 0 before a barrier)"
            ),
            what=ast.unparse(c.func),
        )


RULES = (save_wrapper_of_owner, mkdir_race)
