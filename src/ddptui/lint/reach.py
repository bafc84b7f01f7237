"""How the entry reaches the code of the project modules it imports: which of their
definitions run (named by code that runs, transitively), names brought in by a star
import, and the function a `functools.partial` binds. Functions of a Script (kept out
of script.py, which holds the per-name facts)."""

from __future__ import annotations

import ast
import weakref
from pathlib import Path
from typing import Protocol

from ddptui.lint.project import FuncNode, Module, Shared, key

Scope = ast.FunctionDef | ast.AsyncFunctionDef | ast.Module
Resolved = FuncNode | ast.ClassDef | Module | str | None


class Script(Protocol):
    """What these functions use of lint.script.Script (which calls them): a protocol, so
    that this module and script.py do not import each other."""

    @property
    def entry(self) -> Module: ...
    @property
    def modules(self) -> list[Module]: ...
    @property
    def shared(self) -> Shared: ...
    @property
    def _by_key(self) -> dict[str, Module]: ...
    def module_of(self, node: ast.AST) -> Module: ...
    def resolve(self, mod: Module, name: str, depth: int = 0) -> Resolved: ...
    def resolve_in(self, mod: Module, attr: str, depth: int = 0) -> Resolved: ...
    def _module_value(self, expr: ast.expr) -> Module | None: ...
    def scope_of(self, node: ast.AST) -> Scope: ...
    def class_of(self, node: ast.AST) -> ast.ClassDef | None: ...
    def class_named(self, expr: ast.expr) -> ast.ClassDef | None: ...
    def assigned(self, scope: Scope, name: str, *, module_too: bool = False) -> list[ast.expr]: ...
    def _methods(self, cls: ast.ClassDef, name: str, depth: int = 0) -> list[FuncNode]: ...
    def _self_assigns(self, cls: ast.ClassDef) -> dict[str, list[ast.Assign | ast.AnnAssign]]: ...
    def origins(self, expr: ast.expr, depth: int = 0, *, params: bool = True) -> list[ast.expr]: ...
    @property
    def nodes(self) -> list[ast.AST]: ...
    @property
    def calls(self) -> list[ast.Call]: ...


_MAX_DEFS = 3000  # definitions of followed modules taken in per entry script
_FUNC = (ast.FunctionDef, ast.AsyncFunctionDef)


def reached(self: Script) -> list[ast.AST]:
    """Nodes of the followed modules that run: their top-level statements (outside
    `if __name__ == "__main__":`) and the functions and classes named by code that
    runs, transitively; at most _MAX_DEFS definitions."""
    out: list[ast.AST] = []
    roots: list[ast.AST] = [self.entry.tree]
    seeded: set[ast.AST] = set()
    # a module a run-time loader imports by name (dynamic.py): the class it returns is
    # picked by name too (ParlAI's load_agent_module: `getattr(module, class_name)`)
    loaded = {p for m in self.modules for p in m.loaded}
    # a package loaded by name hands out what its __init__ star-imports (RecBole's
    # recbole/trainer/__init__.py: `from recbole.trainer.trainer import *`)
    loaded |= {
        str(Path(p).resolve())
        for m in self.modules
        if m.key in loaded
        for name, (p, _) in m.local.items()
        if name.startswith("*")
    }
    for m in self.modules[1:]:
        by_name = m.key in loaded
        for st in m.tree.body:
            if not (isinstance(st, (*_FUNC, ast.ClassDef)) or _is_main_block(st)):
                out += walked(self, st)
                roots.append(st)
            elif (registered(st) or (by_name and isinstance(st, ast.ClassDef))) and (
                st not in seeded
            ):
                seeded.add(st)  # run through a registry: `get_trainer(name)` finds it
                out += walked(self, st)
                roots.append(st)
    for m in self.modules:  # `else: from b import f` rebinding `from a import f`: a's f
        for path, attr in m.rebound:  # may be the one that runs
            alt = self._by_key.get(key(path)) if attr else None
            found = self.resolve_in(alt, attr) if alt is not None and attr else None
            if isinstance(found, (*_FUNC, ast.ClassDef)) and found not in seeded:
                seeded.add(found)
                out += walked(self, found)
                roots.append(found)
    done: set[ast.AST] = set()
    while roots and len(done) < _MAX_DEFS:
        root = roots.pop()
        for target in [*refs(self, root), *factory_subclasses(self, root)]:
            if target not in done and self.module_of(target) is not self.entry:
                done.add(target)
                out += walked(self, target)
                roots.append(target)
    return out


