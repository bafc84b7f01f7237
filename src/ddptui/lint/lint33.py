"""Round 33 (blind batch Z): files written from a LightningModule's hooks on every rank.

Lightning runs a module's hooks (`on_train_end`, `on_validation_end`, `training_step`...)
on every process of a DDP run; nothing in the loop is rank-gated for the user. A hook
that saves checkpoints itself (`torch.save`, `open(path, "wb")`, directly or through the
project's helpers) without `if self.global_rank == 0` / `trainer.is_global_zero` /
`@rank_zero_only` has every rank write (and delete) the same files
(voicepaw/so-vits-svc-fork 30a08d5, fixed in PR #451 "only save checkpoints on main
device"). The audit of `all_ranks_io` never sees this: a Lightning project has no
`init_process_group` or DDP call of its own, so it asks for a DDP strategy instead."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.rules_io import file_writer
from ddptui.lint.script import Script
from ddptui.lint.syntax import kwarg, last

# Lightning's hooks of a LightningModule that run on every rank and write nothing of
# their own (on_save_checkpoint only fills the checkpoint dict: not listed)
_HOOKS: Final = frozenset(
    {"on_train_end", "on_fit_end", "on_validation_end", "on_train_epoch_end",
     "on_validation_epoch_end", "on_test_end", "on_test_epoch_end", "training_step",
     "validation_step", "test_step", "on_train_batch_end", "on_validation_batch_end",
     "training_epoch_end", "validation_epoch_end"}
)  # fmt: skip
_RANK_ZERO: Final = frozenset({"rank_zero_only", "rank_zero_experiment"})
_DEPTH: Final = 4


def _lightning_module(cls: ast.ClassDef) -> bool:
    return any(ast.unparse(b).endswith("LightningModule") for b in cls.bases)


def _ddp_strategy(s: Script) -> bool:
    """A `Trainer(strategy=...)` whose value is a DDP strategy: `"ddp"`,
    `"ddp_find_unused_parameters_true"`, `DDPStrategy(...)` (directly or through a name):
    without one the run is a single process and every rank is the only one."""
    for c in s.calls:
        value = kwarg(c, "strategy")
        if value is None or last(s.call_name(c)) != "Trainer":
            continue
        for o in [value, *s.origins(value)]:
            for n in ast.walk(o):
                if isinstance(n, ast.Constant) and isinstance(n.value, str):
                    if n.value.lower().startswith("ddp"):
                        return True
                elif isinstance(n, ast.Call) and last(s.call_name(n)) == "DDPStrategy":
                    return True
    return False


def _rank_zero_only(func: ast.AST) -> bool:
    return any(
        last(ast.unparse(d.func if isinstance(d, ast.Call) else d)) in _RANK_ZERO
        for d in getattr(func, "decorator_list", [])
    )


def _writes(
    s: Script, f: Flow, func: ast.AST, chain: tuple[ast.AST, ...], seen: set[ast.AST]
) -> Iterator[tuple[tuple[ast.AST, ...], ast.Call, str]]:
    """(the functions from the hook down, the writing call, what it is) for each write
    the hook reaches with no rank test on the way."""
    if func in seen or len(chain) > _DEPTH or _rank_zero_only(func):
        return
    seen.add(func)
    for c in s.function_calls(func):
        if f.local_guard(c) is not None:
            continue
        found = file_writer(s, f, c)
        if found is not None:
            yield (*chain, func), c, found[0]
            continue
        for callee in s.callees(c):
            yield from _writes(s, f, callee, (*chain, func), seen)


def lightning_hook_io(s: Script, f: Flow) -> Iterator[Hit]:
    if not _ddp_strategy(s):
        return
    for cls in (n for n in s.nodes if isinstance(n, ast.ClassDef)):
        if not _lightning_module(cls):
            continue
        for hook in cls.body:
            if not isinstance(hook, ast.FunctionDef) or hook.name not in _HOOKS:
                continue
            for chain, call, what in _writes(s, f, hook, (), set()):
                # said at the module's own method nearest the write: its fix goes there
                at = [fn for fn in chain if fn in cls.body][-1]
                yield Hit.at(
                    "DDP-ALL-RANKS-IO",
                    at,
                    (
                        f"`{what}` runs on every rank: Lightning calls `{hook.name}()` on "
                        f"each process and nothing on the way to {s.path_of(call)}:"
                        f"{call.lineno} checks `self.global_rank == 0` / "
                        "`trainer.is_global_zero`"
                    ),
                    what=what,
                )
                return


# a step hook Lightning runs on every rank in lockstep (the DDP wrapper's forward and
# backward, `self.log(..., sync_dist=True)`)
_STEPS: Final = frozenset({"training_step", "validation_step", "test_step"})
# what a LightningModule reads or uses only when it runs on several processes
_RANK_AWARE: Final = frozenset(
    {"global_rank", "local_rank", "is_global_zero", "rank_zero_only", "world_size"}
)


def _multi_process(s: Script, cls: ast.ClassDef) -> bool:
    """The module is meant for several processes: a DDP strategy, or the module tests
    its rank itself (`self.global_rank == 0`, `@rank_zero_only`)."""
    return _ddp_strategy(s) or any(
        (isinstance(n, ast.Attribute) and n.attr in _RANK_AWARE)
        or (isinstance(n, ast.Name) and n.id in _RANK_AWARE)
        for n in ast.walk(cls)
    )


def _manual(cls: ast.ClassDef) -> bool:
    """`self.automatic_optimization = False`: the module steps itself, and skipping a
    step by returning None is its own business."""
    return any(
        isinstance(n, ast.Assign)
        and any(ast.unparse(t) == "self.automatic_optimization" for t in n.targets)
        for n in ast.walk(cls)
    )


def _skips(hook: ast.FunctionDef) -> list[tuple[ast.If, ast.Return]]:
    """`if <a value the step computed>: return None` in the hook's own body."""
    local = {
        t.id
        for n in ast.walk(hook)
        if isinstance(n, ast.Assign | ast.AugAssign | ast.AnnAssign)
        for t in ast.walk(n.targets[0] if isinstance(n, ast.Assign) else n.target)
        if isinstance(t, ast.Name)
    }
    out: list[tuple[ast.If, ast.Return]] = []
    for n in ast.walk(hook):
        if not isinstance(n, ast.If) or not n.body:
            continue
        ret = n.body[-1]
        if not isinstance(ret, ast.Return) or (
            ret.value is not None
            and not (isinstance(ret.value, ast.Constant) and ret.value.value is None)
        ):
            continue
        if any(isinstance(m, ast.Name) and m.id in local for m in ast.walk(n.test)):
            out.append((n, ret))
    return out


