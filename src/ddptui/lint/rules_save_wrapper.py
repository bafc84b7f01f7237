"""The rule about saving the DDP wrapper's state_dict (pitfall 12): every key starts
with `module.`, so the plain model cannot load it. With the readings it needs (what a
saved value holds, a load made before the wrap, a helper handed the wrapper); out of
rules_io.py, whose file rules share none of them, to keep that module small."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddptui.lint.flow import Flow
from ddptui.lint.lint15 import rank_conjoined_else
from ddptui.lint.lint26_order import torch_call
from ddptui.lint.lint32 import other_branch_takes_module, plain_reload
from ddptui.lint.lint37 import in_memory_copy
from ddptui.lint.lint40 import dataparallel_only_test
from ddptui.lint.lint45 import plain_reader, resume_into_wrapper
from ddptui.lint.model import Hit
from ddptui.lint.reach import walked
from ddptui.lint.script import Script


def _unwrapped(s: Script, expr: ast.expr) -> bool:
    return any(
        isinstance(o, ast.Attribute) and o.attr == "module" for o in [expr, *s.origins(expr)]
    )


def _state_dict_receivers(
    s: Script, expr: ast.expr, depth: int = 0, seen: set[ast.AST] | None = None
) -> list[ast.expr]:
    """The modules whose `.state_dict()` makes up a saved value: directly, through names
    (`state = model.state_dict()`), dicts filled later (`ckpt["model"] = ...`,
    `ckpt.update(model=...)`) and helpers' parameters."""
    seen = set() if seen is None else seen
    out: list[ast.expr] = []
    sources = list(s.origins(expr))
    if isinstance(expr, ast.Name):
        sources += _filled_in(s, expr)
        scope = s.scope_of(expr)
        if depth < 3 and isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            for arg in s.param_args(scope, expr.id):  # a dict filled by the caller
                if isinstance(arg, ast.Name):
                    out += _state_dict_receivers(s, arg, depth + 1, seen)
    for o in sources:
        if o in seen:
            continue
        seen.add(o)
        for n in ast.walk(o):
            if (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr == "state_dict"
            ):
                out.append(n.func.value)
            elif isinstance(n, ast.Name) and n is not o and depth < 3:
                out += _state_dict_receivers(s, n, depth + 1, seen)
    return out


def _filled_in(s: Script, name: ast.Name) -> list[ast.expr]:
    """Values put into the dict `name` after it was made, in its function."""
    out: list[ast.expr] = []
    for n in walked(s, s.scope_of(name)):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Subscript) and ast.unparse(t.value) == name.id:
                    out.append(n.value)
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "update"
            and ast.unparse(n.func.value) == name.id
        ):
            out += [*n.args, *(k.value for k in n.keywords)]
    return out


def save_wrapper(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.ddp_calls:
        return
    # loading back into the wrapper is consistent: nothing to say, unless a plain model
    # elsewhere reads the same file (lint32.plain_reload)
    loads = [
        c
        for c in s.calls
        if isinstance(c.func, ast.Attribute)
        and c.func.attr == "load_state_dict"
        and f.is_ddp_value(c.func.value)
        and not _unwrapped(s, c.func.value)
        and not _before_wrapping(s, f, c)
        and not _prefix_juggling(s, c)
        and not in_memory_copy(s, c)
    ]
    # ... unless the project's own stand-alone scripts read the weights into the plain
    # model (lint45): then the saves and this resume both want the plain model's keys
    reader = plain_reader(s, f) if loads else None
    consistent = bool(loads) and reader is None
    said = False
    for c in s.calls:
        if not torch_call(s, c, "save") or not c.args or (consistent and not plain_reload(s, f, c)):
            continue
        saved = c.args[0]
        whole = _whole_wrapper(s, f, saved)
        if whole is not None:
            yield whole
            said = True
            continue
        for recv in _state_dict_receivers(s, saved):
            if _wrapper_as_saved(s, f, recv) and (
                not other_branch_takes_module(s, recv)
                or rank_conjoined_else(s, f, recv)
                or dataparallel_only_test(s, recv) is not None
            ):
                # said at the `.state_dict()` call, where `.module` belongs (the save
                # may be lines below, through a dict or a name), unless a helper's
                # parameter: then where the caller hands the wrapper over
                call = s.parents.get(recv, c)
                at = c if _given(s, recv) and not _held(s, call) else call
                dp_test = [t for t in [dataparallel_only_test(s, recv)] if t is not None]
                yield Hit.at(
                    "DDP-SAVE-WRAPPER",
                    at,
                    (
                        f"`{ast.unparse(recv)}.state_dict()` of the DDP wrapper is saved: every key "
                        "starts with `module.`"
                    ),
                    also=tuple((t, "unwraps nn.DataParallel only at") for t in dp_test),
                    model=ast.unparse(recv),
                )
                said = True
                break
    if said and reader is not None:
        yield from resume_into_wrapper(reader, loads)


def _wrapper_as_saved(s: Script, f: Flow, expr: ast.expr) -> bool:
    """`expr` (a module whose state_dict is saved, or the object saved) holds the DDP
    wrapper as it is: not its `.module`, not a helper's parameter that callers fill before
    the wrap."""
    return (
        f.is_ddp_value(expr)
        and not _unwrapped(s, expr)
        and not (_given(s, expr) and called_before_wrap(s, f, s.scope_of(expr)))
    )


def _whole_wrapper(s: Script, f: Flow, saved: ast.expr) -> Hit | None:
    """`torch.save(model, path)` of the wrapper object itself (round 18's blind AM1): it
    pickles DistributedDataParallel, whose unpickling asks for the default process group (a
    single-GPU or inference load fails) and whose module's keys start with `module.`."""
    if not (
        isinstance(saved, ast.Name | ast.Attribute)
        and _wrapper_as_saved(s, f, saved)
        and not other_branch_takes_module(s, saved)
    ):
        return None
    name = ast.unparse(saved)
    return Hit.at(
        "DDP-SAVE-WRAPPER",
        saved,
        (
            f"`torch.save({name}, ...)` pickles the DDP wrapper itself: loading it rebuilds a "
            "DistributedDataParallel, which needs an initialised process group (a single-GPU "
            "or inference load fails), and its weights sit under `module.`"
        ),
        model=name,
    )


def _given(s: Script, recv: ast.expr) -> bool:
    """The receiver is a helper's parameter (`serialize(model)` reads
    `model.state_dict()`): the caller chose to pass the wrapper, so the fix, and the
    finding, go where the save calls the helper."""
    scope = s.scope_of(recv)
    return (
        isinstance(recv, ast.Name)
        and isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef)
        and recv.id in {a.arg for a in scope.args.posonlyargs + scope.args.args}
        and not s.assigned(scope, recv.id)
    )


