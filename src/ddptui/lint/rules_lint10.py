"""DDP-FIND-UNUSED where the graph to the model is cut on some batches only, while DDP
runs without find_unused_parameters. A branch "the batch decides" is a count of the
batch compared with zero (`num_pos > 0` with `num_pos = fg_mask.sum()`, `num_edges ==
0`, `.any()`), read from the function's inputs; never a shape, a setting (`self.x`) or
an optional input (`is None`). Three shapes, each from a fix in a real project:

- a project loss sets a term to a fresh constant tensor (`torch.tensor(0.)`) on such a
  branch instead of computing it from the model's output (YOLOv6 5738ccf: `pred_dist.sum()
  * 0.`); reported at the constant, where that fix goes;
- a module of the model DDP wraps (followed from the DDP call into the classes each
  `__init__` builds, across files, 4 deep) returns a constant tensor on such a branch,
  skipping its layers (GNNFlow: `if num_edges == 0: return torch.zeros(...)`);
- such a module runs a layer only on one branch of such a test (Diffusion-Planner:
  `self.speed_limit_emb` only when `has_speed_limit.sum() > 0`).
The two model shapes are reported at the DDP call (where find_unused_parameters goes),
naming the module, its attribute path, the layers and the test with its file:line."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.project import FuncNode
from ddptui.lint.rules_lint6 import _flag_given
from ddptui.lint.rules_project import _layer
from ddptui.lint.script import Script
from ddptui.lint.syntax import const, last

_CONST_MAKERS: Final = frozenset({"tensor", "zeros", "zeros_like", "scalar_tensor"})
_NEW_MAKERS: Final = frozenset({"new_zeros", "new_tensor"})
_MOVES: Final = frozenset({"to", "cuda", "float", "half", "type_as", "detach"})
_MAX_STEPS: Final = 6  # how far a name is followed through the function's assignments
_SHAPES: Final = frozenset({"shape", "size", "dim", "ndim", "ndimension"})
_MAX_DEPTH: Final = 4
_MAX_CLASSES: Final = (
    200  # model classes looked into per DDP call  # how deep the model's submodules are looked into
)


def _loss_function(s: Script, fn: FuncNode) -> bool:
    """A function that computes a loss: its name says so, or its class's does."""
    cls = s.class_of(fn)
    return "loss" in fn.name.lower() or (
        cls is not None and "loss" in cls.name.lower() and fn.name in ("forward", "__call__")
    )


def _constant_tensor(s: Script, value: ast.expr) -> bool:
    """`torch.tensor(0.)`, `torch.zeros(1, device=d)`, `x.new_zeros(1)`, and the same
    moved (`.to(device)`, `.cuda()`): a leaf with no graph behind it."""
    while (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr in _MOVES
    ):
        value = value.func.value
    if not isinstance(value, ast.Call) or any(
        k.arg == "requires_grad" and const(k.value) is True for k in value.keywords
    ):
        return False
    if isinstance(value.func, ast.Attribute) and value.func.attr in _NEW_MAKERS:
        return True
    qn = s.call_name(value)
    return qn.startswith("torch.") and last(qn) in _CONST_MAKERS


def _assigns(body: list[ast.stmt]) -> dict[str, ast.Assign]:
    """The names a branch assigns at its top level (the last assignment wins)."""
    out: dict[str, ast.Assign] = {}
    for st in body:
        if (
            isinstance(st, ast.Assign)
            and len(st.targets) == 1
            and isinstance(st.targets[0], ast.Name)
        ):
            out[st.targets[0].id] = st
    return out


def _flows(fn: FuncNode) -> dict[str, set[str]]:
    """Each local name of the function with the names its assigned values read."""
    out: dict[str, set[str]] = {}
    for n in ast.walk(fn):
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(n, ast.Assign):
            targets, value = n.targets, n.value
        elif isinstance(n, ast.AugAssign | ast.AnnAssign) and n.value is not None:
            targets, value = [n.target], n.value
        if value is None:
            continue
        reads = {x.id for x in ast.walk(value) if isinstance(x, ast.Name)}
        for t in targets:
            for x in ast.walk(t):
                if isinstance(x, ast.Name):
                    out.setdefault(x.id, set()).update(reads)
    return out


def _closure(names: set[str], flows: dict[str, set[str]]) -> set[str]:
    seen = set(names)
    work = list(names)
    steps = 0
    while work and steps < _MAX_STEPS * 50:
        steps += 1
        for r in flows.get(work.pop(), ()):
            if r not in seen:
                seen.add(r)
                work.append(r)
    return seen


def _params(fn: FuncNode) -> set[str]:
    a = fn.args
    return {p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]} - {"self", "cls"}


