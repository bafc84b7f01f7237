"""Rules about the wrap itself, whoever's DDP it is: SyncBatchNorm converted after the
optimizer took the model's parameters (DDP-SYNCBN-AFTER-OPTIMIZER), and a loss computed
past the DDP wrapper's forward (DDP-FORWARD-BYPASS)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from typing import Final

from ddptui.lint.flow import Flow, ident
from ddptui.lint.lint15 import helper_runs_wrapper, module_api
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.reach import Scope
from ddptui.lint.rules_project import _WRAPPER_API
from ddptui.lint.rules_wrapper import _mode_branch, _tells_wrapper
from ddptui.lint.script import Script
from ddptui.lint.syntax import last

# --- SyncBatchNorm converted after the optimizer was built ------------------------------

# apex's convert_syncbn_model builds new SyncBatchNorm layers whose weight and bias are
# NEW Parameters (`mod.weight.data = module.weight.data.clone().detach()`,
# NVIDIA/apex apex/parallel/__init__.py): an optimizer built before holds the old ones.
# torch's SyncBatchNorm.convert_sync_batchnorm hands the same Parameter objects over
# (`module_output.weight = module.weight`, torch/nn/modules/batchnorm.py): the optimizer
# built before it still steps the right tensors, so it is not said (yolov5's --sync-bn
# converts after its optimizer and trains fine).
_CONVERTERS: Final = frozenset({"convert_syncbn_model"})
_OPTIM_WORDS: Final = re.compile(r"optim", re.I)
_OPTIMIZERS: Final = frozenset(
    {"SGD", "Adam", "AdamW", "LAMB", "Lamb", "FusedAdam", "FusedLAMB", "FusedSGD", "RMSprop",
     "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "LARS", "Lion", "Adafactor"}
)  # fmt: skip


def _is_optimizer(s: Script, call: ast.Call) -> bool:
    qn = s.call_name(call)
    name = last(qn)
    if not name or "sched" in qn.lower() or name.endswith("Hook") or "state_dict" in name:
        return False
    if qn.startswith("torch.optim.") and not qn.startswith(("torch.optim.lr_", "torch.optim.swa")):
        return True
    if isinstance(call.func, ast.Attribute) and call.func.attr in ("step", "zero_grad"):
        return False
    return name in _OPTIMIZERS or bool(_OPTIM_WORDS.search(name))


def _optimizer_names(s: Script, scope: ast.AST) -> set[str]:
    """Names that hold an optimizer (`optimizer = build_optimizer(model, cfg)`): a call
    given one later (a hook, a scheduler) builds no new optimizer."""
    return {
        t
        for n in own_nodes(scope)
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and _is_optimizer(s, n.value)
        for target in n.targets
        for t in _targets(target)
    }


def _text(expr: ast.expr) -> str | None:
    """`model`, `self.model`: the name a module is held under."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute) and _text(expr.value) is not None:
        return ast.unparse(expr)
    return None


# what leaves the autograd graph: a value computed through these carries no gradient
_CUT: Final = frozenset({"detach", "detach_", "item", "tolist", "numpy", "no_grad"})


