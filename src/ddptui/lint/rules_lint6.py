"""Pitfalls that depend on configuration values and on the project's helpers: a seed
set only when an option is given, find_unused_parameters on by a default that travels
through a task's attribute into a wrapping helper, no_sync() entered around backward
while the DDP forward of the same micro-batch ran outside it."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.lint19 import counted_steps
from ddptui.lint.model import Hit
from ddptui.lint.nodes import calls_in
from ddptui.lint.project import FuncNode
from ddptui.lint.rules_sync import SyncFlow
from ddptui.lint.script import Script
from ddptui.lint.syntax import const, kwarg, last

# Seeding helpers of the frameworks (mmcv/mmengine, accelerate, lightning, transformers)
_SEED_HELPERS: Final = re.compile(
    r"^(set_random_seed|set_seed|seed_everything|init_random_seed|setup_seed|fix_seed|seed_all"
    r"|manual_seed|manual_seed_all)$"
)
_GLOBAL_SEEDS: Final = frozenset({"random.seed", "numpy.random.seed", "np.random.seed"})
_STARTS: Final = frozenset(
    {"init_dist", "init_distributed", "init_distributed_mode", "init_process_group"}
)
_MAX_DEFAULT_DEPTH: Final = 6


def _seeds(s: Script, c: ast.Call) -> bool:
    qn = s.call_name(c)
    return qn in _GLOBAL_SEEDS or bool(_SEED_HELPERS.match(last(qn)))


def _seed_option(test: ast.expr) -> str | None:
    """`args.seed is not None`, `args.seed`, `opts.seed != None`: the option's name (`seed`)
    when the test only asks whether a seed was given."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        other = test.comparators[0]
        if (
            isinstance(test.ops[0], ast.IsNot | ast.NotEq)
            and isinstance(other, ast.Constant)
            and other.value is None
        ):
            test = test.left
    if isinstance(test, ast.Attribute) and "seed" in test.attr.lower():
        return test.attr
    if isinstance(test, ast.Name) and "seed" in test.id.lower():
        return test.id
    return None


def _option_default_none(s: Script, name: str) -> bool:
    """`parser.add_argument('--seed', type=int)` or `default=None` (also `click.option`):
    the seed is only set when the user passes it."""
    for c in s.entry.nodes:
        if not isinstance(c, ast.Call) or last(s.call_name(c)) not in ("add_argument", "option"):
            continue
        flags = [const(a) for a in c.args]
        dest = const(kwarg(c, "dest"))
        if f"--{name}" not in flags and f"--{name.replace('_', '-')}" not in flags and dest != name:
            continue
        default = kwarg(c, "default")
        return default is None or (isinstance(default, ast.Constant) and default.value is None)
    return False


def _seed_broadcast(s: Script, f: Flow) -> bool:
    return any(
        (f.collective(c) or "").endswith("broadcast") and "seed" in ast.unparse(c).lower()
        for c in s.calls
    )


def _seed_passed_on(s: Script, guard: ast.If) -> bool:
    """The option is read outside the `if` too (`cfg.seed = args.seed`, `meta['seed'] =
    args.seed`, a loader builder's `seed=`): the project expects a seed and hands None on
    when there is none. A script that reads it only to seed (pytorch/examples' imagenet:
    seeding is an opt-in for reproducibility) is left alone."""
    inside = set(ast.walk(guard))
    text = ast.unparse(_seed_value(guard.test))
    return any(
        isinstance(n, ast.Attribute | ast.Name)
        and isinstance(n.ctx, ast.Load)
        and n not in inside
        and ast.unparse(n) == text
        for n in s.entry.nodes
    )


def _seed_value(test: ast.expr) -> ast.expr:
    if isinstance(test, ast.Compare):
        return test.left
    return test


