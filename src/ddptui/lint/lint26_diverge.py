"""DDP-RANK-DIVERGENCE on a rank-local buffer count (blind batch S, lint26).

Two LightZero fixes (opendilab/LightZero) show the shape: each rank fills its own replay
buffer (or reward-model data) and tests its size before a block that waits for the other
ranks.

- @ b0a69b6a, lzero/entry/train_unizero_multitask_segment_ddp.py:397: `not_enough_data =
  any(replay_buffer.get_num_of_transitions() < total_batch_size / world_size ...)`, then
  `if not not_enough_data:` (:456) around `learner.train`, `dist.barrier()` and
  `dist.all_gather_object`: a rank whose buffer is short skips them while the others wait
  (fixed in 7841fdf by an all_reduce(MAX) of the flag).
- @ b229a7f8, lzero/entry/train_unizero_with_reward_model.py:209: `if
  len(reward_model.train_latent_state) > reward_model.cfg.batch_size:
  reward_model.train_with_data()`, whose `sync_gradients` all-reduces the gradients
  (fixed in 276c193 by an all_reduce(MIN) of the count).

Said at the line that reads the count (the assignment the test names, else the test),
where the agreement across ranks goes. A warning: whether the counts can differ between
ranks is not visible in the code (they do when collection is per rank). Not said where
the count itself went through a collective first."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.script import Script
from ddptui.lint.syntax import last

_COUNT: Final = re.compile(r"^(get_)?num(ber)?_of_\w+$|^num_\w+$|^__len__$")
_HELD: Final = re.compile(r"buffer|transition|obs|latent|memory|queue|pool|replay|rollout", re.I)


def _counts(s: Script, expr: ast.AST) -> ast.Call | None:
    """A count of a run-time buffer in `expr`: `len(self.buffer)`,
    `replay_buffer.get_num_of_transitions()`."""
    for n in ast.walk(expr):
        if not isinstance(n, ast.Call):
            continue
        name = last(s.call_name(n))
        if (  # an object's store (`reward_model.train_obs`), not a list the function builds
            name == "len"
            and n.args
            and isinstance(n.args[0], ast.Attribute)
            and _HELD.search(ast.unparse(n.args[0]))
        ):
            return n
        if (
            _COUNT.match(name)
            and isinstance(n.func, ast.Attribute)
            and _HELD.search(ast.unparse(n.func.value) + name)
        ):
            return n
    return None


_SYNC_NAMES: Final = frozenset({"allreduce", "all_reduce", "barrier", "all_gather", "broadcast"})


def _sync(s: Script, f: Flow, call: ast.Call, depth: int = 0) -> str | None:
    """A sync point the call runs: flow's reading, a collective of a library imported by
    name (`from ding.utils import allreduce`), or either inside project functions it calls
    (three calls deep: `train_with_data` -> `_train_with_data_one_step` ->
    `sync_gradients` -> `allreduce`)."""
    found = f.call_sync(call)
    if found:
        return found
    if isinstance(call.func, ast.Name) and call.func.id in _SYNC_NAMES and not s.callees(call):
        return f"`{call.func.id}`"
    if depth >= 3:
        return None
    for fn in s.callees(call):
        for c in (n for n in own_nodes(fn) if isinstance(n, ast.Call)):
            inner = _sync(s, f, c, depth + 1)
            if inner:
                return f"{inner} in `{fn.name}()`" if depth == 0 else inner
    return None


def _source(s: Script, test: ast.expr, fn: ast.AST) -> tuple[ast.AST, ast.Call] | None:
    """(the line to name, the count) for the test itself or a name it reads that the same
    function assigns from a count."""
    if not isinstance(test, ast.Compare | ast.UnaryOp | ast.Name | ast.BoolOp):
        return None
    if isinstance(test, ast.Compare) and (c := _counts(s, test)) is not None:
        return test, c
    for name in (n for n in ast.walk(test) if isinstance(n, ast.Name)):
        for st in own_nodes(fn):
            if (
                isinstance(st, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == name.id for t in st.targets)
                and st.lineno < test.lineno
                and any(isinstance(x, ast.Compare) for x in ast.walk(st.value))
                and (c := _counts(s, st.value)) is not None
            ):
                return st, c
    return None


def _agreed(s: Script, f: Flow, fn: ast.AST, at: ast.AST, test: ast.expr) -> bool:
    """A collective between the count and the test on the tested value or on a tensor
    made from it (`flag = torch.tensor([1 if not_enough_data else 0])`, then
    `dist.all_reduce(flag, op=MAX)`)."""
    names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
    if isinstance(at, ast.Assign):
        names |= {n.id for t in at.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    made = {
        t.id
        for st in own_nodes(fn)
        if isinstance(st, ast.Assign)
        and any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(st.value))
        for t in st.targets
        if isinstance(t, ast.Name)
    }
    return any(
        isinstance(c, ast.Call)
        and f.collective(c)
        and getattr(at, "lineno", 0) <= c.lineno <= test.lineno
        and any(
            isinstance(n, ast.Name) and n.id in names | made for a in c.args for n in ast.walk(a)
        )
        for c in own_nodes(fn)
    )


def buffer_count_divergence(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.distributed:
        return
    said: set[int] = set()
    for st in (n for n in s.nodes if isinstance(n, ast.If)):
        sync = next(
            (
                x
                for b in st.body
                for c in ast.walk(b)
                if isinstance(c, ast.Call) and (x := _sync(s, f, c))
            ),
            None,
        )
        if sync is None:
            continue
        fn = s.scope_of(st)
        found = _source(s, st.test, fn)
        if found is None or "rank" in ast.unparse(st.test) or _agreed(s, f, fn, found[0], st.test):
            continue
        at, count = found
        if id(at) in said:
            continue
        said.add(id(at))
        yield Hit.at(
            "DDP-RANK-DIVERGENCE",
            at,
            (
                f"`{ast.unparse(count)}` counts this rank's own buffer, and the test "
                f"`{ast.unparse(st.test)[:60]}` (line {st.lineno}) decides whether {sync} runs: "
                "a rank whose count falls short skips it while the others wait; agree on the "
                "count first (`dist.all_reduce(n, op=ReduceOp.MIN)`)"
            ),
            severity="warning",
        )


RULES: Final = (buffer_count_divergence,)