def factory_subclasses(self: Script, root: ast.AST) -> list[ast.ClassDef]:
    """`val_evaluator: Evaluator = instantiate(cfg.task.evaluator, ...)`: a factory builds
    a value the code declares of a project base class, so the base's subclasses in the
    followed modules are what runs (VMarsocci/pangaea-bench's run.py builds SegEvaluator
    or RegEvaluator from the Hydra config)."""
    out: list[ast.ClassDef] = []
    for node in walked(self, root):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Call)):
            continue
        if self.class_named(node.value.func) is not None:
            continue  # built by the class itself: that class runs, refs() has it
        base = self.class_named(node.annotation)
        if base is not None:
            out += [
                cls
                for m in self.modules
                for cls in m.classes.values()
                if cls is not base and any(self.class_named(b) is base for b in cls.bases)
            ]
    return out


def registered(st: ast.stmt) -> bool:
    """A class or function a decorator registers when its module is imported
    (`@baseline_registry.register_trainer(name="ddppo")`, `@MODELS.register_module()`)."""
    return isinstance(st, (*_FUNC, ast.ClassDef)) and any(
        "regist" in ast.unparse(d).lower() for d in st.decorator_list
    )


def walked(self: Script, node: ast.AST) -> list[ast.AST]:
    found = self.shared.walks.get(node)
    if found is None:
        found = self.shared.walks[node] = list(ast.walk(node))
    return found


def refs(self: Script, root: ast.AST) -> list[FuncNode | ast.ClassDef]:
    """The project functions and classes the code under `root` names (once per run)."""
    found = self.shared.refs.get(root)
    if found is not None:
        return found
    out: dict[FuncNode | ast.ClassDef, None] = {}
    for node in walked(self, root):
        target = None
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            mod = self.module_of(node)
            if node.id in mod.local:
                target = self.resolve(mod, node.id)
            elif node.id in mod.functions or node.id in mod.classes:
                target = self.resolve_in(mod, node.id)  # the same file's own
            elif any(k.startswith("*") for k in mod.local):
                target = star(self, mod, node.id, 0)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            # `utils.helper`, and dotted module paths (`onmt.utils.distributed.helper`,
            # `onmt.Trainer` re-exported by the package)
            base = self._module_value(node.value)
            if base is not None:
                target = self.resolve_in(base, node.attr)
            for entry in registry_modules(self, node.value):
                handed = self.resolve_in(entry, node.attr)
                if isinstance(handed, (*_FUNC, ast.ClassDef)):
                    out[handed] = None
        elif isinstance(node, ast.Call):
            out.update(dict.fromkeys(named_by_getattr(self, node)))
        if isinstance(target, (*_FUNC, ast.ClassDef)):
            out[target] = None
    self.shared.refs[root] = list(out)
    return self.shared.refs[root]


def _name_prefix(expr: ast.expr) -> str:
    """The constant start of a name built at run time: `"init_dist_%s" % launcher`,
    `f"init_dist_{launcher}"`, `"init_dist_" + launcher`, or a whole constant name."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod | ast.Add):
        left = expr.left
        if isinstance(left, ast.Constant) and isinstance(left.value, str):
            return left.value.split("%")[0] if isinstance(expr.op, ast.Mod) else left.value
    if isinstance(expr, ast.JoinedStr) and expr.values:
        head = expr.values[0]
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            return head.value
    return ""


def named_by_getattr(self: Script, call: ast.Call) -> list[FuncNode | ast.ClassDef]:
    """`getattr(common_utils, "init_dist_%s" % args.launcher)`: the project module's
    functions and classes whose names start with the constant part (OpenPCDet's
    tools/train.py picks its process-group set-up that way). A prefix shorter than four
    characters names too much to follow."""
    if not (isinstance(call.func, ast.Name) and call.func.id == "getattr" and len(call.args) > 1):
        return []
    prefix = _name_prefix(call.args[1])
    if len(prefix) < 4:
        return []
    mod = self._module_value(call.args[0])
    if mod is None:
        return []
    exact = isinstance(call.args[1], ast.Constant)
    names = [*mod.functions, *mod.classes]
    out: list[FuncNode | ast.ClassDef] = []
    for name in names:
        if name == prefix or (not exact and name.startswith(prefix)):
            found = self.resolve_in(mod, name)
            if isinstance(found, (*_FUNC, ast.ClassDef)) and self.scope_of(found) is mod.tree:
                out.append(found)
    return out


def registry_modules(self: Script, expr: ast.expr) -> list[Module]:
    """The project modules a registry dict hands out: `PARSERS[args.model]` where
    `PARSERS = {'biaffine-parser': biaffine_parser, ...}` maps names to modules
    (yzhangcs/parser's run.py, then `PARSERS[args.model].run(...)`; blind AK2)."""
    if not (isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Name)):
        return []
    scope = self.scope_of(expr)
    values = self.assigned(scope, expr.value.id, module_too=True)
    return [
        m
        for d in values
        if isinstance(d, ast.Dict)
        for v in d.values
        if v is not None and (m := self._module_value(v)) is not None
    ]


