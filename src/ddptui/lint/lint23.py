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
  a rank test) is the fix; a create without the check is left to the other rules.
- A script that trains with Hugging Face's `Trainer` (distributed-aware: under torchrun
  every process runs the script) and then writes `tokenizer.save_pretrained(dir)` /
  `model.save_pretrained(dir)` itself, outside `trainer.is_world_process_zero()`:
  every rank writes the same files (asmtransformers' pretrain.py, fixed in PR #61 by the
  rank test and `trainer.save_model()`)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.lint15 import none_guarded
from ddptui.lint.model import Hit
from ddptui.lint.rules_io import _torch
from ddptui.lint.rules_save_wrapper import _state_dict_receivers, _unwrapped
from ddptui.lint.script import Script
from ddptui.lint.syntax import const, kwarg, last

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


_HF_TRAINER: Final = re.compile(r"^(transformers|trl)\.(\w+\.)*\w*Trainer$")


def hf_trainer_saves(s: Script, f: Flow) -> Iterator[Hit]:
    """`trainer = transformers.Trainer(...)`, then `x.save_pretrained(dir)` on every rank
    in the same function."""
    if f.ddp_calls:
        return  # a DDP script: rules_io reads its writers
    trainers = [c for c in s.calls if _HF_TRAINER.match(s.call_name(c))]
    for tr in trainers:
        scope = s.scope_of(tr)
        for c in s.calls:
            if (
                s.scope_of(c) is not scope
                or c.lineno <= tr.lineno
                or not isinstance(c.func, ast.Attribute)
                or c.func.attr != "save_pretrained"
                or kwarg(c, "is_main_process") is not None
                or f.guarded(c)
                or none_guarded(s, f, c)
                or any(
                    isinstance(a, ast.If) and "should_save" in ast.unparse(a.test)
                    for a in s.ancestors(c)
                )
            ):
                continue
            path = kwarg(c, "save_directory", 0)
            yield Hit.at(
                "DDP-ALL-RANKS-IO",
                c,
                (
                    f"`{ast.unparse(c.func)}` runs in every process of a `Trainer` run "
                    f"launched with torchrun: each writes `{ast.unparse(path) if path else '?'}` "
                    "(`trainer.save_model()`, or `if trainer.is_world_process_zero():`)"
                ),
                what="save_pretrained",
            )


RULES = (save_wrapper_of_owner, mkdir_race, hf_trainer_saves)


def flag_off_seed(s: Script, c: ast.Call) -> bool:
    """A seed call that runs only under `if set_seed:` where `set_seed` is a parameter of
    its function defaulting to False/None and no reached call passes it (KERMT's
    `mol2graph(..., set_seed=False)`: `--seed` parsed, never used, blind P)."""
    fn = s.scope_of(c)
    if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    params = [*fn.args.posonlyargs, *fn.args.args]
    names = [a.arg for a in params][len(params) - len(fn.args.defaults) :]
    defaults = dict(zip(names, fn.args.defaults, strict=True))
    for kw, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True):
        if d is not None:
            defaults[kw.arg] = d
    for a in s.ancestors(c):
        if a is fn:
            return False
        if not isinstance(a, ast.If) or not isinstance(a.test, ast.Name):
            continue
        name = a.test.id
        if name not in defaults or const(defaults[name]) not in (False, None):
            continue
        if s.assigned(fn, name):
            continue
        index = next((i for i, p in enumerate(params) if p.arg == name), None)
        sites = s.call_sites(fn)
        if sites and not any(
            kwarg(site, name) is not None
            or (index is not None and len(site.args) > index - (1 if s.class_of(fn) else 0))
            or any(isinstance(x, ast.Starred) for x in site.args)
            or any(k.arg is None for k in site.keywords)
            for site in sites
        ):
            return True
    return False
