"""A model attribute read through the DDP wrapper where the evidence spans functions: in a
helper the wrapper is passed to (judged by what the argument holds at the call), and on
`self.model` holding the wrapper in another method of its class (DDP-WRAPPER-ATTR).
Split out of rules_reach.py; the same rule table runs it."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Final

from ddptui.lint.callers import dead_for_callers
from ddptui.lint.flow import Flow, ident
from ddptui.lint.lint19 import other_owner, set_on_value
from ddptui.lint.lint36 import unwrap_idiom
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.reach import cast_value
from ddptui.lint.rules_project import _WRAPPER_API, _checks_wrapper, test_text
from ddptui.lint.script import SELF_RETURNING, Pick, Script

# --- 2. an attribute of the model read on the wrapper, in a helper it is passed to ----


def wrapper_attr_passed(s: Script, f: Flow) -> Iterator[Hit]:
    """`train(loader, model, ...)` with `model = DDP(model)` at the caller, then
    `model.inference(...)` inside `train`: the wrapper has no `inference`."""
    if not f.ddp_calls:
        return
    ddp_scopes = {s.scope_of(c) for c in f.ddp_calls}
    for fn in dict.fromkeys(n for n in s.nodes if isinstance(n, ast.FunctionDef)):
        if fn in ddp_scopes:
            continue
        yield from _wrapper_reads(s, f, fn)


def _wrapper_reads(s: Script, f: Flow, fn: ast.FunctionDef) -> Iterator[Hit]:
    """Each statement that reads a model attribute on the wrapper (`generator.mapping(...)`
    in two branches, then `generator.synthesis(...)`: three places to unwrap)."""
    said: set[ast.AST] = set()
    for hit in _wrapper_read(s, f, fn):
        # once per statement: `package = {"version": model.version, "hidden_size": ...}`
        # is one place to unwrap, however many attributes it reads
        stmt = (
            next((a for a in s.ancestors(hit.node) if isinstance(a, ast.stmt)), hit.node)
            if hit.node is not None
            else None
        )
        if stmt is not None and stmt not in said:
            said.add(stmt)
            yield hit


def _wrapper_read(s: Script, f: Flow, fn: ast.FunctionDef) -> Iterator[Hit]:
    params = {a.arg for a in fn.args.args + fn.args.kwonlyargs} - {"self", "cls"}
    unpacked = _unpacked_params(s, fn, params)
    reads = sorted(
        (
            n
            for n in own_nodes(fn)
            if isinstance(n, ast.Attribute)
            and isinstance(n.ctx, ast.Load)
            and isinstance(n.value, ast.Name)
            and (n.value.id in params or n.value.id in unpacked)
            and not n.attr.startswith("_")
            and n.attr not in _WRAPPER_API
        ),
        key=lambda n: (n.lineno, n.col_offset),
    )
    checked: dict[str, bool] = {}
    for n in reads:
        name = n.value.id if isinstance(n.value, ast.Name) else ""
        if name not in checked:
            checked[name] = (
                any(_ddp_before(s, f, v) for v in unpacked[name])
                if name in unpacked
                else not s.assigned(fn, name)
                and any(_ddp_before(s, f, a) for a in s.param_args(fn, name))
            )
        if checked[name] and not (
            _tells_wrapper(fn, name, n.end_lineno or n.lineno)
            or _checks_wrapper(s, n)
            or _mode_branch(s, n)
            or dead_for_callers(s, fn, n)
            or _attr_elsewhere(s, f, s.param_args(fn, name), n.attr)
        ):
            yield Hit.at(
                "DDP-WRAPPER-ATTR",
                n,
                (
                    f"`{ast.unparse(n)}` reads `{n.attr}` from `{name}`, which a caller gives the "
                    f"DDP wrapper: it has none (the model is `{name}.module`)"
                ),
                model=name,
                attr=n.attr,
                via="parameter",  # lint22: the wrapper comes in through a caller
            )


def _unpacked_params(s: Script, fn: ast.FunctionDef, params: set[str]) -> dict[str, list[Pick]]:
    """Names given only by unpacking a parameter (`net_g, net_d = nets`)."""
    out: dict[str, list[Pick]] = {}
    for n in own_nodes(fn):
        if not (isinstance(n, ast.Assign) and isinstance(n.value, ast.Name)):
            continue
        if n.value.id not in params or len(n.targets) != 1:
            continue
        tgt = n.targets[0]
        if isinstance(tgt, ast.Tuple | ast.List):
            for elt in tgt.elts:
                if isinstance(elt, ast.Name) and elt.id not in params:
                    values = s.assigned(fn, elt.id)
                    if values and all(isinstance(v, Pick) for v in values):
                        out[elt.id] = [v for v in values if isinstance(v, Pick)]
    return out


_MODE_WORDS: Final = re.compile(
    r"module|isinstance|hasattr|parallel|distributed|ddp|deepspeed|fsdp|engine|world|dist\b"
    r"|use_|multi_gpu|num_gpus|n_gpu|accelerat",
    re.I,
)


def _mode_branch(s: Script, node: ast.AST) -> bool:
    """Under a test of the run's mode (`if self.use_deepspeed:`): the value there may be
    another engine than the DDP wrapper."""
    child = node
    for a in s.ancestors(node):
        if (
            isinstance(a, ast.If | ast.IfExp)
            and a.test is not child  # the test itself is read whatever the mode
            and _MODE_WORDS.search(test_text(a.test, node))
        ):
            return True
        child = a
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef):
            return False
    return False


def _ddp_before(s: Script, f: Flow, expr: ast.expr, depth: int = 0) -> bool:  # noqa: PLR0911
    """The value holds the DDP wrapper where it is used: for a name, one of the values
    it was given ABOVE this line (`model_without_ddp = model` before `model = DDP(model)`
    is the plain model), followed through names and parameters (bounded)."""
    if depth > 4:
        return False
    if (isinstance(expr, ast.Attribute) and expr.attr == "module") or unwrap_idiom(expr):
        return False
    if isinstance(expr, Pick):
        return _pick_ddp(s, f, expr, depth)
    if not isinstance(expr, ast.Name):
        return f.is_ddp_value(expr)
    scope = s.scope_of(expr)
    values = [v for v in s.assigned(scope, expr.id) if v.lineno < expr.lineno]
    # `m = model` then `if hasattr(model, "module"): m = model.module`: `m` is the model
    # itself whenever `model` is the wrapper (hustvl/WeakTr 5bdceb8 segm/engine.py:86)
    unwrapped = {
        ast.unparse(v.value) for v in values if isinstance(v, ast.Attribute) and v.attr == "module"
    }
    values = [v for v in values if ast.unparse(v) not in unwrapped]
    if not values and isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        if s.assigned(scope, expr.id):
            return False
        return any(_ddp_before(s, f, a, depth + 1) for a in s.param_args(scope, expr.id))
    return any(
        (isinstance(v, ast.Call) and v in f.ddp_calls)
        or (isinstance(v, ast.Name | Pick) and _ddp_before(s, f, v, depth + 1))
        or (isinstance(v, ast.Call) and v not in f.ddp_calls and s.callees(v) and f.is_ddp_value(v))
        or _moved_wrapper(f, v)
        for v in values
    )


def _moved_wrapper(f: Flow, v: ast.expr) -> bool:
    """`model_g = DistributedDataParallel(model_g, device_ids=[rank]).to(device)`: `.to`,
    `.cuda()`, `.float()` on the wrapper give the wrapper itself back (nn.Module's own
    methods return self; PlayVoice/whisper-vits-svc 9383ec8 vits_extend/train.py:96)."""
    moved = False
    while isinstance(v, ast.Call):
        if v in f.ddp_calls:
            return moved
        if not (isinstance(v.func, ast.Attribute) and v.func.attr in SELF_RETURNING):
            return False
        v, moved = v.func.value, True
    return False


def _pick_ddp(s: Script, f: Flow, expr: Pick, depth: int) -> bool:
    """`net_g, net_d = nets` with `nets` a parameter its callers give `[net_g, net_d]`;
    `model, optimizer, ... = wrap_model_distributed(model=model, ...)`, a project helper
    that returns the wrapper in a tuple (h2oai/h2o-llmstudio's train.py)."""
    if isinstance(expr.value, ast.Call) and s.callees(expr.value):
        returned = _returned_elements(s, expr.value, expr.index)
        if returned:
            # the helper's own `return model, model_without_ddp, ...`: element i as it
            # stands at its return, where `model_without_ddp = model` above the DDP wrap
            # is the plain model (klauscc/singularity tasks/shared_utils.py setup_model)
            return any(_ddp_before(s, f, e, depth + 1) for e in returned)
        return f.is_ddp_value(expr)
    if not isinstance(expr.value, ast.Name):
        return False
    home = s.scope_of(expr.value)
    if not isinstance(home, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    return any(
        _ddp_before(s, f, a.elts[expr.index], depth + 1)
        for a in s.param_args(home, expr.value.id)
        if isinstance(a, ast.List | ast.Tuple) and len(a.elts) > expr.index
    )


def _returned_elements(s: Script, call: ast.Call, index: int) -> list[ast.expr]:
    """Element `index` of every `return a, b, ...` of the project functions `call`
    reaches, when every return of them is such a tuple of names (otherwise none: the
    value is judged as a whole)."""
    out: list[ast.expr] = []
    for fn in s.callees(call):
        returns = [
            r for r in ast.walk(fn) if isinstance(r, ast.Return) and s.scope_of(r) is fn
        ]
        if not returns:
            return []
        for r in returns:
            if not (
                isinstance(r.value, ast.Tuple)
                and len(r.value.elts) > index
                and isinstance(r.value.elts[index], ast.Name)
            ):
                return []
            out.append(r.value.elts[index])
    return out


def wrapper_attr_self(s: Script, f: Flow) -> Iterator[Hit]:
    """`self.model = DDP(self.model)` in one method, `self.model.generate(...)` in
    another: the wrapper has no `generate`."""
    if not f.ddp_calls:
        return
    for cls in dict.fromkeys(n for n in s.nodes if isinstance(n, ast.ClassDef)):
        reads = sorted(
            (
                n
                for n in ast.walk(cls)
                if isinstance(n, ast.Attribute)
                and isinstance(n.ctx, ast.Load)
                and isinstance(n.value, ast.Attribute)
                and isinstance(n.value.value, ast.Name)
                and n.value.value.id == "self"
                and not n.attr.startswith("_")
                and n.attr not in _WRAPPER_API
            ),
            key=lambda n: (n.lineno, n.col_offset),
        )
        held: dict[str, bool] = {}
        said: set[ast.AST] = set()  # once per statement: each is a place to unwrap
        for n in reads:
            assert isinstance(n.value, ast.Attribute)
            attr = n.value.attr
            if attr not in held:
                values = [v for v, _ in s.self_attr_values(n.value, attr)]
                # `self._model = self._setup_model(...)`, whose `return model` is the
                # wrapper (a project helper's return value, followed), or a
                # `typing.cast(Model, DDP(...))`
                held[attr] = any(
                    isinstance(v, ast.Call)
                    and (
                        v in f.ddp_calls
                        or (
                            bool(s.callees(v) or cast_value(s.call_name(v), v))
                            and f.is_ddp_value(v)
                        )
                    )
                    for v in values
                )
                held[attr] = held[attr] and not _class_tells_wrapper(cls, f"self.{attr}")
                # handed in to the constructor: a `hasattr(self.model, "module")` in the
                # save method does not unwrap the reads of the step (netspresso #235)
                held[attr] = held[attr] or any(_given_wrapper(s, f, v) for v in values)
            fn = s.scope_of(n)
            if (
                held[attr]
                and isinstance(fn, ast.FunctionDef)
                and fn.name != "__init__"
                and not any(s.scope_of(c) is fn for c in f.ddp_calls)
                and not _checks_wrapper(s, n)
                and not _mode_branch(s, n)
                and not _tells_wrapper(fn, f"self.{attr}")
                and not _plain_before(s, f, fn, attr, n)
                and not _attr_elsewhere(
                    s, f, [v for v, _ in s.self_attr_values(n.value, attr)], n.attr
                )
            ):
                stmt = next((a for a in s.ancestors(n) if isinstance(a, ast.stmt)), n)
                if stmt in said:
                    continue
                said.add(stmt)
                yield Hit.at(
                    "DDP-WRAPPER-ATTR",
                    n,
                    (
                        f"`{ast.unparse(n)}` reads `{n.attr}` from `self.{attr}`, which holds the "
                        f"DDP wrapper: it has none (the model is `self.{attr}.module`)"
                    ),
                    model=f"self.{attr}",
                    attr=n.attr,
                )


def _plain_before(s: Script, f: Flow, fn: ast.FunctionDef, attr: str, read: ast.AST) -> bool:
    """The method itself binds `self.<attr>` to something that is no DDP wrapper before the
    read (round 18, blind AN1: an inference set-up builds `self.model = Model(...)` and calls
    `self.model.load(...)`; the training set-up wraps it elsewhere)."""
    return any(
        isinstance(a, ast.Assign)
        and a.lineno < getattr(read, "lineno", 0)
        and any(
            isinstance(t, ast.Attribute)
            and t.attr == attr
            and isinstance(t.value, ast.Name)
            and t.value.id == "self"
            for t in a.targets
        )
        and not f.is_ddp_value(a.value)
        and s.scope_of(a) is fn
        for a in ast.walk(fn)
    )


def _attr_elsewhere(s: Script, f: Flow, values: list[ast.expr], attr: str) -> bool:
    """The attribute is there after all: stored on the passed object itself, or owned by
    a project class the name may also hold (lint19)."""
    if set_on_value(s, f, values, attr):
        return True
    origins = [o for v in values for o in [v, *s.origins(v)]]
    return other_owner(s, origins, attr)


def _given_wrapper(s: Script, f: Flow, value: ast.expr) -> bool:
    """`self.model = model.float()` in `__init__(self, ..., model, ...)`, and the callers
    pass the DDP wrapper (through `super().__init__` and a registry of classes too)."""
    v = value
    while isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and not v.args:
        v = v.func.value  # `.float()`, `.cuda()`: the same module back
    fn = s.scope_of(value)
    return (
        isinstance(v, ast.Name)
        and isinstance(fn, ast.FunctionDef)
        and fn.name == "__init__"
        and v.id in {a.arg for a in fn.args.args}
        and f.is_ddp_value(v)
    )


def wrapper_attr_inherited(s: Script, f: Flow) -> Iterator[Hit]:
    """A project subclass sets `self.network = DDP(self.network)` and calls a method it
    inherits (`self.save_run(...)`), whose body in the base class reads a model method on
    `self.network` (`self.network.save_network(...)`): the wrapper has none
    (mala-project/mala f80a9831, runner.py:80, fixed by `self.network.module...`)."""
    for sub in dict.fromkeys(n for n in s.nodes if isinstance(n, ast.ClassDef)):
        wrapped = _wrapped_attrs(s, f, sub)
        if not wrapped:
            continue
        own = {n.name for n in sub.body if isinstance(n, ast.FunctionDef)}
        called = {
            n.func.attr
            for n in ast.walk(sub)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id == "self"
        } - own
        for base in _project_bases(s, sub):
            for fn in base.body:
                if isinstance(fn, ast.FunctionDef) and fn.name in called:
                    yield from _base_reads(s, base, fn, wrapped, sub.name)
            own |= {n.name for n in base.body if isinstance(n, ast.FunctionDef)}


def _wrapped_attrs(s: Script, f: Flow, cls: ast.ClassDef) -> set[str]:
    return {
        attr
        for attr, assigns in s._self_assigns(cls).items()
        if any(isinstance(a.value, ast.Call) and a.value in f.ddp_calls for a in assigns)
    }


def _project_bases(s: Script, cls: ast.ClassDef) -> list[ast.ClassDef]:
    out: list[ast.ClassDef] = []
    for _ in range(3):
        bases = [b for b in map(s.class_named, cls.bases) if b is not None]
        if not bases or bases[0] is cls or bases[0] in out:
            break
        cls = bases[0]
        out.append(cls)
    return out


def _base_reads(
    s: Script, base: ast.ClassDef, fn: ast.FunctionDef, wrapped: set[str], sub: str
) -> Iterator[Hit]:
    for n in sorted(
        (n for n in own_nodes(fn) if isinstance(n, ast.Attribute)),
        key=lambda n: (n.lineno, n.col_offset),
    ):
        held = n.value
        if not (
            isinstance(n.ctx, ast.Load)
            and isinstance(held, ast.Attribute)
            and isinstance(held.value, ast.Name)
            and held.value.id == "self"
            and held.attr in wrapped
            and isinstance(s.parents.get(n), ast.Call)
            and not n.attr.startswith("_")
            and n.attr not in _WRAPPER_API
        ):
            continue
        if (
            _class_tells_wrapper(base, f"self.{held.attr}")
            or _checks_wrapper(s, n)
            or _mode_branch(s, n)
        ):
            continue
        yield Hit.at(
            "DDP-WRAPPER-ATTR",
            n,
            (
                f"`{ast.unparse(n)}` in `{base.name}.{fn.name}` calls `{n.attr}` on "
                f"`self.{held.attr}`, which the subclass `{sub}` sets to the DDP wrapper and "
                f"then calls `{fn.name}`: the wrapper has none (the model is "
                f"`self.{held.attr}.module`)"
            ),
            model=f"self.{held.attr}",
            attr=n.attr,
        )
        return


def _class_tells_wrapper(cls: ast.ClassDef, held: str) -> bool:
    """The class tests what it holds (`hasattr(self.model, ...)`, `isinstance`,
    `unwrap_model`): it knows. A plain `self.model.module.x` read does not count: it says
    the value is the wrapper, and `self.model.y` elsewhere is the pitfall (omegalabs
    bf2bad3: `self._model.module._transformer` in the save, `self._model.output` in the
    step)."""
    for n in ast.walk(cls):
        if (
            isinstance(n, ast.Call)
            and ident(n.func) in ("hasattr", "isinstance", "getattr", "unwrap_model")
            and n.args
            and ast.unparse(n.args[0]) == held
        ):
            return True
    return False


def _tells_wrapper(fn: ast.FunctionDef, name: str, upto: int | None = None) -> bool:
    """The function looks at the wrapper itself (`hasattr(model, "module")`,
    `isinstance(model, DDP)`): it knows what it holds. A plain `model.module.x` read does
    not count: it says the value is the wrapper, and `model.y` beside it is the pitfall
    (vits2_pytorch bb36fc6: `net_g.use_noise_scaled_mas` next to `net_g.module....`).
    With `upto`, only a look at or above that line counts: a test further down (the
    save's `net_g.module.state_dict() if hasattr(net_g, "module") else ...`) tells
    nothing at a read above it (IAHispano/Applio 8e02e1c rvc/train/train.py:798,
    `net_g.infer(*reference)`, fixed by `net_g.module.infer` in PR 806)."""
    for n in ast.walk(fn):
        if (
            isinstance(n, ast.Call)
            and ident(n.func) in ("hasattr", "isinstance", "getattr")
            and n.args
            and ast.unparse(n.args[0]) == name
            and (upto is None or n.lineno <= upto)
        ):
            return True
    return False