def conditional_seed(s: Script, f: Flow) -> Iterator[Hit]:
    """The entry seeds only under `if args.seed is not None:` and the option defaults to
    None: a plain launch sets no common seed (mmdetection#6339, mmflow#27, mmpose#1030
    added a seed drawn on rank 0 and broadcast)."""
    starts = any(last(s.call_name(c)) in _STARTS for c in s.calls)
    if not (f.distributed or starts):
        return
    seeds = [c for c in s.entry.nodes if isinstance(c, ast.Call) and _seeds(s, c)]
    if not seeds:
        return
    guards: list[tuple[ast.If, str]] = []
    for c in seeds:
        guard = next((a for a in s.ancestors(c) if isinstance(a, ast.If)), None)
        option = _seed_option(guard.test) if guard is not None else None
        if guard is None or option is None or guard.orelse:
            return  # a seed set on every path
        if not any(c in set(ast.walk(n)) for n in guard.body):
            return
        guards.append((guard, option))
    guard, option = guards[0]
    if not _option_default_none(s, option):
        return
    if _seed_broadcast(s, f) or not _seed_passed_on(s, guard):
        return
    yield Hit.at(
        "DDP-SEED",
        guard,
        (
            f"the seed is set only when `{ast.unparse(guard.test)}` and --{option} has no "
            "default: a plain launch seeds nothing, and every rank builds and draws from its "
            "own random state"
        ),
        model="the model",
    )


# --- find_unused_parameters on by default ------------------------------------------------


def _param_default(s: Script, name: ast.Name) -> list[ast.expr]:
    scope = s.scope_of(name)
    if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        return []
    a = scope.args
    pos = a.posonlyargs + a.args
    out: list[ast.expr] = []
    for arg, default in zip(pos[len(pos) - len(a.defaults) :], a.defaults, strict=True):
        if arg.arg == name.id:
            out.append(default)
    for arg, kdefault in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        if arg.arg == name.id and kdefault is not None:
            out.append(kdefault)
    return out


def _literal_values(s: Script, expr: ast.expr, depth: int = 0) -> list[object]:
    """The literal values an expression may take: constants among its origins, the
    defaults of the parameters it comes through, `cfg.get(key, default)` defaults.
    An origin that is neither adds `...` (unknown)."""
    if depth > _MAX_DEFAULT_DEPTH:
        return [...]
    out: list[object] = []
    for o in s.origins(expr):
        if isinstance(o, ast.Constant):
            out.append(o.value)
        elif isinstance(o, ast.Name) and (defaults := _param_default(s, o)):
            out += [v for d in defaults for v in _literal_values(s, d, depth + 1)]
        elif (
            isinstance(o, ast.Call)
            and isinstance(o.func, ast.Attribute)
            and o.func.attr == "get"
            and len(o.args) == 2
        ):
            out += _literal_values(s, o.args[1], depth + 1)
        elif isinstance(o, ast.Call | ast.Name | ast.Attribute | ast.Subscript):
            out.append(...)
    return out


def _outer_site(
    s: Script, call: ast.Call, value: ast.expr, depth: int = 0
) -> tuple[ast.AST, ast.expr]:
    """Where the flag's value enters: a DDP call inside a helper that receives the flag
    as a parameter is said at the helper's first call site that passes it (the
    project's own line), with the value passed there."""
    scope = s.scope_of(call)
    if (
        depth > 3
        or not isinstance(value, ast.Name)
        or not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef)
    ):
        return call, value
    for site in s.call_sites(scope):
        passed = kwarg(site, value.id)
        if passed is not None:
            return _outer_site(s, site, passed, depth + 1)
    return call, value


