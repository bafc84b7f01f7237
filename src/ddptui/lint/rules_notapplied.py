"""DDP-NOT-APPLIED: a DistributedDataParallel wrap whose result nothing uses (stored
under a name no code reads: PICK-pytorch 5799a11 `self.mode = DDP(self.model)`), or
that sits under a test that is never true (SparK 85d96dd `if dist.initialized() > 1:`:
a bool compared with 1)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.rules_sync import _loop_of
from ddptui.lint.script import Script
from ddptui.lint.syntax import last, target_names

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_BOOL_CALLS = frozenset(
    {"is_initialized", "is_available", "isinstance", "hasattr", "callable", "exists", "is_file",
     "is_dir", "is_nccl_available", "is_torchelastic_launched", "startswith", "endswith"}
)  # fmt: skip


def stmt_of(s: Script, node: ast.AST) -> ast.stmt | None:
    """The statement that holds `node`."""
    for a in s.ancestors(node):
        if isinstance(a, ast.stmt):
            return a
    return None


_CONFIG_NAMES = frozenset({"args", "opt", "opts", "cfg", "config", "hparams", "hp", "params"})


def _family(s: Script, cls: ast.ClassDef) -> set[str]:
    """Names of `cls`, its project base classes and the project classes derived from it."""
    names = {cls.name}
    todo = [cls]
    while todo:
        c = todo.pop()
        for b in c.bases:
            base = s.class_named(b)
            if base is not None and base.name not in names:
                names.add(base.name)
                todo.append(base)
    classes = [n for m in s.modules for n in ast.walk(m.tree) if isinstance(n, ast.ClassDef)]
    for _ in range(3):
        for c in classes:
            if c.name not in names and any(last(ast.unparse(b)) in names for b in c.bases):
                names.add(c.name)
    return names


def _attr_read(s: Script, name: str, family: set[str]) -> bool:
    """`self.name` read in a class of `family`, `obj.name` read on anything but `self`
    or a config object, or `getattr(x, "name")`, anywhere in the modules the entry
    reaches (whole files)."""
    for m in s.modules:
        for n in ast.walk(m.tree):
            if (
                isinstance(n, ast.Call)
                and last(ast.unparse(n.func)) in {"getattr", "hasattr"}
                and any(isinstance(a, ast.Constant) and a.value == name for a in n.args)
            ):
                return True
            if not (isinstance(n, ast.Attribute) and n.attr == name):
                continue
            if isinstance(n.ctx, ast.Store | ast.Del):
                continue
            owner = n.value.id if isinstance(n.value, ast.Name) else None
            if owner == "self":
                cls = s.class_of(n)
                if cls is None or cls.name in family:
                    return True
            elif owner not in _CONFIG_NAMES:
                return True
    return False


def _unused_wrap(s: Script, f: Flow) -> Iterator[Hit]:
    for c in f.torch_ddp_calls:
        st = stmt_of(s, c)
        if not isinstance(st, ast.Assign) or st.value is not c or len(st.targets) != 1:
            continue
        tgt = st.targets[0]
        if isinstance(tgt, ast.Name):
            yield from _unused_local(s, st, tgt, c)
            continue
        if not (isinstance(tgt, ast.Attribute) and isinstance(tgt.value, ast.Name)):
            continue
        inner = c.args[0] if c.args else None
        if not (isinstance(inner, ast.Attribute) and inner.attr != tgt.attr):
            continue
        cls = s.class_of(st)
        if tgt.value.id != "self" or cls is None or _attr_read(s, tgt.attr, _family(s, cls)):
            continue
        yield Hit.at(
            "DDP-NOT-APPLIED",
            st,
            (
                f"`{ast.unparse(tgt)}` receives the DDP wrapper of `{ast.unparse(inner)}` but "
                f"no code reads `.{tgt.attr}`: training uses the unwrapped "
                f"`{ast.unparse(inner)}`"
            ),
            why=(
                f"The wrapper is stored in `{ast.unparse(tgt)}`, which nothing reads, while "
                f"the code keeps using `{ast.unparse(inner)}` (the bare model)."
            ),
        )


def _rebinding_loop(s: Script, node: ast.AST, name: str) -> ast.For | ast.AsyncFor | None:
    """The innermost `for` around `node` (in its function) whose target binds `name`."""
    for a in s.ancestors(node):
        if isinstance(a, ast.For | ast.AsyncFor) and name in target_names(a.target):
            return a
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return None
    return None


def _loop_rebind(
    s: Script, st: ast.Assign, tgt: ast.Name, c: ast.Call, loop: ast.For | ast.AsyncFor
) -> Iterator[Hit]:
    """`for _, net in model.items(): net = DDP(net)` (open-mmlab/OpenUnReID's SPGAN and
    CycleGAN tools, fixed in 2a2ee9d): the loop variable takes the wrapper and the next
    iteration drops it; the dict keeps the bare networks.  Reads of the name later in the
    function that another loop binds anew are not reads of the wrapper."""
    fn = s.scope_of(st)
    for n in ast.walk(fn):
        if isinstance(n, ast.Global | ast.Nonlocal) and tgt.id in n.names:
            return
        if not (isinstance(n, ast.Name) and n.id == tgt.id and isinstance(n.ctx, ast.Load)):
            continue
        if n.lineno < st.lineno or any(n is x for x in ast.walk(c)):
            continue  # before the wrap, or the wrapped argument itself
        other = _rebinding_loop(s, n, tgt.id)
        if other is None or other is loop:
            return  # the wrapper is read: in this loop's body, or after the loop
    inner = ast.unparse(c.args[0]) if c.args else tgt.id
    target = loop.target
    bound = (
        ", ".join(ast.unparse(e) for e in target.elts)
        if isinstance(target, ast.Tuple)
        else ast.unparse(target)
    )
    yield Hit.at(
        "DDP-NOT-APPLIED",
        st,
        f"`{tgt.id}` is the loop variable of `for {bound} in "
        f"{ast.unparse(loop.iter)}` (line {loop.lineno}): it takes the DDP wrapper of "
        f"`{inner}` and the next iteration drops it, so `{ast.unparse(loop.iter)}` keeps the "
        "unwrapped models",
        why=(
            f"The wrapper is assigned to the loop variable `{tgt.id}`, which the next "
            f"iteration rebinds; the container the loop reads (`{ast.unparse(loop.iter)}`) "
            "still holds the bare models the training code uses."
        ),
    )


def _unused_local(s: Script, st: ast.Assign, tgt: ast.Name, c: ast.Call) -> Iterator[Hit]:
    """`ddp_model = DDP(model)` in a function that never reads `ddp_model` again."""
    fn = s.scope_of(st)
    if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) or not c.args:
        return
    loop = _rebinding_loop(s, st, tgt.id)
    if loop is not None:
        yield from _loop_rebind(s, st, tgt, c, loop)
        return
    if tgt.id.startswith("_"):
        return  # `_ = DDP(model)`: kept for the broadcast of rank 0's weights, on purpose
    for n in ast.walk(fn):
        if isinstance(n, ast.Global | ast.Nonlocal) and tgt.id in n.names:
            return
        if isinstance(n, ast.Name) and n.id == tgt.id and not isinstance(n.ctx, ast.Store):
            return
        if isinstance(n, ast.Call) and ast.unparse(n.func) in {"locals", "vars"}:
            return
    inner = ast.unparse(c.args[0])
    yield Hit.at(
        "DDP-NOT-APPLIED",
        st,
        f"`{tgt.id}` receives the DDP wrapper of `{inner}` and is never read again: "
        f"training uses the unwrapped `{inner}`",
        why=f"The wrapper is stored in `{tgt.id}`, which nothing reads, while the code keeps "
        f"using `{inner}` (the bare model).",
    )


def _bool_valued(s: Script, expr: ast.expr, depth: int = 0) -> bool:  # noqa: PLR0911
    if depth > 2:
        return False
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, bool)
    if isinstance(expr, ast.Compare):
        return True
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        return True
    if isinstance(expr, ast.BoolOp):
        return all(_bool_valued(s, v, depth + 1) for v in expr.values)
    if isinstance(expr, ast.Name):
        mod = s.module_of(expr).tree
        values = [
            n.value
            for n in ast.walk(mod)
            if isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == expr.id for t in n.targets)
        ]
        return bool(values) and all(_bool_valued(s, v, depth + 1) for v in values)
    if isinstance(expr, ast.Call):
        if last(s.call_name(expr)) in _BOOL_CALLS:
            return True
        fns = s.callees(expr)
        rets = [
            r.value
            for fn in fns
            for r in ast.walk(fn)
            if isinstance(r, ast.Return) and r.value is not None
        ]
        return bool(fns) and bool(rets) and all(_bool_valued(s, v, depth + 1) for v in rets)
    return False


def _never_true(s: Script, test: ast.expr) -> bool:
    """`flag > 1`, `flag >= 2`, `flag == 2` where `flag` can only be a bool."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    right = test.comparators[0]
    if not (isinstance(right, ast.Constant) and type(right.value) is int):
        return False
    op, n = test.ops[0], right.value
    if not (
        (isinstance(op, ast.Gt) and n >= 1)
        or (isinstance(op, ast.GtE) and n >= 2)
        or (isinstance(op, ast.Eq) and n >= 2)
    ):
        return False
    return _bool_valued(s, test.left)