def _mentions(node: ast.AST, names: set[str], graph: bool = False) -> bool:
    """`node` reads one of `names`; with `graph`, only where a gradient can flow (not
    inside `x.detach()`, `x.item()`)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Name | ast.Attribute) and _text(n) in names:
            return True
        if graph and isinstance(n, ast.Call) and ident(n.func) in _CUT:
            continue
        stack.extend(ast.iter_child_nodes(n))
    return False


def _targets(node: ast.expr) -> Iterator[str]:
    if isinstance(node, ast.Tuple | ast.List):
        for e in node.elts:
            yield from _targets(e)
    elif isinstance(node, ast.Starred):
        yield from _targets(node.value)
    else:
        t = _text(node)
        if t is not None and t != "self":
            yield t


def derived(
    scope: ast.AST, seeds: Iterable[str], rounds: int = 4, *, graph: bool = False
) -> set[str]:
    """Names in `scope` whose values are computed from `seeds`: assigned from them, loop
    targets over them, lists they were appended to (bounded rounds, no fixpoint); with
    `graph`, only through what keeps the autograd graph (no `.detach()`)."""
    out = set(seeds)
    nodes = list(own_nodes(scope))
    for _ in range(rounds):
        before = len(out)
        for n in nodes:
            if isinstance(n, ast.Assign) and _mentions(n.value, out, graph):
                for t in n.targets:
                    out.update(_targets(t))
            elif isinstance(n, ast.AugAssign | ast.AnnAssign) and n.value is not None:
                if _mentions(n.value, out, graph):
                    out.update(_targets(n.target))
            elif isinstance(n, ast.For | ast.comprehension) and _mentions(n.iter, out, graph):
                out.update(_targets(n.target))
            elif (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr in ("append", "extend", "add", "insert", "update")
                and any(_mentions(a, out, graph) for a in [*n.args, *(k.value for k in n.keywords)])
            ):
                out.update(_targets(n.func.value))
        if len(out) == before:
            break
    return out


def syncbn_after_optimizer(s: Script, f: Flow) -> Iterator[Hit]:
    for conv in s.calls:
        name = last(s.call_name(conv))
        if name not in _CONVERTERS or not conv.args:
            continue
        held = _text(conv.args[0])
        if held is None:
            continue
        scope = s.scope_of(conv)
        params = derived(scope, [held]) - _optimizer_names(s, scope)
        built = [
            c
            for c in own_nodes(scope)
            if isinstance(c, ast.Call) and _is_optimizer(s, c) and _mentions(c, params)
        ]
        before = [c for c in built if c.lineno < conv.lineno]
        if not before or any(c.lineno > conv.lineno for c in built):
            continue  # built after the conversion, or built again after it
        opt = min(before, key=lambda c: c.lineno)
        yield Hit.at(
            "DDP-SYNCBN-AFTER-OPTIMIZER",
            conv,
            (
                f"`{name}({held})` replaces the BatchNorm layers after the optimizer "
                f"(line {opt.lineno}) took {held}'s parameters"
            ),
            model=held,
            converter=ast.unparse(conv.func),
            optimizer_line=opt.lineno,
        )


# --- the DDP forward bypassed ------------------------------------------------------------

_NO_GRAD: Final = frozenset({"no_grad", "inference_mode", "set_grad_enabled"})


def _without_grad(s: Script, node: ast.AST) -> bool:
    for a in s.ancestors(node):
        if isinstance(a, ast.With | ast.AsyncWith) and any(
            isinstance(i.context_expr, ast.Call) and ident(i.context_expr.func) in _NO_GRAD
            for i in a.items
        ):
            return True
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef):
            return any(
                ident(d.func if isinstance(d, ast.Call) else d) in _NO_GRAD
                for d in a.decorator_list
            )
    return False


def _backward_receivers(scope: ast.AST) -> list[ast.AST]:
    """What the function backpropagates: `loss.backward()`, `scaler.scale(loss).backward()`,
    `accelerator.backward(loss)`, `torch.autograd.backward(loss)`."""
    out: list[ast.AST] = []
    for n in own_nodes(scope):
        if isinstance(n, ast.Call) and ident(n.func) == "backward":
            if isinstance(n.func, ast.Attribute):
                out.append(n.func.value)
            out += n.args[:1]
    return out


def _passed_through(s: Script, f: Flow, c: ast.Call) -> bool:
    """`model.train_batch(batch)` on a project subclass of DDP whose `__getattr__` hands
    out the wrapped module's attributes (pytext's DistributedModel): the module's method
    runs, and its `self(...)` is the module's forward, not the wrapper's."""
    fn = c.func
    if not isinstance(fn, ast.Attribute) or fn.attr.startswith("_") or fn.attr in _WRAPPER_API:
        return False
    for o in s.origins(fn.value):
        cls = s.class_named(o.func) if isinstance(o, ast.Call) and o in f.ddp_calls else None
        own = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)} if cls else set()
        if "__getattr__" in own and fn.attr not in own:
            return True
    return False


def _feeds_backward(s: Script, call: ast.Call, depth: int = 0, f: Flow | None = None) -> bool:
    """The call's result flows into what its function backpropagates, or into what it
    returns to a caller that does (two calls up at most: `out = self._loss_function(b)`
    then `out["loss"].backward()`); with `f`, also into a project helper that
    backpropagates it (`self.backprop(state, loss)`)."""
    scope = s.scope_of(call)
    parent = s.parents.get(call)
    seeds: list[str] = []
    if isinstance(parent, ast.Assign):
        for t in parent.targets:
            seeds += _targets(t)
    receivers = _backward_receivers(scope)
    if any(call in set(ast.walk(r)) for r in receivers):
        return True
    names = derived(scope, seeds, graph=True) if seeds else set()
    if receivers and any(_mentions(r, names, True) for r in receivers):
        return True
    if f is not None and any(
        isinstance(n, ast.Call)
        and any(_mentions(a, names, True) for a in n.args)
        and any(f.has_backward(fn) for fn in s.callees(n))
        for n in own_nodes(scope)
    ):
        return True
    returned = any(
        isinstance(n, ast.Return)
        and n.value is not None
        and (call in set(ast.walk(n.value)) or _mentions(n.value, names, True))
        for n in own_nodes(scope)
    )
    if not returned or depth >= 2 or not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    return any(_feeds_backward(s, site, depth + 1) for site in s.call_sites(scope))


def _forward_called(s: Script, f: Flow) -> bool:
    """Some code runs a DDP wrapper's forward (`model(x)`, `model.forward(x)`), or hands
    the wrapper to code outside the project, which may."""
    for c in s.calls:
        fn = c.func
        if f.is_ddp_value(fn) or (
            isinstance(fn, ast.Attribute) and fn.attr == "forward" and f.is_ddp_value(fn.value)
        ):
            return True
        if not s.callees(c) and any(
            f.is_ddp_value(a) for a in [*c.args, *(k.value for k in c.keywords)]
        ):
            return True
    return False


def _wrapped_texts(s: Script, ddp: ast.Call) -> set[str]:
    """How the wrapped model is held where the loss is computed: the DDP call's argument
    (`self.actor_critic`), and, for a parameter, what its callers pass."""
    if not ddp.args:
        return set()
    arg = ddp.args[0]
    out = {t for t in [_text(arg)] if t is not None}
    scope = s.scope_of(arg)
    if isinstance(arg, ast.Name) and isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        out |= {t for a in s.param_args(scope, arg.id) if (t := _text(a)) is not None}
    return {t for t in out if t.startswith("self.")}


def forward_bypass(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.torch_ddp_calls:
        return
    said: set[int] = set()
    # 1. `model.module(x)` / `model.module.compute_loss(x)` on the wrapper, or through a
    #    name holding it (`model_without_ddp = model.module`), then backward
    for c in s.calls:
        fn = c.func
        recv = fn.value if isinstance(fn, ast.Attribute) and fn.attr != "module" else fn
        inner = _unwrapped_of(s, f, recv)
        passed = inner is None and _passed_through(s, f, c)  # (a wrapper's __getattr__)
        if (
            (inner is not None or passed)
            and not module_api(c)
            and not _without_grad(s, c)
            and not _wrapper_runs_beside(s, f, c)
            and _feeds_backward(s, c, f=f if passed else None)
        ):
            said.add(c.lineno)
            yield _bypass(c, ast.unparse(inner.value if inner else recv), ast.unparse(recv))
    # 2. the wrapper only borrowed for its hooks: never run forward, while the model it
    #    wraps computes the loss (`self.actor_critic.evaluate_actions(...)`, then backward)
    if _forward_called(s, f):
        return
    for ddp in f.torch_ddp_calls:
        held = _wrapped_texts(s, ddp)
        assign = s.parents.get(ddp)
        if isinstance(assign, ast.Assign) and any(_text(t) in held for t in assign.targets):
            continue  # `self.model = DDP(self.model)`: the wrapper took its place
        for c in s.calls:
            fn = c.func
            recv = fn.value if isinstance(fn, ast.Attribute) else fn
            if (
                _text(recv) in held
                and c.lineno not in said
                and not _without_grad(s, c)
                and _feeds_backward(s, c)
            ):
                said.add(c.lineno)
                yield _bypass(c, "the DDP wrapper", _text(recv) or "the model")
                return


def _wrapper_runs_beside(s: Script, f: Flow, call: ast.Call) -> bool:
    """The same step also runs a DDP forward (`vt = model(t, x)` for the main loss, then
    `model.module.potential(x)` for an extra term): the reducer was prepared for this
    backward and the extra gradients are summed in before the hooks fire. A name that
    holds `model.module if isinstance(model, DDP) else model` is the unwrapped module
    under DDP (minimind's RL trainers): its call is no wrapper forward."""
    # the callers up to three hops: goodfire-ai/spd's optimize() runs the wrapper, then
    # calculate_losses() hands the module to the loss helpers that run it
    scopes = [s.scope_of(call)]
    todo = list(scopes)
    for _ in range(3):
        todo = [
            s.scope_of(site)
            for sc in todo
            if isinstance(sc, ast.FunctionDef | ast.AsyncFunctionDef)
            for site in s.call_sites(sc)
        ]
        todo = [sc for sc in dict.fromkeys(todo) if sc not in scopes]
        scopes += todo
    return any(
        isinstance(n, ast.Call)
        and (
            (f.is_ddp_value(n.func) and not _unwrapping_name(s, n.func))
            or (
                isinstance(n.func, ast.Attribute)
                and n.func.attr == "forward"
                and f.is_ddp_value(n.func.value)
            )
            or helper_runs_wrapper(s, f, n)
        )
        for sc in scopes
        for n in own_nodes(sc)
    )


def _unwrapping_name(s: Script, expr: ast.expr) -> bool:
    """A name only ever given `m.module if isinstance(m, DDP) else m` (or `m.module`)."""
    if not isinstance(expr, ast.Name):
        return False
    values = s.assigned(s.scope_of(expr), expr.id)
    return bool(values) and all(
        any(isinstance(b, ast.Attribute) and b.attr == "module" for b in branches)
        for v in values
        for branches in [[v.body, v.orelse] if isinstance(v, ast.IfExp) else [v]]
    )


def _unwrapped_of(s: Script, f: Flow, recv: ast.expr) -> ast.Attribute | None:
    """The `wrapper.module` a receiver is: itself, or the value of the name holding it."""
    if isinstance(recv, ast.Attribute) and recv.attr == "module":
        return recv if f.is_ddp_value(recv.value) else None
    if not isinstance(recv, ast.Name | ast.Call):
        return None
    return next(
        (
            o
            for o in s.origins(recv)
            if isinstance(o, ast.Attribute) and o.attr == "module" and f.is_ddp_value(o.value)
        ),
        None,
    )


def _bypass(call: ast.Call, wrapper: str, module: str) -> Hit:
    return Hit.at(
        "DDP-FORWARD-BYPASS",
        call,
        (
            f"the loss comes from `{ast.unparse(call.func)}(...)` on the wrapped model, not "
            f"through {wrapper}'s forward: DDP does not all-reduce these gradients"
        ),
        wrapper=wrapper,
        module=module,
        call=ast.unparse(call.func),
    )


# --- accelerate's prepare(): the model comes back in DDP on a multi-GPU run ---------------

# Accelerator.prepare_model (huggingface/accelerate src/accelerate/accelerator.py) wraps
# the model in torch's DistributedDataParallel when distributed_type is MULTI_GPU: no
# attribute forwarding, `module.` keys; its docs say `accelerator.unwrap_model(model)`.
# (Under DeepSpeed or FSDP the engine forwards attributes, and Lightning Fabric's
# `_FabricModule.__getattr__` forwards them too: those are not said.)
_MODEL_WORDS: Final = re.compile(
    r"model|net|encoder|decoder|generator|discriminator|policy|critic|transformer|agent|actor",
    re.I,
)


def prepared_models(s: Script, f: Flow) -> Iterator[tuple[ast.Call, ast.Name, ast.expr]]:
    """(prepare call, the name the model comes back as, the model given)."""
    for c in s.calls:
        fn = c.func
        if not (
            isinstance(fn, ast.Attribute)
            and fn.attr == "prepare"
            and any(_ddp_accelerator(s, o) for o in s.origins(fn.value))
        ):
            continue
        assign = s.parents.get(c)
        if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1):
            continue
        target = assign.targets[0]
        names = target.elts if isinstance(target, ast.Tuple | ast.List) else [target]
        for name, arg in zip(names, c.args, strict=False):
            if isinstance(name, ast.Name) and _is_model_arg(s, arg):
                yield c, name, arg


