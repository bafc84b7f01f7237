"""Round 30 (blind batch W): the training forward run through a holder class's property
that unwraps the DDP wrapper it holds (nerfstudio-project/nerfstudio f1b60d4
nerfstudio/pipelines/base_pipeline.py: `self._model = DDP(self._model, ...)` in the
pipeline, `model` a property returning `module_wrapper(self._model)`, i.e. the wrapper's
`.module`, and `get_train_loss_dict` runs `self.model(ray_bundle)`; the trainer
backpropagates the loss it returns. PR #1856 runs `self._model(ray_bundle)`)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow, ident
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.project import FuncNode
from ddptui.lint.reach import cast_value, self_attr
from ddptui.lint.rules_frameworks import _bypass, _feeds_backward, _without_grad
from ddptui.lint.script import Script
from ddptui.lint.syntax import const, kwarg

_DEPTH = 3


def _module_of(s: Script, expr: ast.expr, held: ast.expr | None = None) -> ast.expr | None:
    """What `expr` takes the `.module` of: `x.module`, `getattr(x, "module", x)`, either
    branch of an `IfExp`, through `typing.cast`."""
    if isinstance(expr, ast.IfExp):
        return _module_of(s, expr.body) or _module_of(s, expr.orelse)
    if isinstance(expr, ast.Attribute) and expr.attr == "module":
        return expr.value
    if isinstance(expr, ast.Call):
        cast = cast_value(s.call_name(expr), expr)
        if cast:
            return _module_of(s, cast[0])
        if (
            isinstance(expr.func, ast.Name)
            and expr.func.id == "getattr"
            and len(expr.args) >= 2
            and const(expr.args[1]) == "module"
        ):
            return expr.args[0]
    return held


def _returns_module_of(s: Script, fn: FuncNode, param: str) -> bool:
    """`def module_wrapper(m): if isinstance(m, DDP): return m.module; return m`."""
    return any(
        isinstance(r, ast.Return)
        and r.value is not None
        and isinstance(inner := _module_of(s, r.value), ast.Name)
        and inner.id == param
        for r in own_nodes(fn)
    )


def _unwrapped_attr(s: Script, value: ast.expr, depth: int = 0) -> str | None:
    """The `self.<attr>` whose wrapped module `value` is: `self._model.module`, or a
    project helper given `self._model` that returns its parameter's `.module`."""
    inner = _module_of(s, value)
    if inner is not None:
        return self_attr(inner)
    if not isinstance(value, ast.Call) or depth > _DEPTH:
        return None
    for fn in s.callees(value):
        params = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]
        if params[:1] in (["self"], ["cls"]):
            params = params[1:]
        for i, arg in enumerate(value.args[: len(params)]):
            attr = self_attr(arg)
            if attr is not None and _returns_module_of(s, fn, params[i]):
                return attr
    return None


def _is_property(fn: FuncNode) -> bool:
    return any(ident(d) in ("property", "cached_property") for d in fn.decorator_list)


def _unwrapping_property(s: Script, cls: ast.ClassDef, name: str) -> str | None:
    """The held attribute a property `name` of the class (or a base) unwraps."""
    for prop in s._methods(cls, name):
        if not _is_property(prop):
            continue
        for r in own_nodes(prop):
            if isinstance(r, ast.Return) and r.value is not None:
                attr = _unwrapped_attr(s, r.value)
                if attr is not None:
                    return attr
    return None


def _bases(s: Script, cls: ast.ClassDef) -> set[ast.ClassDef]:
    """The class and its project base classes."""
    out: set[ast.ClassDef] = set()
    todo = [cls]
    while todo and len(out) < 16:
        c = todo.pop()
        if c not in out:
            out.add(c)
            todo += [b for b in map(s.class_named, c.bases) if b is not None]
    return out


def _family(s: Script, cls: ast.ClassDef) -> set[ast.ClassDef]:
    """The class, its project bases and the project classes derived from it."""
    subs = {sub for mod in s.modules for sub in mod.classes.values() if cls in _bases(s, sub)}
    return _bases(s, cls) | subs


def _named_sites(s: Script, fn: FuncNode, cls: ast.ClassDef) -> list[ast.Call]:
    """Calls `<obj>.<method name>(...)` whose receiver the index cannot follow (a
    pipeline built from a config: `self.pipeline = config.pipeline.setup(...)`), taken
    as calls of `fn` only when every project method of that name belongs to its class
    family (no other class answers to the name)."""
    family = _family(s, cls)
    for mod in s.modules:
        for other in mod.classes.values():
            if other not in family and any(
                isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == fn.name
                for n in other.body
            ):
                return []
    return [
        c
        for c in s.calls
        if isinstance(c.func, ast.Attribute)
        and c.func.attr == fn.name
        and self_attr(c.func) is None
        and not s.callees(c)
    ]


def _backpropagated(s: Script, call: ast.Call) -> bool:
    if _feeds_backward(s, call):
        return True
    fn = s.scope_of(call)
    cls = s.class_of(call)
    if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) or cls is None:
        return False
    returned = any(isinstance(r, ast.Return) and r.value is not None for r in own_nodes(fn))
    return returned and any(_feeds_backward(s, site, 1) for site in _named_sites(s, fn, cls))


