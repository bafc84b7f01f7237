"""DDP-NOT-APPLIED where a trainer keeps the model inside the wrapper, from a miss of blind
batch AI1 (NCAR/miles-credit, credit/trainers/base_trainer.py before PR #153): the caller
wraps the model in DDP and builds `trainer_cls(model, rank, module=(mode == "ddp"))`, and
`BaseTrainer.__init__` stores `self.model = model.module if module else model`. Every
forward and backward then runs on the bare model: no gradient is all-reduced, and the
ranks train replicas that drift apart without an error.

The reading: a method stores `self.X = P.module` (or `P.module if flag else P`) for a
parameter P; a call of the class (or of that method) passes for P a value that holds a DDP
wrapper, and, for the conditional form, a flag that is not the constant False; the class
calls `self.X(...)` and runs a backward pass. An unwrapped copy kept for saving, EMA or
evaluation (not called, or in a class with no backward) stays silent."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TypeGuard

from ddptui.lint.families import family
from ddptui.lint.flagoff import arg_for
from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.script import Script
from ddptui.lint.syntax import const

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _unwrap_of(value: ast.expr, params: list[str]) -> tuple[str, ast.expr | None] | None:
    """(P, flag) for `P.module` (flag None) or `P.module if flag else P`."""
    if (
        isinstance(value, ast.Attribute)
        and value.attr == "module"
        and isinstance(value.value, ast.Name)
        and value.value.id in params
    ):
        return value.value.id, None
    if isinstance(value, ast.IfExp):
        inner = _unwrap_of(value.body, params)
        if inner is not None and isinstance(value.orelse, ast.Name) and value.orelse.id == inner[0]:
            return inner[0], value.test
    return None


def unwrapped_trainer(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.ddp_calls:
        return
    # the classes that store a `.module` on self: the only ones worth the family walk
    keeping = {
        cls: None
        for n in s.nodes
        if isinstance(n, ast.Assign)
        and len(n.targets) == 1
        and isinstance(n.targets[0], ast.Attribute)
        and isinstance(n.value, ast.Attribute | ast.IfExp)
        and any(isinstance(x, ast.Attribute) and x.attr == "module" for x in ast.walk(n.value))
        and (cls := s.class_of(n)) is not None
    }
    for cls in keeping:
        methods = [m for m in cls.body if isinstance(m, _FUNCS)]
        fam = [m for c in family(s, cls) for m in c.body if isinstance(m, _FUNCS)]
        # `self.X(...)` called in a method that runs a backward pass (a subclass's train
        # step too): an unwrapped copy called only to evaluate or export is no pitfall
        calls = {
            n.func.attr
            for m in fam
            if f.has_backward(m)
            for n in ast.walk(m)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id == "self"
        }
        if not calls:
            continue
        for m in methods:
            params = [a.arg for a in m.args.args[1:]]
            for st in ast.walk(m):
                if not (isinstance(st, ast.Assign) and len(st.targets) == 1):
                    continue
                tgt = st.targets[0]
                if not (
                    isinstance(tgt, ast.Attribute)
                    and isinstance(tgt.value, ast.Name)
                    and tgt.value.id == "self"
                    and tgt.attr in calls
                ):
                    continue
                found = _unwrap_of(st.value, params)
                if found is None:
                    continue
                param, flag = found
                site = _wrapped_site(s, f, m, param, flag)
                if site is None:
                    continue
                yield Hit.at(
                    "DDP-NOT-APPLIED",
                    st,
                    (
                        f"`{ast.unparse(st)}` keeps the model inside the DDP wrapper that "
                        f"{s.path_of(site)}:{site.lineno} passes, and the class trains "
                        f"`self.{tgt.attr}`: no gradient is all-reduced"
                    ),
                    also=((site, "the wrapper is passed at"),),
                    why=(
                        f"The trainer stores `{ast.unparse(st.value)}`: the model inside the "
                        f"wrapper, whose forward and backward never reach DDP's reducer."
                    ),
                )


def _wrapped_site(
    s: Script, f: Flow, m: ast.FunctionDef | ast.AsyncFunctionDef, param: str, flag: ast.expr | None
) -> ast.Call | None:
    """A call of the method (or of its class, for `__init__`) passing a DDP wrapper for
    `param`, and for `flag` (a parameter) anything but False."""
    for site in [*s.call_sites(m), *_unresolved_lookalikes(s, m, flag)]:
        defaults = [*m.args.defaults, *m.args.kw_defaults]
        arg = arg_for(s, site, m, param)
        if not _passed(arg, defaults) or not _holds_ddp(s, f, arg):
            continue
        if isinstance(flag, ast.Name):
            given = arg_for(s, site, m, flag.id)
            if not _passed(given, defaults) or const(given) is False:
                continue
        return site
    return None


def _passed(value: object, defaults: list[ast.expr | None]) -> TypeGuard[ast.expr]:
    """The call site gives this argument itself: not left to the parameter's default, not
    hidden in `*args`/`**kwargs`."""
    return isinstance(value, ast.expr) and not any(value is d for d in defaults)


def _holds_ddp(s: Script, f: Flow, arg: ast.expr) -> bool:
    """`arg` holds a DDP wrapper: made by a DDP call, or returned by a project function that
    makes one (`model = distributed_model_wrapper(conf, m, device)`)."""
    ddp = set(f.ddp_calls)
    for o in [arg, *s.origins(arg)]:
        if o in ddp:
            return True
        if isinstance(o, ast.Call) and any(n in ddp for fn in s.callees(o) for n in ast.walk(fn)):
            return True
    return False


def _unresolved_lookalikes(
    s: Script, m: ast.FunctionDef | ast.AsyncFunctionDef, flag: ast.expr | None
) -> list[ast.Call]:
    """For an `__init__` reached through a registry (`trainer_cls = load_trainer(conf)`,
    then `trainer_cls(model, rank, module=...)`): calls that resolve to nothing and pass the
    flag by its keyword, every keyword a parameter of the method."""
    if m.name != "__init__" or not isinstance(flag, ast.Name):
        return []
    names = {a.arg for a in [*m.args.args, *m.args.kwonlyargs]}
    return [
        c
        for c in s.calls
        if not s.callees(c)
        and any(k.arg == flag.id for k in c.keywords)
        and all(k.arg in names for k in c.keywords)
    ]


def _unwrapper(s: Script, call: ast.Call) -> bool:
    """A project function whose every path hands back its first parameter's `.module` or
    the parameter itself (`get_model_or_module(model)`: `return model.module` when
    wrapped, else `return model`), with at least one `.module`."""
    for fn in s.callees(call):
        if not fn.args.args:
            continue
        first = fn.args.args[0].arg
        rets = [r.value for r in own_nodes(fn) if isinstance(r, ast.Return) and r.value is not None]
        unwrapped = [r for r in rets if _unwrap_of(r, [first]) is not None]
        if unwrapped and all(
            r in unwrapped or (isinstance(r, ast.Name) and r.id == first) for r in rets
        ):
            return True
    return False


def _trains(
    s: Script, f: Flow, fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str, after: int
) -> ast.Call | None:
    """Where `fn` trains the model held by `name` after line `after` (the unwrapping): calls
    it in a function that runs a backward pass, or hands it to a project function that
    does.  Training before the unwrapping (a bare module taken out to save) is the
    wrapper's."""
    for c in own_nodes(fn):
        if not isinstance(c, ast.Call) or c.lineno <= after:
            continue
        if isinstance(c.func, ast.Name) and c.func.id == name and f.has_backward(fn):
            return c
        passed = any(isinstance(a, ast.Name) and a.id == name for a in c.args)
        if passed and any(f.has_backward(g) for g in s.callees(c)):
            return c
    return None