def star(self: Script, mod: Module, name: str, depth: int) -> Resolved:
    """A name a `from m import *` of a project module brings in."""
    for k, (path, _) in mod.local.items():
        target = self._by_key.get(path) if k.startswith("*") else None
        if target is not None and target is not mod:
            found = self.resolve_in(target, name, depth + 1)
            if found is not None:
                return found
    return None


def submodule(by_key: dict[str, Module], pkg: Module, attr: str) -> Module | None:
    """`from src.misc import dist` where the package's `__init__` defines no `dist`: Python
    imports the submodule `src/misc/dist.py` (RT-DETR's solver reaches `warp_model`, its
    DDP wrap, that way)."""
    if not pkg.key.endswith("__init__.py"):
        return None
    base = Path(pkg.key).parent
    return by_key.get(str(base / f"{attr}.py")) or by_key.get(str(base / attr / "__init__.py"))


def partial_target(self: Script, call: ast.Call, name: str) -> tuple[FuncNode, ...]:
    """`backwards = partial(loss_backwards, fp16)`, then `backwards(loss)`: the
    project function the partial binds. `task_pipeline = TASK_PIPELINE[task]`, then
    `task_pipeline(...)`: the `__init__` of every project class of that registry dict."""
    for v in self.assigned(self.scope_of(call), name, module_too=True):
        if isinstance(v, ast.Subscript) and isinstance(v.value, ast.Name):
            inits = [
                m
                for cls in _registry_classes(self, v.value)
                for m in self._methods(cls, "__init__")
            ]
            if inits:
                return tuple(dict.fromkeys(inits))
        if not (isinstance(v, ast.Call) and v.args and ident_of(v.func) == "partial"):
            continue
        target = v.args[0]
        if isinstance(target, ast.Name):
            mod = self.module_of(v)
            found = self.resolve(mod, target.id)
            if isinstance(found, _FUNC):
                return (found,)
            return tuple(fn for fn in mod.functions.get(target.id, ()) if self.class_of(fn) is None)
        if isinstance(target, ast.Attribute) and ast.unparse(target.value) == "self":
            own = self.class_of(v)
            return tuple(self._methods(own, target.attr)) if own else ()
    return ()


def held_functions(self: Script, call: ast.Call) -> tuple[FuncNode, ...]:
    """The project functions a name holds, chosen at run time:
    `train_function = run_train_rlhf if rlhf else run_train`, then
    `train_function(model=model, ...)` (h2oai/h2o-llmstudio's train.py). Only where every
    value the name is given is a project function: `gather = lambda x: x` on one path and
    `gather = all_gather` on another (pelican's trainer) says nothing of which one runs
    after the rank test that chose it, so neither is followed."""
    if not isinstance(call.func, ast.Name):
        return ()
    out: list[FuncNode] = []
    for value in self.assigned(self.scope_of(call), call.func.id, module_too=True):
        for alt in choices(value):
            found = _function(self, alt)
            if not found:
                return ()
            out += found
    return tuple(dict.fromkeys(out))


def choices(expr: ast.expr, depth: int = 0) -> list[ast.expr]:
    """The values an expression picks among: both arms of `a if c else b`, each operand
    of `a or b`."""
    if depth < 4 and isinstance(expr, ast.IfExp):
        return choices(expr.body, depth + 1) + choices(expr.orelse, depth + 1)
    if depth < 4 and isinstance(expr, ast.BoolOp):
        return [a for v in expr.values for a in choices(v, depth + 1)]
    return [expr]


