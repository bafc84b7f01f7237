"""One parsed training script and the name facts every rule asks for: what an
imported or aliased name stands for, where a name got its value, which function a
call reaches. Pure core: the `ast` module only; nothing is imported or run."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field

Scope = ast.FunctionDef | ast.AsyncFunctionDef | ast.Module
FuncNode = ast.FunctionDef | ast.AsyncFunctionDef

# Module methods that return the module itself: `model.to(dev)` is still `model`.
SELF_RETURNING = frozenset(
    {
        "to",
        "cuda",
        "cpu",
        "float",
        "half",
        "bfloat16",
        "double",
        "train",
        "eval",
        "requires_grad_",
        "type",
    }
)
_MAX_DEPTH = 8


@dataclass(eq=False)
class Script:
    """A parsed file with indexes built once; every lookup is cached."""

    path: str
    tree: ast.Module
    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    functions: dict[str, list[FuncNode]] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    calls: list[ast.Call] = field(default_factory=list)
    nodes: list[ast.AST] = field(default_factory=list)  # every node, walked once
    _callees: dict[ast.Call, tuple[FuncNode, ...]] = field(default_factory=dict)
    _names: dict[ast.Call, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, path: str, tree: ast.Module) -> Script:
        s = cls(path, tree)
        s.nodes = list(ast.walk(tree))
        for node in s.nodes:
            for child in ast.iter_child_nodes(node):
                s.parents[child] = node
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        s.aliases[a.asname] = a.name
                    else:  # `import torch.nn` binds `torch`
                        root = a.name.split(".")[0]
                        s.aliases.setdefault(root, root)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    s.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                s.functions.setdefault(node.name, []).append(node)
            elif isinstance(node, ast.ClassDef):
                s.classes[node.name] = node
            elif isinstance(node, ast.Call):
                s.calls.append(node)
        s.calls.sort(key=lambda c: (c.lineno, c.col_offset))
        return s

    # --- structure ---------------------------------------------------------------

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        while node in self.parents:
            node = self.parents[node]
            yield node

    def scope_of(self, node: ast.AST) -> Scope:
        for a in self.ancestors(node):
            if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.Module):
                return a
        return self.tree

    def class_of(self, node: ast.AST) -> ast.ClassDef | None:
        for a in self.ancestors(node):
            if isinstance(a, ast.ClassDef):
                return a
        return None

    def function_calls(self, func: ast.AST) -> list[ast.Call]:
        """Calls made by `func`'s own body (not by functions or lambdas nested in it)."""
        return [c for c in self.calls if self._owner(c) is func]

    @functools.cache  # noqa: B019 - the Script lives as long as its lint run
    def _owner(self, node: ast.AST) -> ast.AST:
        for a in self.ancestors(node):
            if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.Module):
                return a
        return self.tree

    # --- names ---------------------------------------------------------------------

    def qualname(self, expr: ast.expr, depth: int = 0) -> str | None:
        """The dotted name an expression stands for, imports and simple aliases followed:
        `DDP` -> torch.nn.parallel.DistributedDataParallel, `nn.BatchNorm2d` ->
        torch.nn.BatchNorm2d. None for anything that is not a name."""
        if depth > _MAX_DEPTH:
            return None
        if isinstance(expr, ast.Name):
            if expr.id in self.aliases:
                return self.aliases[expr.id]
            for value in self.assigned(self.scope_of(expr), expr.id, module_too=True):
                if isinstance(value, ast.Name | ast.Attribute):
                    return self.qualname(value, depth + 1)
            return expr.id
        if isinstance(expr, ast.Attribute):
            base = self.qualname(expr.value, depth + 1)
            return f"{base}.{expr.attr}" if base else None
        return None

    def call_name(self, call: ast.Call) -> str:
        if call not in self._names:
            self._names[call] = self.qualname(call.func) or ""
        return self._names[call]

    def assigned(self, scope: Scope, name: str, *, module_too: bool = False) -> list[ast.expr]:
        """The values `name` is given in `scope` (tuple targets yield `Subscript`-free
        element picks where the value is a literal tuple, else the whole value)."""
        out = list(self._assignments(scope).get(name, ()))
        if not out and module_too and scope is not self.tree:
            out = list(self._assignments(self.tree).get(name, ()))
        return out

    @functools.cache  # noqa: B019
    def _assignments(self, scope: ast.AST) -> dict[str, list[ast.expr]]:
        table: dict[str, list[ast.expr]] = {}
        for node in ast.walk(scope):
            if node is not scope and self._owner(node) is not scope:
                continue
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    _bind(table, target, node.value)
            elif isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None:
                _bind(table, node.target, node.value)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                _bind(table, node.optional_vars, node.context_expr)
        return table

    def self_attr_values(self, node: ast.AST, attr: str) -> list[tuple[ast.expr, Scope]]:
        """Values given to `self.<attr>` anywhere in the class around `node`."""
        cls = self.class_of(node)
        if cls is None:
            return []
        out: list[tuple[ast.expr, Scope]] = []
        for n in ast.walk(cls):
            if isinstance(n, ast.Assign | ast.AnnAssign) and n.value is not None:
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                for t in targets:
                    if (
                        isinstance(t, ast.Attribute)
                        and t.attr == attr
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "self"
                    ):
                        out.append((n.value, self.scope_of(n)))
        return out

    # --- where values come from ------------------------------------------------------

    def origins(  # noqa: PLR0911, PLR0912 - one case per kind of expression
        self, expr: ast.expr, depth: int = 0, *, params: bool = True
    ) -> list[ast.expr]:
        """The expressions a value may come from, following names through assignments,
        `self.x` attributes, parameters (via call sites), same-file function returns and
        module methods that return self. Unknown sources are simply absent."""
        if depth > _MAX_DEPTH:
            return []
        scope = self.scope_of(expr)
        if isinstance(expr, ast.Name):
            values = self.assigned(scope, expr.id, module_too=True)
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
        if isinstance(expr, ast.Call):
            f = expr.func
            if isinstance(f, ast.Attribute) and f.attr in SELF_RETURNING:
                return [expr, *self.origins(f.value, depth + 1, params=params)]
            out = [expr]
            for func in self.callees(expr):
                for ret in ast.walk(func):
                    if (
                        isinstance(ret, ast.Return)
                        and ret.value is not None
                        and self._owner(ret) is func
                    ):
                        out += self.origins(ret.value, depth + 1, params=params)
            return out
        if isinstance(expr, _Pick):
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
        return [expr]

    def param_args(self, func: FuncNode, name: str) -> list[ast.expr]:
        """The arguments passed for parameter `name` at the call sites of `func`."""
        params = [a.arg for a in func.args.posonlyargs + func.args.args]
        if name not in params and name not in [a.arg for a in func.args.kwonlyargs]:
            return []
        is_method = self.class_of(func) is not None and params[:1] == ["self"]
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

    @functools.cache  # noqa: B019
    def call_sites(self, func: FuncNode) -> tuple[ast.Call, ...]:
        return tuple(c for c in self.calls if func in self.callees(c))

    def callees(self, call: ast.Call) -> tuple[FuncNode, ...]:
        if call in self._callees:
            return self._callees[call]
        self._callees[call] = ()  # while resolving: a cycle finds nothing more
        found = self._resolve_callees(call)
        self._callees[call] = found
        return found

    def _resolve_callees(self, call: ast.Call) -> tuple[FuncNode, ...]:
        """The same-file functions a call reaches: `f()`, `self.m()`, `obj.m()` where obj
        was built from a class of this file, and `Cls()` (its __init__)."""
        f = call.func
        if isinstance(f, ast.Name):
            if f.id in self.classes:
                return tuple(self._methods(self.classes[f.id], "__init__"))
            if f.id in self.aliases:
                return ()
            return tuple(
                fn
                for fn in self.functions.get(f.id, ())
                if self.class_of(fn) is None or self._is_nested_in(fn, call)
            )
        if isinstance(f, ast.Attribute):
            if isinstance(f.value, ast.Name) and f.value.id == "self":
                cls = self.class_of(call)
                return tuple(self._methods(cls, f.attr)) if cls else ()
            found: list[FuncNode] = []
            for origin in self.origins(f.value, 1, params=False):
                if isinstance(origin, ast.Call) and isinstance(origin.func, ast.Name):
                    cls_node = self.classes.get(origin.func.id)
                    if cls_node is not None:
                        found += self._methods(cls_node, f.attr)
            return tuple(dict.fromkeys(found))
        return ()

    def _is_nested_in(self, fn: FuncNode, call: ast.Call) -> bool:
        return self.scope_of(fn) is not self.tree and self.scope_of(fn) is self.scope_of(call)

    def _methods(self, cls: ast.ClassDef, name: str, depth: int = 0) -> list[FuncNode]:
        own = [
            n
            for n in cls.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name
        ]
        if own or depth > 4:
            return own
        for base in cls.bases:  # a base class of this file defines it
            if isinstance(base, ast.Name) and base.id in self.classes:
                found = self._methods(self.classes[base.id], name, depth + 1)
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
                _bind(table, elt, _Pick(value, i))


class _Pick(ast.Subscript):
    """Element i of a value unpacked into a tuple target (a synthetic node)."""

    def __init__(self, value: ast.expr, index: int) -> None:
        super().__init__(value=value, slice=ast.Constant(index), ctx=ast.Load())
        ast.copy_location(self, value)
        self.index = index


def kwarg(call: ast.Call, name: str, position: int | None = None) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    if position is not None and position < len(call.args):
        arg = call.args[position]
        return None if isinstance(arg, ast.Starred) else arg
    return None


def const(expr: ast.expr | None) -> object:
    """A literal's value; `...` (Ellipsis) when it is not a literal."""
    return expr.value if isinstance(expr, ast.Constant) else ...


def last(qualname: str) -> str:
    return qualname.rsplit(".", 1)[-1]
