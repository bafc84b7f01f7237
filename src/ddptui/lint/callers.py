"""What the callers of a function tell about the code inside it: a branch no caller can
reach (`if loss_scaler is not None: ... else: <DeepSpeed engine path>` while every caller
passes a `NativeScaler()`), and a loss built inside a module that the project moves to
its GPU as a whole (`self.criterion = CrossEntropyLoss(weight=w)` in a class whose
instances are built with `.cuda(local_rank)`)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Final

from ddptui.lint.nodes import calls_in, own_nodes
from ddptui.lint.nonetest import none_test
from ddptui.lint.project import FuncNode
from ddptui.lint.reach import self_attr
from ddptui.lint.script import Script

_MAX_DEPTH: Final = 3


def _none_test(test: ast.expr) -> tuple[str, bool] | None:
    """(parameter, whether the test's TRUE branch means it is None) for `p is None`,
    `p is not None`, `p`, `not p`."""
    tested = none_test(test)
    if tested is None or not isinstance(tested[0], ast.Name):
        return None
    return tested[0].id, tested[1]


def _never_none(s: Script, expr: ast.expr, depth: int = 0) -> bool:
    """An object built by a class (`NativeScaler()`, a project class), directly or
    through names assigned only such objects."""
    if depth > _MAX_DEPTH:
        return False
    if isinstance(expr, ast.Call):
        func = expr.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return s.class_named(func) is not None or name[:1].isupper()
    if isinstance(expr, ast.Name):
        values = s.assigned(s.scope_of(expr), expr.id)
        return bool(values) and all(_never_none(s, v, depth + 1) for v in values)
    return False


def dead_for_callers(s: Script, fn: FuncNode, node: ast.AST) -> bool:
    """`node` sits in a branch of `fn` that needs a parameter to be None, and every
    caller passes that parameter an object: no call reaches it."""
    params = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
    child: ast.AST = node
    for a in s.ancestors(node):
        if a is fn:
            return False
        if isinstance(a, ast.If):
            tested = _none_test(a.test)
            if tested is not None and tested[0] in params:
                param, true_is_none = tested
                in_body = child in a.body
                if in_body == true_is_none and _all_pass_objects(s, fn, param):
                    return True
        child = a
    return False


def _all_pass_objects(s: Script, fn: FuncNode, param: str) -> bool:
    sites = s.call_sites(fn)
    args = s.param_args(fn, param)
    return bool(sites) and len(args) >= len(sites) and all(_never_none(s, v) for v in args)


def moved_with_owner(s: Script, c: ast.Call, moved: Callable[[ast.Call], bool]) -> bool:
    """`self.x = Loss(...)` in a class the project builds and moves as a whole (its
    submodules go with it), or in a class it never builds by name (a registry or a
    config builds it: nothing says it stays on the CPU). A loss held in a module
    container of the class counts too (`self.losses += [Loss()]`, `.append(Loss())` on
    an `nn.ModuleList`). `moved(call)` says whether one construction is moved."""
    if not _held_by_self(s, c):
        return False
    cls = s.class_of(c)
    if cls is None:
        return False
    built = [k for k in s.calls if s.class_named(k.func) is cls]
    return not built or any(moved(k) for k in built)


_CONTAINERS: Final = ("ModuleList", "ModuleDict", "Sequential")


def _held_by_self(s: Script, c: ast.Call) -> bool:
    """The value of `c` becomes a submodule of `self`: assigned to `self.x`, or put in a
    torch module container that `self.x` holds (denoiser's MultiResolutionSTFTLoss keeps
    its STFTLoss modules in `self.stft_losses = torch.nn.ModuleList()`)."""
    node: ast.AST = c
    boxed = False  # inside `nn.ModuleList(...)` and the like
    parent = s.parents.get(node)
    while isinstance(parent, ast.List | ast.Tuple | ast.ListComp | ast.GeneratorExp | ast.Call):
        if isinstance(parent, ast.Call):
            fn = parent.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            held = self_attr(fn.value) if isinstance(fn, ast.Attribute) else None
            if name in ("append", "extend", "insert", "add_module") and held is not None:
                return _holds_container(s, c, held)
            if name in ("add_module", "register_module") and isinstance(fn, ast.Attribute):
                return isinstance(fn.value, ast.Name) and fn.value.id == "self"
            if name not in _CONTAINERS:
                return False
            boxed = True
        node, parent = parent, s.parents.get(parent)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
        attr = self_attr(parent.targets[0])
        return attr is not None and (node is c or boxed)
    if isinstance(parent, ast.AugAssign) and node is not c:
        attr = self_attr(parent.target)
        return attr is not None and _holds_container(s, c, attr)
    return False


def _holds_container(s: Script, c: ast.Call, attr: str) -> bool:
    """`self.<attr>` is assigned a torch module container in the class of `c`."""
    cls = s.class_of(c)
    return cls is not None and any(
        isinstance(n, ast.Assign)
        and any(self_attr(t) == attr for t in n.targets)
        and isinstance(n.value, ast.Call)
        and (
            n.value.func.attr
            if isinstance(n.value.func, ast.Attribute)
            else getattr(n.value.func, "id", "")
        )
        in _CONTAINERS
        for n in ast.walk(cls)
    )


def local_predicate(
    s: Script, test: ast.expr, rank_test: Callable[[Script, ast.AST], ast.expr | None]
) -> tuple[ast.AST, ast.expr] | None:
    """`if if_main_process():` (or `not ...`) where the project helper answers True from
    a rank test (`if int(os.environ["LOCAL_RANK"]) == 0: return True`, `return
    local_rank == 0`): (the helper's test, its rank side)."""
    for c in calls_in([test]):
        for fn in s.callees(c):
            for n in own_nodes(fn):
                if isinstance(n, ast.If) and any(
                    isinstance(r, ast.Return) and isinstance(r.value, ast.Constant)
                    and r.value.value is True
                    for r in n.body
                ):
                    side = rank_test(s, n.test)
                    if side is not None:
                        return n.test, side
                if isinstance(n, ast.Return) and n.value is not None:
                    side = rank_test(s, n.value)
                    if side is not None and isinstance(n.value, ast.Compare):
                        return n.value, side
    return None