def _function(self: Script, expr: ast.expr) -> list[FuncNode]:
    """The project function a name or `module.name` stands for (none for anything else)."""
    if isinstance(expr, ast.Name):
        mod = self.module_of(expr)
        found = self.resolve(mod, expr.id)
        if isinstance(found, _FUNC):
            return [found]
        return [fn for fn in mod.functions.get(expr.id, ()) if self.class_of(fn) is None]
    if isinstance(expr, ast.Attribute):
        if isinstance(expr.value, ast.Name) and expr.value.id == "self":
            own = self.class_of(expr)
            return self._methods(own, expr.attr) if own else []
        module = self._module_value(expr.value)
        found = self.resolve_in(module, expr.attr) if module is not None else None
        return [found] if isinstance(found, _FUNC) else []
    return []


def _registry_classes(self: Script, name: ast.Name) -> list[ast.ClassDef]:
    """The project classes a dict literal bound to `name` maps to (`{"det": DetPipeline}`,
    here or imported from a registry module)."""
    out: list[ast.ClassDef] = []
    for d in self.assigned(self.scope_of(name), name.id, module_too=True):
        if isinstance(d, ast.Dict):
            out += [c for v in d.values if v is not None and (c := self.class_named(v)) is not None]
    return out


def ident_of(expr: ast.expr) -> str | None:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return None


def _is_main_block(st: ast.stmt) -> bool:
    return isinstance(st, ast.If) and "__main__" in ast.unparse(st.test)