def lightning_step_divergence(s: Script, f: Flow) -> Iterator[Hit]:
    """A LightningModule's step that some ranks skip. Lightning runs `training_step`
    and `validation_step` on every rank in lockstep:

    - `@rank_zero_only` on a step hook: only rank 0 runs the forward and the logging
      (GaTech-RL2/EgoVerse d12af61 pl_model.py, fixed in f9ff33f "removed rank
      conditions");
    - `training_step` returning None on a value this rank computed (a non-finite loss,
      a loss spike over its own running mean): this rank skips backward while the others
      wait in the gradient all-reduce; Lightning documents returning None as unsupported
      under multi-GPU (EgoVerse 3f60440, fixed in 00889b7 by all-reducing the skip flag).
    """
    for cls in (n for n in s.nodes if isinstance(n, ast.ClassDef)):
        if not _lightning_module(cls) or not _multi_process(s, cls):
            continue
        for hook in cls.body:
            if not isinstance(hook, ast.FunctionDef) or hook.name not in _STEPS:
                continue
            if _rank_zero_only(hook):
                yield Hit.at(
                    "DDP-RANK-DIVERGENCE",
                    hook,
                    (
                        f"`{hook.name}()` is `@rank_zero_only`: Lightning calls it on every "
                        "rank in step, but only rank 0 runs its forward and logging"
                    ),
                    severity="warning",
                    condition="rank == 0",
                    collective=f"the DDP forward and logging of `{hook.name}()`",
                )
                continue
            if hook.name != "training_step" or _manual(cls):
                continue
            for test, _ in _skips(hook):
                yield Hit.at(
                    "DDP-RANK-DIVERGENCE",
                    test,
                    (
                        f"`training_step()` returns None when `{ast.unparse(test.test)}`, "
                        "a value of this rank's batch: this rank skips backward while the "
                        "others wait in the gradient all-reduce (decide together: "
                        "all-reduce the flag, or return `loss * 0`)"
                    ),
                    severity="warning",
                    condition=f"not ({ast.unparse(test.test)})",
                    collective="the gradient all-reduce of backward",
                )


RULES = (lightning_hook_io, lightning_step_divergence)
