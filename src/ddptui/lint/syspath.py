"""Folders a project puts on `sys.path` before it imports from them, read from the code
(nothing is run): a literal or `os.path.join(here, "..", "lib")`, also through a name
and a helper's parameter (`def add_path(path): sys.path.insert(0, path)`, then
`add_path(lib_path)`), and in a sibling module imported for that side effect alone
(`import _init_paths`, as HRNet, Detectron and their many forks do)."""

from __future__ import annotations

import ast
from pathlib import Path

from ddptui.lint.namevalues import name_values

_MAX_BYTES = 200_000


def path_parts(nodes: list[ast.AST]) -> list[list[str]]:
    """The literal parts of each folder the code appends or inserts on sys.path."""
    out: list[list[str]] = []
    for n in nodes:
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("append", "insert")
            and ast.unparse(n.func.value) == "sys.path"
            and n.args
        ):
            for arg in name_values(n.args[-1], nodes, site=n, depth=3, params=True):
                parts = _parts(arg)
                if parts and parts not in out:
                    out.append(parts)
    return out


def side_effect_imports(nodes: list[ast.AST], here: Path) -> list[tuple[Path, list[str]]]:
    """(folder, parts) of the sys.path folders that `import _init_paths`-like sibling
    modules add: an `import X` (or `from X import cfg`: the module runs all the same) of
    a file beside this one that touches sys.path (caizhongang/SMPLer-X@07d9834,
    main/config.py: `sys.path.insert(0, osp.join(cfg.root_dir, 'common'))`, then
    main/train.py's `from config import cfg` and `from base import Trainer`)."""
    out: list[tuple[Path, list[str]]] = []
    for n in nodes:
        if isinstance(n, ast.Import):
            names = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            names = [n.module]
        else:
            continue
        for name in names:
            if "." in name:
                continue
            path = here / f"{name}.py"
            try:
                if not path.is_file() or path.stat().st_size > _MAX_BYTES:
                    continue
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if "sys.path" not in text:
                continue
            try:
                tree = ast.parse(text)
            except (SyntaxError, ValueError):
                continue  # the module itself gets its per-file note when followed
            out += [(here, parts) for parts in path_parts(list(ast.walk(tree)))]
    return out


def _parts(arg: ast.expr) -> list[str]:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    if (  # `os.path.join`, `osp.join` (a str's `.join` takes one argument)
        isinstance(arg, ast.Call)
        and isinstance(arg.func, ast.Attribute)
        and arg.func.attr == "join"
        and len(arg.args) >= 2
    ):
        return [a.value for a in arg.args[1:] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return []