def find_unused_default(s: Script, f: Flow) -> Iterator[Hit]:
    """`DDP(..., find_unused_parameters=flag)` where every literal the flag can come from
    is True (a parameter default, a config `.get(..., True)`, an attribute set in
    `__init__`), the literal at the DDP call itself being left to DDP-FIND-UNUSED's own
    rule: DDP walks the autograd graph after every forward for models that use every
    parameter (ClassyVision 6f8fe8e)."""
    for call in f.ddp_calls:
        flag = kwarg(call, "find_unused_parameters")
        if flag is None or isinstance(flag, ast.Constant):
            continue
        values = _literal_values(s, flag)
        if True not in values or any(v is not True and v is not ... for v in values):
            continue
        if ... in values and not any(
            isinstance(o, ast.Name) and _param_default(s, o) for o in s.origins(flag)
        ):
            continue  # unknown sources and no default to speak of
        at, passed = _outer_site(s, call, flag)
        yield Hit.at(
            "DDP-FIND-UNUSED",
            at,
            (
                f"find_unused_parameters is True by default here (`{ast.unparse(passed)}`): DDP "
                "walks the autograd graph after every forward and cannot start reducing "
                "early, for models that use every parameter"
            ),
        )
        return


# --- no_sync() around backward only -----------------------------------------------------


def _no_sync_receiver(s: Script, item: ast.expr) -> ast.expr | None:
    for o in [item, *s.origins(item)]:
        if (
            isinstance(o, ast.Call)
            and isinstance(o.func, ast.Attribute)
            and o.func.attr == "no_sync"
        ):
            return o.func.value
    return None


_MODEL_CALL: Final = re.compile(r"(^|\.)(\w*model|net|network|module|ddp\w*)$", re.I)


def _forward_like(s: Script, f: Flow, c: ast.Call, receiver: str) -> bool:
    func = ast.unparse(c.func)
    return (
        func == receiver
        or bool(_MODEL_CALL.search(func))
        or (isinstance(c.func, ast.Name | ast.Attribute) and f.is_wrapped_value(c.func))
    )


def _forward_before(
    s: Script, f: Flow, scope: ast.AST, before: int, receiver: str
) -> ast.Call | None:
    found = None  # the last forward before the `with` (not the wrap itself)
    for c in calls_in(getattr(scope, "body", [])):
        if c.lineno >= before:
            break
        if c not in f.wrapper_calls and _forward_like(s, f, c, receiver):
            found = c
    return found


def no_sync_scope(s: Script, f: Flow) -> Iterator[Hit]:
    """`with model.no_sync():` (or a context chosen between it and a null context) holds
    the backward but not the forward: DDP prepares its reduction in forward, so the
    micro-batches still all-reduce (ClassyVision 74e387b)."""
    if not f.wrapper_calls:
        return
    for w in [n for n in s.nodes if isinstance(n, ast.With | ast.AsyncWith)]:
        receivers = [r for it in w.items if (r := _no_sync_receiver(s, it.context_expr))]
        if not receivers:
            continue
        receiver = ast.unparse(receivers[0])
        body = calls_in(w.body)
        if not any(f.is_backward(c) for c in body) or any(
            _forward_like(s, f, c, receiver) for c in body
        ):
            continue
        scope = s.scope_of(w)
        forward = _forward_before(s, f, scope, w.lineno, receiver)
        if forward is None and isinstance(scope, FuncNode):
            for site in s.call_sites(scope):
                forward = _forward_before(s, f, s.scope_of(site), site.lineno, receiver)
                if forward is not None:
                    break
        if forward is None:
            continue
        yield Hit.at(
            "DDP-NO-SYNC",
            forward,
            (
                f"the forward `{ast.unparse(forward)}` runs outside `{receiver}.no_sync()` "
                f"(line {w.lineno}), which holds only the backward: DDP prepares the "
                "reduction in forward, so every micro-batch still all-reduces"
            ),
            model=receiver,
        )
        return


# --- a rank-local non-finite loss leaves the loop ---------------------------------------

_NONFINITE: Final = frozenset({"isnan", "isinf", "isfinite"})
_REDUCED: Final = re.compile(r"reduce|gather|all_|sync", re.I)