def holder_property_bypass(s: Script, f: Flow) -> Iterator[Hit]:
    """`self.model(batch)` in a method of a class holding `self._model = DDP(...)`, where
    `model` is a property returning the wrapper's `.module`, and the output is
    backpropagated: the forward runs past the wrapper, so DDP never all-reduces the
    gradients (each rank trains its own copy)."""
    if not f.torch_ddp_calls:
        return
    held: dict[tuple[ast.ClassDef, str], bool] = {}
    for call in s.calls:
        fn = call.func
        recv = fn.value if isinstance(fn, ast.Attribute) and fn.attr == "forward" else fn
        prop = self_attr(recv)
        cls = s.class_of(call)
        if prop is None or cls is None:
            continue
        attr = _unwrapping_property(s, cls, prop)
        if attr is None:
            continue
        if (cls, attr) not in held:
            held[(cls, attr)] = any(f.is_ddp_value(v) for v, _ in s.self_attr_values(call, attr))
        if held[(cls, attr)] and not _without_grad(s, call) and _backpropagated(s, call):
            yield _bypass(call, f"`self.{attr}`", f"self.{prop}")


# --- a state dict one rank saves and the others load back onto that rank's GPU ----------
# hustvl/WeakTr 5bdceb8 OnlineRetraining/segm/utils/distributed.py:54-64 (`sync_model`,
# after cosypose): rank 0 `torch.save(model.state_dict(), sync_path)`, a barrier, then
# `if ptu.dist_rank > 0: model.load_state_dict(torch.load(sync_path))`: the tensors come
# back on the GPU rank 0 saved them from, so every other rank allocates on GPU 0. The
# DDP tutorial's version maps them (`map_location={"cuda:0": f"cuda:{rank}"}`).


def _others_test(f: Flow, test: ast.expr) -> bool:
    """`rank > 0`, `rank != 0`, `rank >= 1`, `0 < rank`: every rank but the first."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if f.rank_valued(left) and const(right) == 0:
        return isinstance(op, ast.Gt | ast.NotEq)
    if f.rank_valued(left) and const(right) == 1:
        return isinstance(op, ast.GtE)
    return f.rank_valued(right) and const(left) == 0 and isinstance(op, ast.Lt | ast.NotEq)


def _saved_state_dict(s: Script, fn: ast.AST, path: str, before: int) -> bool:
    """`torch.save(<module>.state_dict(), path)` earlier in the same function."""
    return any(
        isinstance(n, ast.Call)
        and s.call_name(n) == "torch.save"
        and n.lineno < before
        and len(n.args) >= 2
        and ast.unparse(n.args[1]) == path
        and isinstance(n.args[0], ast.Call)
        and isinstance(n.args[0].func, ast.Attribute)
        and n.args[0].func.attr == "state_dict"
        for n in own_nodes(fn)
    )


def others_load_saved_state(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.distributed:
        return
    for c in s.calls:
        if s.call_name(c) != "torch.load" or len(c.args) != 1:
            continue
        if kwarg(c, "map_location") is not None or any(k.arg is None for k in c.keywords):
            continue
        guard = f.local_guard(c)
        if guard is not None and not (isinstance(guard, ast.If) and _others_test(f, guard.test)):
            continue
        fn = s.scope_of(c)
        if not _saved_state_dict(s, fn, ast.unparse(c.args[0]), c.lineno):
            continue
        yield Hit.at(
            "DDP-LOAD-MAP-LOCATION",
            c,
            (
                f"`{ast.unparse(c)[:70]}` loads the state dict another rank saved from its "
                "GPU, without map_location: each loading rank puts it on that rank's GPU "
                "(GPU 0), not its own"
            ),
            path=ast.unparse(c.args[0]),
        )


# --- a seed from the node's id: every process of a node draws the same stream ----------
# facebookresearch/vissl 8e0476b vissl/utils/misc.py:140-153: `set_seeds(cfg, node_id)`
# seeds python, numpy and torch with `cfg.SEED_VALUE * 2 * node_id`, called alike by
# every training process of a machine (vissl/engines/train.py:79); PR #299 seeds from
# the process's `dist_rank`.
_NODE_ID: Final = re.compile(r"^(node_id|node_rank|node_idx|machine_rank|machine_id|group_rank)$")
_SEED_CALLS: Final = frozenset(
    {"torch.manual_seed", "torch.cuda.manual_seed_all", "random.seed", "numpy.random.seed"}
)


def _seed_names(s: Script, arg: ast.expr) -> set[str]:
    """The names and attributes a seed value is computed from, one assignment back."""
    exprs = [arg]
    scope = s.scope_of(arg)
    for n in ast.walk(arg):
        if isinstance(n, ast.Name):
            exprs += s.assigned(scope, n.id)
    return {i for e in exprs for n in ast.walk(e) if (i := ident(n)) is not None}  # type: ignore[arg-type]


def node_seed(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.distributed:
        return
    said: set[ast.AST] = set()
    # torch's seed first: the one that draws dropout masks and the sampler's shuffle
    for c in sorted(s.calls, key=lambda c: s.call_name(c) != "torch.manual_seed"):
        if s.call_name(c) not in _SEED_CALLS or not c.args:
            continue
        scope = s.scope_of(c)
        if scope in said:
            continue
        names = _seed_names(s, c.args[0])
        if not any(_NODE_ID.match(n) for n in names) or any(
            "rank" in n.lower() and not _NODE_ID.match(n) for n in names
        ):
            continue
        said.add(scope)
        yield Hit.at(
            "DDP-RANK-SEED",
            c,
            (
                f"`{ast.unparse(c)[:60]}` seeds from the node's id: every process of a node "
                "draws the same random stream; seed from the process's rank"
            ),
            seed=ast.unparse(c.args[0]),
        )


RULES = (holder_property_bypass, others_load_saved_state, node_seed)