def unwrapped_in_function(s: Script, f: Flow) -> Iterator[Hit]:
    """Round 18 (blind AM1, ORNL/HydraGNN before PR #136): a function takes the model, rebinds
    it to the model inside the wrapper (`model = get_model_or_module(model)`, `model =
    model.module`), then trains it (`train(loader, model, optimizer)`), while a caller passes
    it a DDP wrapper: every step runs on the bare module, no gradient is all-reduced."""
    if not f.ddp_calls:
        return
    for fn in [n for n in s.nodes if isinstance(n, _FUNCS)]:
        params = [a.arg for a in fn.args.args]
        for st in own_nodes(fn):
            if not (
                isinstance(st, ast.Assign)
                and len(st.targets) == 1
                and isinstance(st.targets[0], ast.Name)
                and st.targets[0].id in params
            ):
                continue
            name, v = st.targets[0].id, st.value
            direct = _unwrap_of(v, params)
            if direct is not None:
                param, flag = direct
            elif (
                isinstance(v, ast.Call)
                and v.args
                and isinstance(v.args[0], ast.Name)
                and v.args[0].id == name
                and _unwrapper(s, v)
            ):
                param, flag = name, None
            else:
                continue
            if param != name:
                continue
            trained = _trains(s, f, fn, name, st.lineno)
            site = _wrapped_site(s, f, fn, param, flag) if trained is not None else None
            if trained is None or site is None:
                continue
            yield Hit.at(
                "DDP-NOT-APPLIED",
                st,
                (
                    f"`{ast.unparse(st)}` takes the model out of the DDP wrapper that "
                    f"{s.path_of(site)}:{site.lineno} passes, and `{ast.unparse(trained)[:60]}` "
                    f"(line {trained.lineno}) trains it: no gradient is all-reduced"
                ),
                also=((site, "the wrapper is passed at"),),
                why=(
                    f"`{ast.unparse(st.value)}` is the model inside the wrapper, whose forward "
                    "and backward never reach DDP's reducer."
                ),
            )
            break


RULES = (unwrapped_trainer, unwrapped_in_function)
