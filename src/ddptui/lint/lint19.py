"""Round 19, from the false errors of blind batches N and O on correct projects (a
collective a helper keeps behind a flag the call turns off, allenai/OLMo: flagoff.py), a
`continue` inside a loop whose bound counts the completed steps (haofeixu/gmflow: every
rank still runs the same number of backward passes), an attribute the script sets on
the wrapper itself (`model.hyp = hyp` after the DDP wrap, WongKinYiu/yolov9), and a name
that may also hold a project object that has the attribute (`self.model_ema`, an `EMA`
with `update_parameters`, apple/ml-cvnets).
And from a miss of batch N: a loop bound that only rank 0 keeps up to date (pytext)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from ddptui.lint.model import Hit
from ddptui.lint.project import FuncNode
from ddptui.lint.script import Script

if TYPE_CHECKING:
    from ddptui.lint.flow import Flow
    from ddptui.lint.reach import Scope

def _counter(test: ast.expr) -> str | None:
    """`total_steps < args.num_steps` -> "total_steps"."""
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Lt | ast.LtE)
    ):
        return ast.unparse(test.left)
    return None


def counted_steps(s: Script, node: ast.AST, loop: ast.AST) -> bool:
    """`while total_steps < num_steps: for batch in loader: ... if isnan(loss): continue;
    loss.backward(); total_steps += 1`: the run ends after the same number of completed
    steps on every rank, so a rank that skips a batch takes its next one and the backward
    passes still pair up one for one (no rank waits for a step the others never run)."""
    if not isinstance(loop, ast.For | ast.AsyncFor | ast.While):
        return False
    bumps = [
        st.target
        for st in loop.body
        if isinstance(st, ast.AugAssign)
        and isinstance(st.op, ast.Add)
        and st.lineno > getattr(node, "lineno", 0)
    ]
    if not bumps:
        return False
    names = {ast.unparse(t) for t in bumps}
    for a in [loop, *s.ancestors(loop)]:
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.Module):
            return False
        if isinstance(a, ast.While) and _counter(a.test) in names:
            return True
    return False


def set_on_value(s: Script, f: Flow, values: Iterable[ast.expr], attr: str) -> bool:
    """The script stores the attribute on the very object it passes, while the name holds
    the wrapper (`model.hyp = hyp` after `model = smart_DDP(model)`, yolov9 train.py):
    reading it back from the wrapper finds it. A store on another object the name held
    then (`model = build_model(...); model.backbone = self.model`, netspresso) does not
    count."""
    for v in values:
        if not isinstance(v, ast.Name):
            continue
        scope = s.scope_of(v)
        for n in ast.walk(scope):
            if isinstance(n, ast.Assign | ast.AnnAssign):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                if any(
                    isinstance(t, ast.Attribute)
                    and t.attr == attr
                    and isinstance(t.value, ast.Name)
                    and t.value.id == v.id
                    for t in targets
                ) and holds_wrapper_at(s, f, scope, v.id, n.lineno):
                    return True
    return False


def holds_wrapper_at(s: Script, f: Flow, scope: Scope, name: str, line: int) -> bool:
    before = [a for a in s.assigned(scope, name) if a.lineno < line]
    if not before:
        return False
    latest = max(before, key=lambda a: (a.lineno, a.col_offset))
    return isinstance(latest, ast.Call) and (latest in f.ddp_calls or f.is_ddp_value(latest))


def other_owner(s: Script, values: Iterable[ast.expr], attr: str) -> bool:
    """One of the values the name may hold is an instance of a project class, not a
    torch module, that has the attribute (`model_ema = EMA(model=model, ...)`, whose
    class defines `update_parameters` and sets `self.ema_model`): the read is meant for
    that object (the model's own class does not count: the wrapper hides its methods)."""
    for v in values:
        if not isinstance(v, ast.Call):
            continue
        cls = s.class_named(v.func)
        if cls is None or _is_module(s, cls):
            continue  # the model's own class: the DDP wrapper around it lacks the attribute
        for _ in range(3):
            if cls is None:
                break
            if _has_attr(cls, attr):
                return True
            bases = [b for b in map(s.class_named, cls.bases) if b is not None]
            cls = bases[0] if bases and bases[0] is not cls else None
    return False


def _is_module(s: Script, cls: ast.ClassDef) -> bool:
    """An nn.Module subclass (its bases, followed through the project's classes)."""
    for _ in range(4):
        if any(ast.unparse(b).split(".")[-1].endswith("Module") for b in cls.bases):
            return True
        bases = [b for b in map(s.class_named, cls.bases) if b is not None]
        if not bases or bases[0] is cls:
            return False
        cls = bases[0]
    return False


def _has_attr(cls: ast.ClassDef, attr: str) -> bool:
    for n in ast.walk(cls):
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == attr:
            return True
        if (
            isinstance(n, ast.Attribute)
            and isinstance(n.ctx, ast.Store)
            and n.attr == attr
            and isinstance(n.value, ast.Name)
            and n.value.id == "self"
        ):
            return True
    return False


# --- a loop bound that only rank 0 keeps up to date (blind N) ----------------------------


def _bound_attrs(s: Script, test: ast.expr) -> dict[str, ast.Attribute]:
    """Attributes compared in a loop's test, or in the `if` tests and returns of the
    project function the test calls (`while self.continue_training(state):`, whose body
    returns False once `state.epochs_since_last_improvement >= ...`)."""
    tests: list[ast.AST] = [test]
    for call in [n for n in ast.walk(test) if isinstance(n, ast.Call)]:
        for func in s.callees(call):
            tests += [n.test for n in ast.walk(func) if isinstance(n, ast.If | ast.While)]
            tests += [n.value for n in ast.walk(func) if isinstance(n, ast.Return) and n.value]
    out: dict[str, ast.Attribute] = {}
    for t in tests:
        for cmp in [n for n in ast.walk(t) if isinstance(n, ast.Compare)]:
            for side in [cmp.left, *cmp.comparators]:
                if (
                    isinstance(side, ast.Attribute)
                    and isinstance(side.value, ast.Name)
                    and side.value.id not in ("self", "cls", "args", "config", "opt")
                ):
                    out.setdefault(side.attr, side)
    return out


def rank_only_bound(s: Script, f: Flow) -> Iterator[Hit]:
    """`while self.continue_training(state):` ends once `state.epochs_since_last_improvement`
    reaches a limit, and the method the loop calls to reset it returns early on every
    rank but 0 (`if state.rank != 0: return` above the update): the other ranks stop
    early while rank 0 trains on and waits in the next all-reduce (facebookresearch/pytext
    PR #585, trainer.py update_best_model)."""
    if not f.wrapper_calls:
        return
    for loop in [n for n in s.nodes if isinstance(n, ast.While)]:
        attrs = _bound_attrs(s, loop.test)
        if not attrs or not f.stmts_sync(loop.body):
            continue
        called = {
            fn
            for st in loop.body
            for c in ast.walk(st)
            if isinstance(c, ast.Call)
            for fn in s.callees(c)
        }
        for fn in called:
            hit = _guarded_store(s, f, fn, attrs, loop)
            if hit is not None:
                yield hit
                return


def _guarded_store(
    s: Script, f: Flow, fn: FuncNode, attrs: dict[str, ast.Attribute], loop: ast.While
) -> Hit | None:
    for n in ast.walk(fn):
        if not isinstance(n, ast.Assign | ast.AugAssign):
            continue
        targets = n.targets if isinstance(n, ast.Assign) else [n.target]
        for t in targets:
            if not (isinstance(t, ast.Attribute) and t.attr in attrs):
                continue
            guard = f.local_guard(n)
            if not isinstance(guard, ast.If) or guard in set(s.ancestors(n)):
                continue  # only the early-return shape: a branch may have its twin
            read = attrs[t.attr]
            return Hit.at(
                "DDP-RANK-DIVERGENCE",
                guard,
                (
                    f"`{ast.unparse(read)}` decides when the loop at line {loop.lineno} "
                    f"(`{ast.unparse(loop.test)}`) ends, but `{fn.name}()` updates it only "
                    f"on the ranks past `if {ast.unparse(guard.test)}:` (line {guard.lineno}, "
                    "which returns early): the ranks leave the loop at different epochs and "
                    "the ones still training wait forever in the next all-reduce"
                ),
                condition=ast.unparse(guard.test),
                collective="the next epoch's gradient all-reduce",
            )
    return None


RULES = (rank_only_bound,)