def _counts(test: ast.expr) -> bool:
    """The test compares a count with zero (`num_pos > 0`, `mask.sum() > 0`,
    `num_edges == 0`) or asks `.any()`: how many items of this batch qualify, not a shape
    (`x.dim() == 3`) or a setting."""
    nodes = list(ast.walk(test))
    if any(isinstance(n, ast.Attribute) and n.attr in _SHAPES for n in nodes):
        return False
    for n in nodes:
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("any", "all")
            and not n.args
        ):
            return True
        if isinstance(n, ast.Compare) and any(
            isinstance(x, ast.Constant) and x.value == 0 and not isinstance(x.value, bool)
            for x in [n.left, *n.comparators]
        ):
            return True
    return False


def _batch_test(test: ast.expr, fn: FuncNode, flows: dict[str, set[str]]) -> bool:
    """A test the batch decides: a count of the batch compared with zero, read from
    locals counted from the function's inputs (`num_pos > 0`, `fg_mask.sum() > 0`), and
    no setting (`self.use_dfl`) or optional input (`is None`) in it."""
    if any(
        isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
        for n in ast.walk(test)
    ) or any(
        isinstance(n, ast.Compare) and any(isinstance(o, ast.Is | ast.IsNot) for o in n.ops)
        for n in ast.walk(test)
    ):
        return False
    if not _counts(test):
        return False
    names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
    return bool(names) and bool(_closure(names, flows) & _params(fn))


def _returned(fn: FuncNode, name: str, flows: dict[str, set[str]]) -> bool:
    for n in ast.walk(fn):
        if isinstance(n, ast.Return) and n.value is not None:
            reads = {x.id for x in ast.walk(n.value) if isinstance(x, ast.Name)}
            if name in _closure(reads, flows):
                return True
    return False


def _cut(
    s: Script, fn: FuncNode, flows: dict[str, set[str]]
) -> tuple[ast.If, bool, ast.Assign, ast.Assign] | None:
    """The branch of a batch-decided test that sets a returned loss term to a constant
    while the other branch computes it from the function's inputs."""
    params = _params(fn)
    for n in ast.walk(fn):
        if not isinstance(n, ast.If) or not n.orelse or not _batch_test(n.test, fn, flows):
            continue
        for holds, mine, other in ((False, n.orelse, n.body), (True, n.body, n.orelse)):
            computed = _assigns(other)
            for name, st in _assigns(mine).items():
                real = computed.get(name)
                if (
                    real is None
                    or not _constant_tensor(s, st.value)
                    or _constant_tensor(s, real.value)
                ):
                    continue
                reads = {x.id for x in ast.walk(real.value) if isinstance(x, ast.Name)}
                if _closure(reads, flows) & params and _returned(fn, name, flows):
                    return n, holds, st, real
    return None


def _early_constant(
    s: Script, fn: FuncNode, flows: dict[str, set[str]]
) -> tuple[ast.If, ast.expr] | None:
    """`if num_edges == 0: return torch.zeros(...)` in a forward that otherwise runs its
    layers: on such a batch none of them takes part."""
    for n in ast.walk(fn):
        if (
            isinstance(n, ast.If)
            and n.body
            and isinstance(ret := n.body[-1], ast.Return)
            and ret.value is not None
            and _constant_tensor(s, ret.value)
            and _batch_test(n.test, fn, flows)
        ):
            return n, ret.value
    return None


def _layers_run(fn: ast.AST) -> list[str]:
    """The attributes forward calls (`self.w_q(x)`, `self.layers[k](x)`)."""
    out: list[str] = []
    for n in ast.walk(fn):
        if isinstance(n, ast.Call):
            f = n.func.value if isinstance(n.func, ast.Subscript) else n.func
            if (
                isinstance(f, ast.Attribute)
                and isinstance(f.value, ast.Name)
                and f.value.id == "self"
                and f.attr not in out
            ):
                out.append(f.attr)
    return out


def _held(s: Script, top: ast.ClassDef) -> list[tuple[ast.ClassDef, str]]:
    """The class and the project classes its `__init__` builds (into an attribute, a
    ModuleDict or ModuleList item), transitively, each once with its attribute path."""
    out: list[tuple[ast.ClassDef, str]] = [(top, "")]
    seen = {top}
    level = [(top, "")]
    for _ in range(_MAX_DEPTH):
        nxt: list[tuple[ast.ClassDef, str]] = []
        for cls, path in level:
            for init in s._methods(cls, "__init__"):
                for st in ast.walk(init):
                    if not isinstance(st, ast.Assign | ast.Expr):
                        continue
                    if isinstance(st, ast.Assign):
                        name = ast.unparse(st.targets[0]).removeprefix("self.")
                    elif isinstance(st.value, ast.Call):  # self.blocks.append(Block(...))
                        name = ast.unparse(st.value.func).rsplit(".", 1)[0].removeprefix("self.")
                    else:
                        continue
                    for call in (c for c in ast.walk(st.value) if isinstance(c, ast.Call)):
                        sub = s.class_named(call.func)
                        if sub is not None and sub not in seen and len(seen) < _MAX_CLASSES:
                            seen.add(sub)
                            nxt.append((sub, f"{path}.{name}" if path else name))
        out += nxt
        level = nxt
    return out