def _object_trains(s: Script, f: Flow, call: ast.Call) -> bool:
    """`box.update_params(loss)` / `box(x)` where `box` (a parameter included) is an
    object of a project class whose method runs backward or waits for the other ranks."""
    func = call.func
    recv, name = (func.value, func.attr) if isinstance(func, ast.Attribute) else (func, "forward")
    for o in s.origins(recv, params=True):
        if not isinstance(o, ast.Call):
            continue
        cls = s.class_named(o.func)
        if cls is None:
            continue
        methods = s._methods(cls, name) or (
            s._methods(cls, "__call__") if name == "forward" else []
        )
        if any(f.has_backward(m) or f.function_sync(m) for m in methods):
            return True
    return False


def _loop_syncs(s: Script, f: Flow, loop: ast.For | ast.AsyncFor | ast.While) -> bool:
    body = calls_in(loop.body)
    if f.stmts_sync(loop.body) or any(f.is_backward(c) for c in body):
        return True
    return any(_object_trains(s, f, c) for c in body)


_PASS_ON: Final = frozenset({"sum", "float", "int", "abs", "stack", "cat", "mean"})


def _carriers(s: Script, o: ast.expr) -> list[ast.expr]:
    """What a value is computed from, for the reduction search: a method's receiver
    (`losses.item()`), the names inside `sum(...)`/`float(...)`/`torch.stack(...)`, the
    operands of arithmetic; not the arguments of a model or helper call."""
    if isinstance(o, ast.Call):
        if isinstance(o.func, ast.Attribute) and last(s.call_name(o)) not in _PASS_ON:
            return [o.func.value]
        if last(s.call_name(o)) in _PASS_ON:
            return [n for a in o.args for n in ast.walk(a) if isinstance(n, ast.Name)]
        return []
    if isinstance(o, ast.BinOp):
        return [o.left, o.right]
    return []


def _reduced(s: Script, value: ast.expr, loop: ast.AST, test: ast.If) -> bool:
    """The tested value comes from a reduction over the ranks (`reduce_dict(...)`,
    `dist.all_reduce(loss)` before the test, `accelerator.gather(...)`), a few steps back."""
    text = ast.unparse(value)
    for c in calls_in([loop]):
        if (
            c.lineno < test.lineno
            and _REDUCED.search(s.call_name(c) or ast.unparse(c.func))
            and any(ast.unparse(a) == text for a in c.args)
        ):
            return True  # reduced in place before the test
    frontier: list[ast.expr] = [value]
    seen: set[ast.AST] = set()
    for _ in range(3):
        nxt: list[ast.expr] = []
        for e in frontier:
            for o in s.origins(e):
                if o in seen:
                    continue
                seen.add(o)
                if isinstance(o, ast.Call) and (
                    _REDUCED.search(s.call_name(o)) or _REDUCED.search(ast.unparse(o.func))
                ):
                    return True
                nxt += _carriers(s, o)
        frontier = nxt[:40]
    return False


def _syncs_after(s: Script, f: Flow, loop: ast.AST, node: ast.If) -> bool:
    """A backward or a wait for the other ranks later in the same iteration."""
    end = node.end_lineno or node.lineno
    later = [c for c in calls_in(getattr(loop, "body", [])) if c.lineno > end]
    return any(f.is_backward(c) or f.call_sync(c) or _object_trains(s, f, c) for c in later)


def _nonfinite_name(s: Script, test: ast.expr) -> ast.expr | None:
    for n in ast.walk(test):
        if (
            isinstance(n, ast.Call)
            and last(s.call_name(n)) in _NONFINITE
            and n.args
            and isinstance(n.args[0], ast.Name | ast.Attribute)
        ):
            return n.args[0]
    return None


def _steps_pair_up(s: Script, node: ast.If, loop: ast.AST) -> bool:
    return counted_steps(s, node, loop) and not SyncFlow(s).buffers