def _dead_branch(s: Script, f: Flow) -> Iterator[Hit]:
    seen: set[ast.If] = set()
    for c in f.wrapper_calls:
        for a in s.ancestors(c):
            if isinstance(a, ast.If) and a not in seen and _never_true(s, a.test):
                if not any(c is n for st in a.body for n in ast.walk(st)):
                    continue
                seen.add(a)
                yield Hit.at(
                    "DDP-NOT-APPLIED",
                    a,
                    (
                        f"`if {ast.unparse(a.test)}:` is never true (`{ast.unparse(a.test.left)}`"  # type: ignore[attr-defined]
                        f" is a bool), so `{ast.unparse(c.func)}` (line {c.lineno}) never runs"
                    ),
                    why=(
                        f"`{ast.unparse(a.test)}` compares a bool with a number it can never "
                        "exceed, so the branch that wraps the model never runs."
                    ),
                )
            if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef):
                break


def _other_arm(binding: ast.AST, call: ast.AST, s: Script) -> ast.stmt | None:
    """The statement of the `if`'s other arm that holds `call`, when `binding` sits in
    one arm of that `if` and `call` in the other (and no loop around the `if` could run
    both arms)."""
    bind_up = list(s.ancestors(binding))
    child: ast.AST = call
    for a in s.ancestors(call):
        if isinstance(a, ast.If) and a in bind_up:
            arm_call = "body" if child in a.body else "orelse"
            b_child = bind_up[bind_up.index(a) - 1] if bind_up.index(a) else binding
            arm_bind = "body" if b_child in a.body else "orelse"
            # a loop of the same function around the `if` could run both arms
            if arm_call == arm_bind or isinstance(_loop_of(s, a), _LOOPS):
                return None
            return child if isinstance(child, ast.stmt) else None
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return None
        child = a
    return None