def _wrapped(s: Script, call: ast.Call) -> list[ast.ClassDef]:
    out: list[ast.ClassDef] = []
    for o in s.origins(call.args[0]) if call.args else []:
        cls = s.class_named(o.func) if isinstance(o, ast.Call) else None
        if cls is not None and cls not in out:
            out.append(cls)
    return out


def _layers_in(nodes: list[ast.stmt]) -> set[str]:
    return {a for st in nodes for a in _layers_run(st)}


def _guarded_layers(
    fwd: FuncNode, flows: dict[str, set[str]], layers: list[str]
) -> tuple[ast.If, bool, list[str]] | None:
    """Layers forward calls only inside one branch of a batch-decided `if` (DiffusionPlanner:
    `if valid_indices.sum() > 0: x = self.projection(x)`), or only after an early return
    of a constant tensor (GNNFlow: `if num_edges == 0: return torch.zeros(...)`)."""
    for n in ast.walk(fwd):
        if not isinstance(n, ast.If) or not _batch_test(n.test, fwd, flows):
            continue
        outside = _layers_in([st for st in _own_stmts(fwd) if not _within(st, n)])
        for branch in (n.body, n.orelse):
            inside = [a for a in layers if a in _layers_in(branch) and a not in outside]
            other = _layers_in(n.orelse if branch is n.body else n.body)
            inside = [a for a in inside if a not in other]
            if inside:
                return n, branch is n.body, inside
    return None


def _own_stmts(fn: FuncNode) -> list[ast.stmt]:
    return [n for n in ast.walk(fn) if isinstance(n, ast.stmt) and n is not fn]


def _within(st: ast.stmt, node: ast.If) -> bool:
    return any(st is x for x in ast.walk(node)) or any(node is x for x in ast.walk(st))


def model_cut_on_some_batches(s: Script, f: Flow) -> Iterator[Hit]:
    """A module of the model DDP wraps whose forward runs some of its layers only on the
    batches a count decides: on the others their parameters get no gradient."""
    for ddp in f.torch_ddp_calls:
        if _flag_given(ddp):
            continue
        for top in _wrapped(s, ddp):
            for cls, path in _held(s, top):
                for fwd in s._methods(cls, "forward"):
                    flows = _flows(fwd)
                    built = s._self_assigns(cls)
                    layers = [
                        a
                        for a in _layers_run(fwd)
                        if any(_layer(s, st.value) for st in built.get(a, []) if st.value)
                    ]
                    if not layers:
                        continue
                    early = _early_constant(s, fwd, flows)
                    held = f" (`{path}` of `{top.name}`)" if path else ""
                    if early is not None:
                        branch, ret = early
                        what = (
                            f"returns the constant `{ast.unparse(ret)}` for a batch where "
                            f"`{ast.unparse(branch.test)}` ({s.path_of(branch)}:"
                            f"{branch.lineno}), skipping "
                            f"{', '.join(f'`self.{a}`' for a in layers[:4])}"
                        )
                    else:
                        guarded = _guarded_layers(fwd, flows, layers)
                        if guarded is None:
                            continue
                        branch, holds, inside = guarded
                        what = (
                            f"runs {', '.join(f'`self.{a}`' for a in inside[:4])} only on a "
                            f"batch where `{ast.unparse(branch.test)}` is "
                            f"{'true' if holds else 'false'} "
                            f"({s.path_of(branch)}:{branch.lineno})"
                        )
                    yield Hit.at(
                        "DDP-FIND-UNUSED",
                        ddp,
                        (
                            f"DDP wraps `{top.name}` without find_unused_parameters, but "
                            f"`{cls.name}.forward`{held} {what}: on the other batches their "
                            "parameters get no gradient and DDP fails at the next step"
                        ),
                    )
                    return


def loss_cut_on_some_batches(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.torch_ddp_calls or any(_flag_given(c) for c in f.torch_ddp_calls):
        return
    ddp = f.torch_ddp_calls[0]
    for fn in (n for n in s.nodes if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
        if not _loss_function(s, fn):
            continue
        found = _cut(s, fn, _flows(fn))
        if found is None:
            continue
        branch, holds, st, real = found
        name = ast.unparse(st.targets[0])
        cls = s.class_of(fn)
        where = f"{cls.name}.{fn.name}" if cls is not None else fn.name
        yield Hit.at(
            "DDP-FIND-UNUSED",
            st,
            (
                f"`{where}` sets `{name}` to the constant `{ast.unparse(st.value)}` for a "
                f"batch where `{ast.unparse(branch.test)}` ({s.path_of(branch)}:"
                f"{branch.lineno}) is {'true' if holds else 'false'}, instead of computing it "
                f"from the model's output as on the other branch (line {real.lineno}): on "
                "such a batch the parameters behind that output get no gradient, and DDP "
                f"({s.path_of(ddp)}:{ddp.lineno}) runs without "
                "find_unused_parameters, so it fails at the next step; keep the graph "
                "(`pred.sum() * 0.`) or pass find_unused_parameters=True"
            ),
        )
        return


RULES = (loss_cut_on_some_batches, model_cut_on_some_batches)