_SHARDING: Final = re.compile(r"fsdp|deepspeed|megatron|parallelism|torch_tp|tp_plugin", re.I)


def _ddp_accelerator(s: Script, o: ast.expr) -> bool:
    """`Accelerator(...)` not told to shard (an FSDP, DeepSpeed or Megatron plugin, a
    parallelism config): with several GPUs its prepare() wraps the model in DDP."""
    return (
        isinstance(o, ast.Call)
        and last(s.call_name(o)) == "Accelerator"
        and not any(k.arg is None or _SHARDING.search(k.arg) for k in o.keywords)
    )


def _is_model_arg(s: Script, arg: ast.expr) -> bool:
    if isinstance(arg, ast.Starred) or not _MODEL_WORDS.search(ast.unparse(arg)):
        return False
    return not any(
        isinstance(o, ast.Call)
        and (_is_optimizer(s, o) or re.search(r"Loader|sched|Scheduler", s.call_name(o)))
        for o in s.origins(arg)
    )


def _rebound_between(s: Script, scope: Scope, name: str, start: int, end: int) -> bool:
    return any(start < v.lineno < end for v in s.assigned(scope, name))


def prepared_wrapper(s: Script, f: Flow) -> Iterator[Hit]:
    for prep, name, _ in prepared_models(s, f):
        scope = s.scope_of(prep)
        start = prep.end_lineno or prep.lineno
        said: set[str] = set()  # each attribute once: each is its own fix
        bypass = _prepared_bypass(s, scope, name.id, start)
        yield from bypass
        bypassed = {h.line for h in bypass}
        for n in sorted(
            (
                n
                for n in own_nodes(scope)
                if isinstance(n, ast.Attribute)
                and isinstance(n.ctx, ast.Load)
                and isinstance(n.value, ast.Name)
                and n.value.id == name.id
                and n.lineno > start
            ),
            key=lambda n: (n.lineno, n.col_offset),
        ):
            if _rebound_between(s, scope, name.id, start, n.lineno):
                continue
            if n.attr == "state_dict" and _saved(s, n):
                yield Hit.at(
                    "DDP-SAVE-WRAPPER",
                    n,
                    (
                        f"`{name.id}.state_dict()` of the model `accelerator.prepare` returned "
                        "is saved: on a multi-GPU run it is the DDP wrapper's, every key "
                        "starts with `module.` (accelerator.unwrap_model first)"
                    ),
                    model=name.id,
                )
            elif (
                n.attr not in said
                and n.lineno not in bypassed
                and not n.attr.startswith("_")
                and n.attr not in _WRAPPER_API
                and not _mode_branch(s, n)
            ):
                said.add(n.attr)
                yield _prepared_attr(n, name.id, prep)
        helpers: dict[ast.AST, ast.Attribute] = {}  # the first read in each helper
        for n, p in _passed_reads(s, scope, name.id, start):
            fn = s.scope_of(n)
            if (
                fn not in helpers
                and not n.attr.startswith("_")
                and n.attr not in _WRAPPER_API
                and not _mode_branch(s, n)
            ):
                helpers[fn] = n
                yield _prepared_attr(n, p, prep)


