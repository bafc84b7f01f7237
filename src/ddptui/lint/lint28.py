"""Round 28 (blind batch V): one trained model left out of DDP while the models beside it
are wrapped (p0p4k/vits2_pytorch cf513a7 train_ms.py: `net_g` and `net_d` wrapped, the
duration discriminator with its own optimizer never; the hotfix wraps it after `net_d`)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.project import FuncNode
from ddptui.lint.rules_lint12 import OPTIMIZER
from ddptui.lint.script import Script
from ddptui.lint.syntax import last

_MOVES = frozenset({"cuda", "to"})
_LIBRARY_MODELS = ("torchvision.models.", "timm.create_model", "timm.models.")


def _self_wraps(s: Script, f: Flow) -> dict[FuncNode, list[tuple[str, ast.stmt]]]:
    """Per function: the names it wraps in place (`net = DDP(net, ...)`), with the
    statement."""
    out: dict[FuncNode, list[tuple[str, ast.stmt]]] = {}
    for c in f.torch_ddp_calls:
        st = s.parents.get(c)
        if not (
            isinstance(st, ast.Assign)
            and len(st.targets) == 1
            and isinstance(st.targets[0], ast.Name)
            and c.args
            and isinstance(c.args[0], ast.Name)
            and c.args[0].id == st.targets[0].id
        ):
            continue
        fn = s.scope_of(st)
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            out.setdefault(fn, []).append((st.targets[0].id, st))
    return out


def _built_model(s: Script, value: ast.expr) -> bool:
    """`Net(...)`, `Net(...).cuda(rank)`, `Net(...).to(device)` of a project class, or a
    library's model constructor (`torchvision.models.resnet50()`, `timm.create_model(...)`)."""
    while (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr in _MOVES
    ):
        value = value.func.value
    if not isinstance(value, ast.Call):
        return False
    return s.class_named(value.func) is not None or s.call_name(value).startswith(_LIBRARY_MODELS)


def _parameters_of(node: ast.AST) -> list[str]:
    """The names whose `.parameters()` a piece of code hands on (`net.parameters()`, also
    inside `dict(params=net.parameters(), lr=...)` groups)."""
    return [
        a.func.value.id
        for a in ast.walk(node)
        if isinstance(a, ast.Call)
        and isinstance(a.func, ast.Attribute)
        and a.func.attr == "parameters"
        and isinstance(a.func.value, ast.Name)
    ]


def _trained_models(s: Script, fn: FuncNode) -> list[tuple[str, ast.Call]]:
    """`opt = AdamW(net.parameters(), ...)` in `fn`: (net, the optimizer call); also the
    models of a parameter-group list built in `fn` and handed to it (`param_groups =
    [dict(params=head.parameters())]`, `param_groups.append(dict(params=net.parameters()))`,
    `SGD(param_groups, ...)`)."""
    out: list[tuple[str, ast.Call]] = []
    for c in own_nodes(fn):
        if not (isinstance(c, ast.Call) and OPTIMIZER.search(last(s.call_name(c)))):
            continue
        for a in c.args[:1]:
            if (
                isinstance(a, ast.Call)
                and isinstance(a.func, ast.Attribute)
                and a.func.attr == "parameters"
                and isinstance(a.func.value, ast.Name)
            ):
                out.append((a.func.value.id, c))
            elif isinstance(a, ast.Name):
                groups = [
                    st
                    for st in own_nodes(fn)
                    if isinstance(st, ast.Assign | ast.AugAssign | ast.Expr)
                    and st.lineno < c.lineno
                    and _fills(st, a.id)
                ]
                out += [(name, c) for st in groups for name in _parameters_of(st)]
    return out


def _fills(st: ast.stmt, name: str) -> bool:
    """`name = [...]`, `name += [...]` or `name.append(...)`/`.extend(...)`."""
    if isinstance(st, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in st.targets)
    if isinstance(st, ast.AugAssign):
        return isinstance(st.target, ast.Name) and st.target.id == name
    v = st.value if isinstance(st, ast.Expr) else None
    return (
        isinstance(v, ast.Call)
        and isinstance(v.func, ast.Attribute)
        and v.func.attr in {"append", "extend"}
        and isinstance(v.func.value, ast.Name)
        and v.func.value.id == name
    )


def _mentions(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


def _left_out(s: Script, f: Flow, fn: FuncNode, name: str, wrapped: set[str]) -> bool:
    """`name` is a project model built in `fn` that no wrapper ever receives, and no
    wrapped model holds."""
    values = s.assigned(fn, name)
    built = [v for v in values if not (isinstance(v, ast.Constant) and v.value is None)]
    if not built or not all(_built_model(s, v) for v in built):
        return False  # a parameter, `model.module`, a helper's return: not ours to judge
    if any(c.args and _mentions(c.args[0], name) for c in f.wrapper_calls):
        return False
    # a wrapped container built from it (`model = Wrapper(net_a, net_b)`)
    return not any(_mentions(v, name) for w in wrapped for v in s.assigned(fn, w))


def sibling_unwrapped(s: Script, f: Flow) -> Iterator[Hit]:
    if any(f.collective(c) and "grad" in ast.unparse(c).lower() for c in s.calls):
        return  # gradients averaged by hand
    for fn, wraps in _self_wraps(s, f).items():
        wrapped = {n for n, _ in wraps}
        for name, opt in _trained_models(s, fn):
            if name in wrapped or not _left_out(s, f, fn, name, wrapped):
                continue
            at = max((st for _, st in wraps), key=lambda st: st.lineno)
            names = ", ".join(f"`{n}`" for n in sorted(wrapped))
            yield Hit.at(
                "DDP-NOT-APPLIED",
                at,
                (
                    f"`{name}` is trained (its parameters go to the optimizer at line "
                    f"{opt.lineno}) but is never wrapped in DDP, unlike {names}: its gradients "
                    "are never all-reduced"
                ),
                why=(
                    f"{names} are wrapped in DistributedDataParallel here, but `{name}`, "
                    f"trained by the optimizer at line {opt.lineno}, is not."
                ),
            )
            break


RULES = (sibling_unwrapped,)
