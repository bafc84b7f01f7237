"""One parsed training script and the name facts every rule asks for: what an
imported or aliased name stands for, where a name got its value, which function a
call reaches (worked out in callees.py, memoised here). Pure core: the `ast` module
only; nothing is imported or run."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ddptui.lint import reach as R
from ddptui.lint.callees import resolve_callees
from ddptui.lint.callsites import CallSites
from ddptui.lint.project import FuncNode, Module, Project, Shared
from ddptui.lint.reach import (
    Resolved,
    Scope,
    reached,
    self_attr,
    star,
)
from ddptui.lint.syntax import const

# Module methods that return the module itself: `model.to(dev)` is still `model`.
SELF_RETURNING = frozenset(
    {"to", "cuda", "cpu", "float", "half", "bfloat16", "double", "train", "eval", "requires_grad_", "type"}
)
_MAX_DEPTH = 8
_MAX_CHAIN = 40  # assignments, returns and parameters followed from one value


@dataclass(eq=False)
class Script:
    """The entry script with the code of the project it reaches: the whole entry file,
    and of the modules it imports (local ones only) their top-level statements and the
    functions and classes the entry's code names, transitively (bounded). Indexes are
    built once; every lookup is cached."""

    path: str
    tree: ast.Module
    parents: dict[ast.AST, ast.AST]
    entry: Module
    modules: list[Module] = field(default_factory=list)  # entry first, then followed
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    calls: list[ast.Call] = field(default_factory=list)
    nodes: list[ast.AST] = field(default_factory=list)  # every node of the reached code
    _callees: dict[ast.Call, tuple[FuncNode, ...]] = field(default_factory=dict)
    shared: Shared = field(default_factory=Shared)
    _origin_memo: dict[tuple[ast.expr, bool], list[ast.expr]] = field(default_factory=dict)
    _origin_busy: set[tuple[ast.expr, bool]] = field(default_factory=set)
    _by_tree: dict[ast.Module, Module] = field(default_factory=dict)
    _stores: dict[object, list[tuple[ast.Subscript, ast.expr]]] | None = None
    _by_key: dict[str, Module] = field(default_factory=dict)
    _sites: CallSites = field(default_factory=CallSites)

    @classmethod
    def parse(cls, path: str, tree: ast.Module, text: str = "") -> Script:
        """One file alone, imports not followed."""
        project = Project(Path(path).parent, "the script's folder")
        mod = project.index(path, tree, text)
        return cls.build(project, mod, [])

    @classmethod
    def build(cls, project: Project, entry: Module, followed: list[Module]) -> Script:
        s = cls(entry.path, entry.tree, project.parents, entry, [entry, *followed])
        s.shared = project.shared
        for m in reversed(s.modules):
            s._by_tree[m.tree] = m
            s._by_key[m.key] = m
            s.classes.update(m.classes)
        s.nodes = [*entry.nodes, *reached(s)]
        order = {m.tree: i for i, m in enumerate(s.modules)}
        s.calls = [n for n in s.nodes if isinstance(n, ast.Call)]
        s.calls.sort(key=lambda c: (order.get(s.module_of(c).tree, 0), c.lineno, c.col_offset))
        return s

    @property
    def functions(self) -> dict[str, list[FuncNode]]:
        """The entry file's functions by name."""
        return self.entry.functions

    @property
    def aliases(self) -> dict[str, str]:
        return self.entry.aliases

    def module_of(self, node: ast.AST) -> Module:
        top = self.shared.tops.get(node)
        if top is None:
            top = node
            for top in self.ancestors(node):  # noqa: B007 - the last ancestor is the module
                pass
            self.shared.tops[node] = top
        return self._by_tree.get(top, self.entry) if isinstance(top, ast.Module) else self.entry

    def path_of(self, node: ast.AST) -> str:
        return self.module_of(node).path

    def entry_anchor(self, node: ast.AST, depth: int = 0) -> ast.AST:
        """Where the entry script leads to `node`: `node` itself when it is in the entry
        file, else the entry's call of the function that (through others) holds it."""
        if self.module_of(node) is self.entry or depth > 4:
            return node
        scope = self.scope_of(node)
        if not isinstance(scope, FuncNode):
            return node
        sites = self.call_sites(scope)
        for site in sites:
            if self.module_of(site) is self.entry:
                return site
        for site in sites:
            found = self.entry_anchor(site, depth + 1)
            if found is not site:
                return found
        return node

    # --- names across modules -------------------------------------------------------

    def resolve(self, mod: Module, name: str, depth: int = 0) -> Resolved:
        """What a name imported from a project module is: a function or class node, a
        module, a dotted name it re-exports (`torch.nn.parallel.DistributedDataParallel`),
        or None (not a local import, or not found)."""
        ref = mod.local.get(name)
        if depth > _MAX_DEPTH:
            return None
        if ref is None:
            return star(self, mod, name, depth) if not name.startswith("*") else None
        pkg_ref = mod.shadowed.get(name) if ref[1] is None else None
        pkg = self._by_key.get(pkg_ref[0]) if pkg_ref is not None else None
        if pkg is not None and pkg_ref is not None and _rebinds(pkg, pkg_ref[1]):
            # `from pykt.models import init_model` where pykt/models/__init__.py does
            # `from .init_model import init_model`: Python hands out the package's
            # attribute, the function, not the submodule of the same name
            return self.resolve_in(pkg, pkg_ref[1], depth + 1)
        target = self._by_key.get(ref[0])
        if target is None:
            return None
        return target if ref[1] is None else self.resolve_in(target, ref[1], depth + 1)

    def resolve_in(self, mod: Module, attr: str, depth: int = 0) -> Resolved:
        """Attribute `attr` of module `mod`."""
        cls = mod.classes.get(attr)
        if cls is not None and self.parents.get(cls) is mod.tree:
            return cls
        for fn in mod.functions.get(attr, ()):
            if self.parents.get(fn) is mod.tree:
                return fn
        if attr in mod.local:
            return self.resolve(mod, attr, depth + 1)
        if attr in mod.aliases:
            return mod.aliases[attr]
        for value in self._assignments(mod.tree).get(attr, ()):
            if isinstance(value, ast.Name | ast.Attribute):
                return self.qualname(value, depth + 1)
        # a package re-exporting a submodule's names (`from .core import *`)
        found = star(self, mod, attr, depth + 1) if depth < _MAX_DEPTH else None
        return found if found is not None else R.submodule(self._by_key, mod, attr)

    def _module_value(self, expr: ast.expr) -> Module | None:
        """The project module an expression names (`utils`, `utils.dist`), if any."""
        if isinstance(expr, ast.Name):
            found = self.resolve(self.module_of(expr), expr.id)
            return found if isinstance(found, Module) else None
        if isinstance(expr, ast.Attribute):
            path = self.module_of(expr).dotted.get(ast.unparse(expr))
            if path is not None and path in self._by_key:
                return self._by_key[path]
            base = self._module_value(expr.value)
            found = self.resolve_in(base, expr.attr) if base is not None else None
            pkg = self.module_of(expr).dotted.get(ast.unparse(expr.value))
            pkg = pkg or (base.key if base is not None else None)
            if found is None and pkg is not None and pkg.endswith("__init__.py"):
                # `onmt.utils.distributed.f`: a submodule of the package, imported
                # elsewhere in the project
                for cand in (f"{expr.attr}.py", f"{expr.attr}/__init__.py"):
                    found = self._by_key.get(str(Path(pkg).parent / cand))
                    if found is not None:
                        break
            return found if isinstance(found, Module) else None
        return None

    def class_named(self, expr: ast.expr) -> ast.ClassDef | None:
        """The project class an expression names (`Net`, `models.Net`), if any."""
        if isinstance(expr, ast.Name):
            mod = self.module_of(expr)
            if expr.id in mod.classes:
                return mod.classes[expr.id]
            found = self.resolve(mod, expr.id)
            return found if isinstance(found, ast.ClassDef) else None
        if isinstance(expr, ast.Attribute):
            base = self._module_value(expr.value)
            found = self.resolve_in(base, expr.attr) if base is not None else None
            return found if isinstance(found, ast.ClassDef) else None
        return None

    # --- structure ---------------------------------------------------------------

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        while node in self.parents:
            node = self.parents[node]
            yield node

    def scope_of(self, node: ast.AST) -> Scope:
        for a in self.ancestors(node):
            if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.Module):
                return a
        return self.module_of(node).tree

    def class_of(self, node: ast.AST) -> ast.ClassDef | None:
        for a in self.ancestors(node):
            if isinstance(a, ast.ClassDef):
                return a
        return None

    def function_calls(self, func: ast.AST) -> list[ast.Call]:
        """Calls made by `func`'s own body (not by functions or lambdas nested in it)."""
        return [c for c in self.calls if self._owner(c) is func]

    def _owner(self, node: ast.AST) -> ast.AST:
        found = self.shared.owners.get(node)
        if found is None:
            found = self.module_of(node).tree
            for a in self.ancestors(node):
                if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.Module):
                    found = a
                    break
            self.shared.owners[node] = found
        return found

    # --- names ---------------------------------------------------------------------

    def qualname(self, expr: ast.expr, depth: int = 0) -> str | None:  # noqa: PLR0911
        """The dotted name an expression stands for, imports and simple aliases followed:
        `DDP` -> torch.nn.parallel.DistributedDataParallel, `nn.BatchNorm2d` ->
        torch.nn.BatchNorm2d. None for anything that is not a name."""
        if depth > _MAX_DEPTH:
            return None
        if isinstance(expr, ast.Name):
            mod = self.module_of(expr)
            found = self.resolve(mod, expr.id)
            if isinstance(found, str):
                return found
            if isinstance(found, FuncNode | ast.ClassDef):
                return found.name
            if expr.id in mod.aliases:
                return mod.aliases[expr.id]
            for value in self.assigned(self.scope_of(expr), expr.id, module_too=True):
                if isinstance(value, ast.Name | ast.Attribute):
                    return self.qualname(value, depth + 1)
            return expr.id
        if isinstance(expr, ast.Attribute):
            base = self.qualname(expr.value, depth + 1)
            return f"{base}.{expr.attr}" if base else None
        return None

    def call_names(self, call: ast.Call) -> list[str]:
        """Every name a call may reach: `call_name`, and through a name given a
        conditional expression, each branch (`S = RandomSampler if rank == -1 else
        DistributedSampler`, then `S(ds)`)."""
        out = [self.call_name(call)]
        if isinstance(call.func, ast.Name):
            for value in self.assigned(self.scope_of(call.func), call.func.id, module_too=True):
                for alt in R.choices(value):
                    name = self.qualname(alt)
                    if name and name not in out:
                        out.append(name)
        return out

    def call_name(self, call: ast.Call) -> str:
        name = self.shared.names.get(call)
        if name is None:
            name = self.shared.names[call] = self.qualname(call.func) or ""
        return name

    def assigned(self, scope: Scope, name: str, *, module_too: bool = False) -> list[ast.expr]:
        """The values `name` is given in `scope` (tuple targets yield `Subscript`-free
        element picks where the value is a literal tuple, else the whole value)."""
        out = list(self._assignments(scope).get(name, ()))
        if out or not module_too:
            return out
        mod = self.module_of(scope)
        if scope is not mod.tree:
            out = list(self._assignments(mod.tree).get(name, ()))
        ref = mod.local.get(name)
        if not out and ref is not None and ref[1] is not None:  # `from config import device`
            target = self._by_key.get(ref[0])
            if target is not None:
                out = list(self._assignments(target.tree).get(ref[1], ()))
        return out

    def _assignments(self, scope: ast.AST) -> dict[str, list[ast.expr]]:
        """Names bound in `scope`'s own code (not in functions or lambdas nested in it),
        computed once per lint run."""
        table = self.shared.assignments.get(scope)
        if table is not None:
            return table
        table = self.shared.assignments[scope] = {}
        stack = list(ast.iter_child_nodes(scope))
        while stack:
            node = stack.pop()
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                stack.extend(ast.iter_child_nodes(node))
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    _bind(table, target, node.value)
            elif isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None:
                _bind(table, node.target, node.value)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                _bind(table, node.optional_vars, node.context_expr)
        return table

    def self_attr_values(self, node: ast.AST, attr: str) -> list[tuple[ast.expr, Scope]]:
        """Values given to `self.<attr>` anywhere in the class around `node` or in its
        project base classes."""
        cls = self.class_of(node)
        out: list[tuple[ast.expr, Scope]] = []
        for _ in range(4):
            if cls is None:
                break
            for n in self._self_assigns(cls).get(attr, ()):
                value = R.self_value(n, attr)
                if value is not None:
                    out.append((value, self.scope_of(n)))
            bases = [b for b in map(self.class_named, cls.bases) if b is not None]
            cls = bases[0] if bases and bases[0] is not cls else None
        return out

    def _self_assigns(self, cls: ast.ClassDef) -> dict[str, list[ast.Assign | ast.AnnAssign]]:
        table = self.shared.attrs.get(cls)
        if table is None:
            table = self.shared.attrs[cls] = {}
            for n in ast.walk(cls):
                if isinstance(n, ast.Assign | ast.AnnAssign) and n.value is not None:
                    targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                    for t in targets:
                        for e in t.elts if isinstance(t, ast.Tuple) else [t]:
                            attr = self_attr(e)
                            if attr is not None:
                                table.setdefault(attr, []).append(n)
        return table

    # --- where values come from ------------------------------------------------------

    def origins(self, expr: ast.expr, depth: int = 0, *, params: bool = True) -> list[ast.expr]:
        """The expressions a value may come from, following names through assignments,
        `self.x` attributes, parameters (via call sites), project function returns and
        module methods that return self. Unknown sources are simply absent. Each answer
        is computed once (a value met again while it is being computed adds nothing)."""
        k = (expr, params)
        found = self._origin_memo.get(k)
        if found is not None:
            return found
        if k in self._origin_busy or depth > _MAX_CHAIN:
            return []
        self._origin_busy.add(k)
        try:
            found = list(dict.fromkeys(self._origins(expr, depth, params=params)))
        finally:
            self._origin_busy.discard(k)
        self._origin_memo[k] = found
        return found

    def _origins(  # noqa: PLR0911, PLR0912 - one case per kind of expression
        self, expr: ast.expr, depth: int, *, params: bool
    ) -> list[ast.expr]:
        scope = self.scope_of(expr)
        if isinstance(expr, ast.Name):
            # a parameter shadows the module's global of the same name
            local = R.is_param(scope, expr.id)
            values = self.assigned(scope, expr.id, module_too=not local)
            if local and values:  # `loader = sample_data(loader)`: the parameter's value
                values = [v for v in values if v.lineno < expr.lineno]
            out = [o for v in values for o in self.origins(v, depth + 1, params=params)]
            if not values and params and isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
                out += [
                    o
                    for a in self.param_args(scope, expr.id)
                    for o in self.origins(a, depth + 1, params=params)
                ]
            return out
        if (
            isinstance(expr, ast.Attribute)
            and isinstance(expr.value, ast.Name)
            and expr.value.id == "self"
        ):
            return [
                o
                for v, _ in self.self_attr_values(expr, expr.attr)
                for o in self.origins(v, depth + 1, params=params)
            ]
        if isinstance(expr, ast.Attribute):  # `data.train_loader`, `cfg.model`
            return [expr, *R.object_attr_origins(self, expr, depth, params=params)]
        if isinstance(expr, ast.Call):
            f = expr.func
            if isinstance(f, ast.Attribute) and f.attr in SELF_RETURNING:
                return [expr, *self.origins(f.value, depth + 1, params=params)]
            stored = R.setattr_stores(self.calls, expr)  # getattr(self, k) <- setattr(self, k, v)
            stored += R.cast_value(self.call_name(expr), expr)
            out = [expr, *(o for v in stored for o in self.origins(v, depth + 1, params=params))]
            for func in self.callees(expr):
                for ret in ast.walk(func):
                    if (
                        isinstance(ret, ast.Return)
                        and ret.value is not None
                        and self._owner(ret) is func
                    ):
                        out += self.origins(ret.value, depth + 1, params=params)
            return out
        if isinstance(expr, Pick):
            out = []
            for src in self.origins(expr.value, depth + 1, params=params):
                if isinstance(src, ast.Tuple | ast.List):
                    if expr.index < len(src.elts):
                        out += self.origins(src.elts[expr.index], depth + 1, params=params)
                elif not (isinstance(src, ast.Call) and self.callees(src)):
                    out.append(src)  # `model, opt = accelerator.prepare(...)`: the call
            return out
        if isinstance(expr, ast.IfExp):
            return self.origins(expr.body, depth + 1, params=params) + self.origins(
                expr.orelse, depth + 1, params=params
            )
        if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Tuple | ast.Call):
            # `f()[0]`, `np.array_split(x, n)[rank]`: the pick itself and what it picks from
            return [expr, *self.origins(expr.value, depth + 1, params=params)]
        if isinstance(expr, ast.Subscript) and isinstance(const(expr.slice), str | int):
            return [expr, *self._item_origins(expr, depth, params=params)]
        return [expr]

    def _item_origins(self, expr: ast.Subscript, depth: int, *, params: bool) -> list[ast.expr]:
        """`models["gen"]`: the value a dict literal gives that key, or a store
        `models["gen"] = DDP(...)` into the same dict."""
        k = const(expr.slice)
        bases = set(self.origins(expr.value, depth + 1, params=params))
        out: list[ast.expr] = []
        for b in bases:
            if isinstance(b, ast.Dict):
                for key, value in zip(b.keys, b.values, strict=True):
                    if key is not None and const(key) == k:
                        out += self.origins(value, depth + 1, params=params)
        for target, value in self._item_stores().get(k, ()):
            if target is not expr and bases & set(
                self.origins(target.value, depth + 1, params=params)
            ):
                out += self.origins(value, depth + 1, params=params)
        return out

    def _item_stores(self) -> dict[object, list[tuple[ast.Subscript, ast.expr]]]:
        if self._stores is None:
            self._stores = {}
            for n in self.nodes:
                if isinstance(n, ast.Assign):
                    for t in n.targets:
                        if isinstance(t, ast.Subscript) and isinstance(const(t.slice), str | int):
                            self._stores.setdefault(const(t.slice), []).append((t, n.value))
        return self._stores

    def param_args(self, func: FuncNode, name: str) -> list[ast.expr]:
        """The arguments passed for parameter `name` at the call sites of `func`."""
        params = [a.arg for a in func.args.posonlyargs + func.args.args]
        if name not in params and name not in [a.arg for a in func.args.kwonlyargs]:
            return []
        is_method = self.class_of(func) is not None and (
            params[:1] == ["self"] or (params[:1] == ["cls"] and R.static_or_class(func))
        )
        index = params.index(name) - (1 if is_method else 0) if name in params else -1
        out: list[ast.expr] = []
        for call in self.call_sites(func):
            for kw in call.keywords:
                if kw.arg == name:
                    out.append(kw.value)
            if 0 <= index < len(call.args) and not any(
                isinstance(a, ast.Starred) for a in call.args[: index + 1]
            ):
                out.append(call.args[index])
        return out

    def call_sites(self, func: FuncNode) -> tuple[ast.Call, ...]:
        """The calls of the reached code that reach `func`, in the order of `calls`."""
        return self._sites.of(func, self.calls, self.callees)

    def callees(self, call: ast.Call) -> tuple[FuncNode, ...]:
        if call in self._callees:
            return self._callees[call]
        self._callees[call] = ()  # while resolving: a cycle finds nothing more
        self._sites.resolving += 1
        try:
            found = resolve_callees(self, call)
        finally:
            self._sites.resolving -= 1
        self._callees[call] = found
        return found

    def _methods(self, cls: ast.ClassDef, name: str, depth: int = 0) -> list[FuncNode]:
        own = [
            n
            for n in cls.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name
        ]
        if own or depth > 4:
            return own
        for base in cls.bases:  # a base class of the project defines it
            base_cls = self.class_named(base)
            if base_cls is not None and base_cls is not cls:
                found = self._methods(base_cls, name, depth + 1)
                if found:
                    return found
        return []


def _bind(table: dict[str, list[ast.expr]], target: ast.expr, value: ast.expr) -> None:
    if isinstance(target, ast.Name):
        table.setdefault(target.id, []).append(value)
    elif isinstance(target, ast.Tuple | ast.List):
        for i, elt in enumerate(target.elts):
            if isinstance(value, ast.Tuple | ast.List) and len(value.elts) == len(target.elts):
                _bind(table, elt, value.elts[i])
            else:  # `a, b = f()`: each name may come from f's returns, at position i
                _bind(table, elt, Pick(value, i))


class Pick(ast.Subscript):
    """Element i of a value unpacked into a tuple target (a synthetic node)."""

    def __init__(self, value: ast.expr, index: int) -> None:
        super().__init__(value=value, slice=ast.Constant(index), ctx=ast.Load())
        ast.copy_location(self, value)
        self.index = index


def _rebinds(pkg: Module, name: str) -> bool:
    """The package's `__init__` binds `name` itself (a function, a class, or a name
    imported from a module), not merely as its submodule."""
    top = set(pkg.tree.body)
    if any(fn in top for fn in pkg.functions.get(name, ())) or pkg.classes.get(name) in top:
        return True
    ref = pkg.local.get(name)
    return ref is not None and ref[1] is not None