def _held(s: Script, call: ast.AST) -> bool:
    """`sd = model.state_dict()`: a name holds the weights alone (mozilla/TTS save_model),
    so `.module` goes on that line even when `model` is the helper's parameter."""
    stmt = s.parents.get(s.parents.get(call, call), None)
    return (
        isinstance(stmt, ast.Assign)
        and stmt.value is s.parents.get(call)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
    )


def _prefix_juggling(s: Script, load: ast.Call) -> bool:
    """The loading function adds or strips the `module.` prefix itself (pycls: "Either
    the checkpoint or the current model uses DistributedDataParallel"): the saved keys
    are a known nuisance, not a convention kept on both sides."""
    return any(
        isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("module")
        for n in ast.walk(s.scope_of(load))
    )


def _before_wrapping(s: Script, f: Flow, call: ast.Call) -> bool:
    """A load into the plain model before `model = DDP(model)` in the same function (a
    checkpoint to start from): it says nothing about the keys the saves write. Also a
    load in a helper (`load_checkpoint(model, ...)`) every caller of which calls it before
    its own `model = DDP(model)` (ethnhe/FFB6D train_ycb.py)."""
    scope = s.scope_of(call)
    if any(s.scope_of(d) is scope and d.lineno > call.lineno for d in f.ddp_calls):
        return True
    return called_before_wrap(s, f, scope)


def called_before_wrap(s: Script, f: Flow, scope: ast.AST) -> bool:
    """Every call of this helper comes before `model = DDP(model)` in its caller: what it
    is handed there is the plain model (hustvl/WeakTr's `sync_model(log_dir, model)`
    saves and loads before the wrap)."""
    sites = s.call_sites(scope) if isinstance(scope, ast.FunctionDef) else ()
    return bool(sites) and all(
        any(s.scope_of(d) is s.scope_of(c) and d.lineno > c.lineno for d in f.ddp_calls)
        for c in sites
    )


def snapshot_into_module(s: Script, f: Flow) -> Iterator[Hit]:
    """A copy of the wrapper's weights kept in memory and loaded back into the bare
    model: `best_state = copy.deepcopy(model.state_dict())` on the DDP wrapper, then
    `model.module.load_state_dict(best_state)` (ups' scripts/train.py, eight such
    snapshots): the keys start with `module.` and the model's do not, so the load fails
    (or, with strict=False, loads nothing) only when the run is distributed."""
    if not f.ddp_calls:
        return
    said: set[ast.AST] = set()
    for c in s.calls:
        if not (
            isinstance(c.func, ast.Attribute)
            and c.func.attr == "load_state_dict"
            and c.args
            and isinstance(c.args[0], ast.Name)
            and _unwrapped(s, c.func.value)
            and not _prefix_juggling(s, c)
        ):
            continue
        for recv in _state_dict_receivers(s, c.args[0]):
            call = s.parents.get(recv)
            if call is None or call in said or not _wrapper_as_saved(s, f, recv):
                continue
            said.add(call)
            yield Hit.at(
                "DDP-SAVE-WRAPPER",
                call,
                (
                    f"`{ast.unparse(recv)}.state_dict()` of the DDP wrapper is kept in "
                    f"`{c.args[0].id}` and loaded into `{ast.unparse(c.func.value)}` (line "
                    f"{c.lineno}), the bare model: every key starts with `module.`"
                ),
                model=ast.unparse(recv),
            )


RULES = (save_wrapper, snapshot_into_module)
