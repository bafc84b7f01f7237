"""Round 23 (blind P): readings of shapes the rules missed on real projects.

- The DDP wrapper kept in an attribute of a project class (`self.game =
  DistributedDataParallel(self.game, ...)` in egg's `Trainer.__init__`) and saved by
  another object that holds that class's instance under the class's own name:
  `torch.save(Checkpoint(model_state_dict=self.trainer.game.state_dict()), path)` in
  egg's CheckpointSaver (fixed in 3443e09 "fix distributed model saving" by taking
  `game.module`). The attribute's owner is matched by name (`trainer` for `Trainer`,
  `self.trainer` set by the callback machinery), never by the attribute alone."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.rules_io import _state_dict_receivers, _torch, _unwrapped
from ddptui.lint.script import Script


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


RULES = (save_wrapper_of_owner,)