def _prepared_bypass(s: Script, scope: Scope, name: str, start: int) -> list[Hit]:
    """The prepared model never run through its forward (no `agent(x)`, never handed to
    another call), while a method of it computes the loss (`agent.get_action_and_value(b)`
    then `accelerator.backward(loss)`): DDP's reducer never sees these gradients (cleanrl
    ppo_atari_accelerate.py before 6d61b99)."""
    calls = [n for n in own_nodes(scope) if isinstance(n, ast.Call) and n.lineno > start]
    for c in calls:
        fn = c.func
        if (isinstance(fn, ast.Name) and fn.id == name) or (
            isinstance(fn, ast.Attribute) and fn.attr == "forward" and ident(fn.value) == name
        ):
            return []
        if any(
            isinstance(a, ast.Name) and a.id == name
            for a in [*c.args, *(k.value for k in c.keywords)]
        ):
            return []  # handed on: the callee may run it
    for c in calls:
        fn = c.func
        if (
            isinstance(fn, ast.Attribute)
            and isinstance(fn.value, ast.Name)
            and fn.value.id == name
            and not fn.attr.startswith("_")
            and fn.attr not in _WRAPPER_API
            and not _rebound_between(s, scope, name, start, c.lineno)
            and not _without_grad(s, c)
            and _feeds_backward(s, c)
        ):
            return [_bypass(c, f"accelerator.prepare's DDP wrapper `{name}`", name)]
    return []


