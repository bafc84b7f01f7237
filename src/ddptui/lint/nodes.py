"""A scope's own nodes and the calls among them, each listed once per parsed node: the
rules ask for them of the same functions and statements again and again (flow.py hands
them on to the rules that import them from there)."""

from __future__ import annotations

import ast
import weakref
from collections.abc import Iterable, Iterator
from typing import Final

_SCOPES: Final = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.Module)
# A scope's own nodes, listed once: rules ask them of the same functions again and again.
# Weak keys: the lists go with the parsed code they list.
_OWN: weakref.WeakKeyDictionary[ast.AST, tuple[ast.AST, ...]] = weakref.WeakKeyDictionary()


def own_nodes(root: ast.AST) -> Iterator[ast.AST]:
    """Nodes under `root`, not descending into nested functions, lambdas or classes."""
    if isinstance(root, _SCOPES):
        found = _OWN.get(root)
        if found is None:
            found = _OWN[root] = tuple(_own_nodes(root))
        return iter(found)
    return _own_nodes(root)


def _own_nodes(root: ast.AST) -> Iterator[ast.AST]:
    stack = list(ast.iter_child_nodes(root))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            stack.extend(ast.iter_child_nodes(node))


# The calls of one root and its own nodes, listed once: rules ask for the calls of the same
# statements again and again (a 208-file project asked for 870,000 statements' nodes).
_CALLS: weakref.WeakKeyDictionary[ast.AST, tuple[ast.Call, ...]] = weakref.WeakKeyDictionary()


def _root_calls(root: ast.AST) -> tuple[ast.Call, ...]:
    found = _CALLS.get(root)
    if found is None:
        found = _CALLS[root] = tuple(
            n for n in (root, *own_nodes(root)) if isinstance(n, ast.Call)
        )
    return found


def calls_in(nodes: Iterable[ast.AST]) -> list[ast.Call]:
    out = [c for root in nodes for c in _root_calls(root)]
    return sorted(out, key=lambda c: (c.lineno, c.col_offset))