def _alias_in_other_arm(s: Script, f: Flow) -> Iterator[Hit]:
    """`Parallel = DistributedDataParallel` in the `if distributed:` arm, and the only
    calls of `Parallel(...)` in the `else:` (DataParallel) arm (SeungjunNah/DeepDeblur-
    PyTorch's src/model/__init__.py at 3b50755, fixed in 26047f7: the wrapping loop
    indented one level too deep): under DDP the model is never wrapped."""
    for st in s.nodes:
        if not (
            isinstance(st, ast.Assign)
            and len(st.targets) == 1
            and isinstance(st.targets[0], ast.Name)
            and last(s.qualname(st.value) or "") == "DistributedDataParallel"
        ):
            continue
        name = st.targets[0].id
        scope = s.scope_of(st)
        calls = [
            c
            for c in s.calls
            if isinstance(c.func, ast.Name) and c.func.id == name and s.scope_of(c) is scope
        ]
        others = [
            c
            for c in s.calls
            if last(s.call_name(c)) == "DistributedDataParallel" and c not in calls
        ]
        if not calls or others:
            continue
        arms = [_other_arm(st, c, s) for c in calls]
        if any(a is None for a in arms):
            continue
        where = arms[0]
        assert where is not None  # narrowed above
        yield Hit.at(
            "DDP-NOT-APPLIED",
            where,
            (
                f"`{name}` is DistributedDataParallel only in the arm of line {st.lineno}, "
                f"but `{ast.unparse(calls[0])[:40]}` runs only in the other arm (line "
                f"{calls[0].lineno}): under DDP the model is never wrapped"
            ),
            also=((st, "bound to DistributedDataParallel at"),),
            why=(
                f"`{name}` is bound to DistributedDataParallel in one arm of an `if` and "
                "called only in the other (the wrapping code indented into the wrong arm)."
            ),
        )


def ddp_not_applied(s: Script, f: Flow) -> Iterator[Hit]:
    yield from _unused_wrap(s, f)
    yield from _dead_branch(s, f)
    yield from _alias_in_other_arm(s, f)


RULES = (ddp_not_applied,)