def is_param(fn: ast.AST, name: str) -> bool:
    """Whether `name` is a parameter of `fn` (False when `fn` is no function)."""
    if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    a = fn.args
    return any(
        p.arg == name
        for p in [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
    )


def static_or_class(fn: FuncNode) -> bool:
    return any(
        isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod")
        for d in fn.decorator_list
    )


def cast_value(qualname: str, call: ast.Call) -> list[ast.expr]:
    """`typing.cast(Model, DDP(model))` is its second argument at run time: typed code
    casts the wrapper back to the model's type to quiet the checker (nerfstudio's
    pipeline holds `self._model = typing.cast(Model, DDP(self._model, ...))`)."""
    if qualname in ("typing.cast", "typing_extensions.cast") and len(call.args) == 2:
        return [call.args[1]]
    return []


def setattr_stores(calls: list[ast.Call], call: ast.Call) -> list[ast.expr]:
    """For `getattr(self, "net" + name)`: the values `setattr(self, "net" + name, v)` calls
    store under the same key expression (joligen's networks are wrapped in DDP that way)."""
    if not (isinstance(call.func, ast.Name) and call.func.id == "getattr" and len(call.args) > 1):
        return []
    if ast.unparse(call.args[0]) != "self":
        return []
    key = ast.unparse(call.args[1])
    return [
        c.args[2]
        for c in calls
        if isinstance(c.func, ast.Name)
        and c.func.id == "setattr"
        and len(c.args) == 3
        and ast.unparse(c.args[0]) == "self"
        and ast.unparse(c.args[1]) == key
    ]


def built_classes(self: Script, call: ast.Call) -> list[ast.ClassDef]:
    """The project classes a call constructs: `Cls(...)`, or a name holding a class
    chosen at run time (`checkpointer_class = DistributedCheckpointer if dist else
    SingleGPUCheckpointer`, then `checkpointer_class(path)`: vllm-project/speculators)."""
    cls = self.class_named(call.func)
    if cls is not None:
        return [cls]
    if isinstance(call.func, ast.Subscript) and isinstance(call.func.value, ast.Name):
        # `recorders[config.recorder.name](config)`: a class picked from a registry dict
        # (Jingkang50/OpenOOD 3de61c4 openood/recorders/utils.py get_recorder)
        return _registry_classes(self, call.func.value)
    if not isinstance(call.func, ast.Name):
        return []
    out: list[ast.ClassDef] = []
    scope = self.scope_of(call)
    for value in self.assigned(scope, call.func.id, module_too=True):
        alts = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
        for alt in alts:
            c = self.class_named(alt) if isinstance(alt, ast.Name | ast.Attribute) else None
            if c is not None and c not in out:
                out.append(c)
    return out


# --- `obj.attr` where obj is not `self` (part of Script.origins) ----------------------
# The object was built from a project class whose methods set `self.attr` (`model_and_loss
# = ModelAndLoss(...)`, then `model_and_loss.model.state_dict()`, with `self.model =
# DDP(self.model)` in its `distributed()`: NVIDIA DeepLearningExamples' image_classification),
# or by a call given `attr=` as a keyword (`SimpleNamespace(model=model)`,
# `DataLoader(ds, sampler=sampler).sampler`). Bounded by origins' depth.

_MAX_BASES = 4


def object_attr_origins(
    s: Script, expr: ast.Attribute, depth: int, *, params: bool
) -> list[ast.expr]:
    """The origins of the values `expr.attr` is given on the objects `expr.value` may be."""
    out: list[ast.expr] = []
    bases = s.origins(expr.value, depth + 1, params=params)
    for o in bases:
        if not isinstance(o, ast.Call):
            continue
        for cls in built_classes(s, o):
            for value in class_attr_values(s, cls, expr.attr):
                out += s.origins(value, depth + 1, params=params)
        for kw in o.keywords:
            if kw.arg == expr.attr:
                out += s.origins(kw.value, depth + 1, params=params)
    built = {o for o in bases if isinstance(o, ast.Call)}
    for target, value in _attr_stores(s).get(expr.attr, ()) if built else ():
        # `state.model = DistributedModel(module=state.model, ...)` in a helper given the
        # same `TrainingState(...)` (facebookresearch/pytext's Trainer.set_up_training)
        if built & set(s.origins(target.value, depth + 1, params=params)):
            out += s.origins(value, depth + 1, params=params)
    return out


_STORES: weakref.WeakKeyDictionary[Script, dict[str, list[tuple[ast.Attribute, ast.expr]]]] = (
    weakref.WeakKeyDictionary()
)


def _attr_stores(s: Script) -> dict[str, list[tuple[ast.Attribute, ast.expr]]]:
    """`obj.attr = value` of the reached code, by attribute (`self.attr` excluded)."""
    table = _STORES.get(s)
    if table is None:
        table = _STORES[s] = {}
        for n in s.nodes:
            if isinstance(n, ast.Assign | ast.AnnAssign) and n.value is not None:
                for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                    if isinstance(t, ast.Attribute) and ast.unparse(t.value) != "self":
                        table.setdefault(t.attr, []).append((t, n.value))
    return table


def class_attr_values(s: Script, cls: ast.ClassDef, attr: str) -> list[ast.expr]:
    """Values the methods of `cls` (or of its project base classes) give `self.<attr>`."""
    out: list[ast.expr] = []
    seen: set[ast.ClassDef] = set()
    todo: list[ast.ClassDef] = [cls]
    while todo and len(seen) < _MAX_BASES:
        c = todo.pop(0)
        if c in seen:
            continue
        seen.add(c)
        out += [
            v for n in s._self_assigns(c).get(attr, ()) if (v := self_value(n, attr)) is not None
        ]
        todo += [b for b in map(s.class_named, c.bases) if b is not None]
    return out


# --- `self.m()` may run a subclass's override ---------------------------------------

_SUBCLASSES: weakref.WeakKeyDictionary[Script, dict[ast.ClassDef, list[ast.ClassDef]]] = (
    weakref.WeakKeyDictionary()
)


def overrides(s: Script, cls: ast.ClassDef, name: str) -> tuple[FuncNode, ...]:
    """The methods `name` of the project's direct subclasses of `cls` that the code
    builds (`NewTaskTrainer()`): `self.run_epoch(...)` in `Trainer.train` runs
    `NewTaskTrainer.run_epoch` on one (pytext's new_task.py, where the override calls the
    model past the DDP wrapper). A subclass nothing builds by name (one of a registry's)
    is left out: which one runs is not known."""
    table = _SUBCLASSES.get(s)
    if table is None:
        table = _SUBCLASSES[s] = {}
        built = {s.class_named(c.func) for c in s.calls}
        for mod in s.modules:
            for sub in mod.classes.values():
                for base in map(s.class_named, sub.bases) if sub in built else ():
                    if base is not None and base is not sub:
                        table.setdefault(base, []).append(sub)
    return tuple(
        n
        for sub in table.get(cls, ())
        for n in sub.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name
    )


def self_value(n: ast.Assign | ast.AnnAssign, attr: str) -> ast.expr | None:
    """What `n` gives `self.<attr>`: its value, or in `self.a, self.b = (a, b)` the
    element in the same position (a value that is not a literal tuple: nothing known)."""
    targets = n.targets if isinstance(n, ast.Assign) else [n.target]
    if any(self_attr(t) == attr for t in targets):
        return n.value
    for t in targets:
        if isinstance(t, ast.Tuple) and isinstance(n.value, ast.Tuple | ast.List):
            for e, v in zip(t.elts, n.value.elts, strict=False):
                if self_attr(e) == attr and len(t.elts) == len(n.value.elts):
                    return v
    return None


def self_attr(node: ast.AST) -> str | None:
    """`self.<attr>` -> attr; anything else -> None."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None