def _prepared_attr(n: ast.Attribute, held: str, prep: ast.Call) -> Hit:
    return Hit.at(
        "DDP-WRAPPER-ATTR",
        n,
        (
            f"`{ast.unparse(n)}` reads `{n.attr}` from `{held}`, the model "
            f"`accelerator.prepare` (line {prep.lineno}) returns in DDP on a multi-GPU run: "
            f"use `accelerator.unwrap_model({held}).{n.attr}`"
        ),
        model=held,
        attr=n.attr,
    )


def _passed_reads(
    s: Script, scope: Scope, name: str, start: int, depth: int = 0
) -> Iterator[tuple[ast.Attribute, str]]:
    """`validate(loader, model)` after prepare, then `model.generate(...)` inside:
    attribute reads on the prepared model in the project helpers it is handed to
    (three calls deep at most), with the parameter's name."""
    if depth > 2:
        return
    for c in own_nodes(scope):
        if not (isinstance(c, ast.Call) and c.lineno > start):
            continue
        for i, a in enumerate(c.args):
            if not (isinstance(a, ast.Name) and a.id == name):
                continue
            for fn in s.callees(c):
                if not isinstance(fn, ast.FunctionDef):
                    continue
                params = [p.arg for p in fn.args.posonlyargs + fn.args.args]
                if params[:1] in (["self"], ["cls"]) and s.class_of(fn) is not None:
                    params = params[1:]
                if i >= len(params) or s.assigned(fn, params[i]) or _tells_wrapper(fn, params[i]):
                    continue
                p = params[i]
                for n in own_nodes(fn):
                    if (
                        isinstance(n, ast.Attribute)
                        and isinstance(n.ctx, ast.Load)
                        and isinstance(n.value, ast.Name)
                        and n.value.id == p
                    ):
                        yield n, p
                yield from _passed_reads(s, fn, p, 0, depth + 1)


def _saved(s: Script, n: ast.Attribute) -> bool:
    """`torch.save(model.state_dict(), p)`, `accelerator.save(model.state_dict(), p)`."""
    call = s.parents.get(n)
    outer = s.parents.get(call) if isinstance(call, ast.Call) else None
    return isinstance(outer, ast.Call) and ident(outer.func) == "save"


RULES: Final = (syncbn_after_optimizer, forward_bypass, prepared_wrapper)
