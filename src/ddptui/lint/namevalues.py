"""What a name is given, read from raw module nodes before a Script exists (the project
walker's run-time loaders and sys.path folders need it while the project is still being
gathered): the values of its assignments among `nodes`, followed `depth` steps, and with
`params` also the arguments of the calls of the function around `site` when the name is
one of its parameters (`def add_path(path): sys.path.insert(0, path)`, then
`add_path(lib_path)`). A name nothing assigns stays as it is."""

from __future__ import annotations

import ast
from collections.abc import Sequence


def name_values(
    arg: ast.expr,
    nodes: Sequence[ast.AST],
    *,
    site: ast.AST | None = None,
    depth: int = 1,
    params: bool = False,
) -> list[ast.expr]:
    """`arg` itself, or what the name is given among `nodes` (see the module's text)."""
    if not isinstance(arg, ast.Name) or depth <= 0:
        return [arg]
    out: list[ast.expr] = []
    for n in nodes:
        if isinstance(n, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == arg.id for t in n.targets
        ):
            out += name_values(n.value, nodes, site=n, depth=depth - 1, params=params)
        elif (
            params
            and site is not None
            and isinstance(n, ast.FunctionDef)
            and any(x is site for x in ast.walk(n))
        ):
            names = [p.arg for p in n.args.posonlyargs + n.args.args]
            if arg.id not in names:
                continue
            i = names.index(arg.id)
            for c in nodes:
                if (
                    isinstance(c, ast.Call)
                    and isinstance(c.func, ast.Name)
                    and c.func.id == n.name
                    and len(c.args) > i
                ):
                    out += name_values(c.args[i], nodes, site=c, depth=depth - 1, params=params)
    return out or [arg]