def nonfinite_break(s: Script, f: Flow) -> Iterator[Hit]:
    """`if torch.isnan(loss): break` on the rank's own loss in a data-parallel training
    loop: that rank leaves while the others go on to the next forward/backward and wait
    for it in the gradient all-reduce (torchdistill 14d2318)."""
    if not f.wrapper_calls:
        return
    for node in s.nodes:
        if not isinstance(node, ast.If):
            continue
        value = _nonfinite_name(s, node.test)
        exits = [st for st in node.body if isinstance(st, ast.Break | ast.Continue | ast.Return)]
        if value is None or not exits:
            continue
        loop = next(
            (a for a in s.ancestors(node) if isinstance(a, ast.For | ast.AsyncFor | ast.While)),
            None,
        )
        if loop is None or s.scope_of(loop) is not s.scope_of(node):
            continue
        computed = [o for o in s.origins(value) if isinstance(o, ast.Call)]
        if not computed or _reduced(s, value, loop, node):
            continue  # a value reduced over the ranks is the same on all of them
        if not _loop_syncs(s, f, loop):
            continue
        if isinstance(exits[0], ast.Continue) and not _syncs_after(s, f, loop, node):
            continue  # `continue` after the backward: this iteration's sync already ran
        if isinstance(exits[0], ast.Continue) and _steps_pair_up(s, node, loop):
            continue  # the run's bound counts completed steps (gmflow main.py)
        kind = type(exits[0]).__name__.lower()
        yield Hit.at(
            "DDP-RANK-DIVERGENCE",
            exits[0],
            (
                f"`{kind}` when this rank's `{ast.unparse(value)}` is not finite "
                f"(`{ast.unparse(node.test)}`, line {node.lineno}): only this rank leaves; the "
                "others go on and wait for it in the next gradient all-reduce"
            ),
            condition=ast.unparse(node.test),
            collective="the gradient all-reduce of the next backward",
        )


# --- a head's output left out of the loss ------------------------------------------------


def _flag_given(call: ast.Call) -> bool:
    return any(
        k.arg is None  # `**ddp_args` may carry it
        or (k.arg in ("find_unused_parameters", "static_graph") and const(k.value) is not False)
        for k in call.keywords
    )


def _dropped_logits(s: Script, cls: ast.ClassDef) -> tuple[ast.Name, ast.Call] | None:
    """`lm_logits, mc_logits, *_ = self.gpt2_model(...)` in forward and `mc_logits`
    never read: the head that computes it gets no gradient on any step."""
    for fwd in s._methods(cls, "forward"):
        loads = {
            n.id for n in ast.walk(fwd) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        }
        for node in ast.walk(fwd):
            if not (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Tuple)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute)
                and isinstance(node.value.func.value, ast.Name)
                and node.value.func.value.id == "self"
            ):
                continue
            for elt in node.targets[0].elts:
                if (
                    isinstance(elt, ast.Name)
                    and not elt.id.startswith("_")
                    and "logits" in elt.id
                    and elt.id not in loads
                ):
                    return elt, node.value
    return None


def dropped_head_output(s: Script, f: Flow) -> Iterator[Hit]:
    """DDP without find_unused_parameters around a model whose forward unpacks a
    submodule's outputs and never reads one of its logits (compac#6: GPT2DoubleHeadsModel
    whose multiple-choice loss was commented out): that head's parameters never get a
    gradient and DDP stops at the second step."""
    for call in f.ddp_calls:
        if not call.args or _flag_given(call):
            continue
        for o in s.origins(call.args[0]):
            cls = s.class_named(o.func) if isinstance(o, ast.Call) else None
            found = _dropped_logits(s, cls) if cls is not None else None
            if cls is None or found is None:
                continue
            name, sub = found
            yield Hit.at(
                "DDP-FIND-UNUSED",
                s.entry_anchor(call),
                (
                    f"DDP wraps `{cls.name}` without find_unused_parameters, but its forward "
                    f"never reads `{name.id}` of `{ast.unparse(sub.func)}(...)` "
                    f"({s.path_of(name)}:{name.lineno}): the head that computes it gets no "
                    "gradient, and DDP waits for it"
                ),
            )
            return


RULES = (conditional_seed, find_unused_default, no_sync_scope, nonfinite_break, dropped_head_output)
