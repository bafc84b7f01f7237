"""Round 18: where the fix of a pitfall goes when the code reaches it through a name
(blind batch M)."""

from __future__ import annotations

import ast
import re
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.script import Script

_BN_NAME: Final = re.compile(r"(Lazy)?BatchNorm[123]d$")


def bn_rebinding(s: Script, f: Flow, call: ast.Call) -> ast.AST | None:
    """`norm_class(ch)` builds the layers, `norm_class = nn.BatchNorm2d` at module level,
    and the function that builds and wraps the model rebinds it (`global norm_class;
    norm_class = nn.BatchNorm2d if ... else ...`, lucidrains/lightweight-gan): the user
    picks the layer there, so the SyncBatchNorm choice goes on that line."""
    if not isinstance(call.func, ast.Name):
        return None
    name = call.func.id
    found: list[tuple[bool, ast.Assign]] = []
    for n in s.module_of(call).nodes:
        if not isinstance(n, ast.Global) or name not in n.names:
            continue
        fn = s.scope_of(n)
        wraps = any(s.scope_of(d) is fn for d in f.ddp_calls)
        found += [
            (wraps, st)
            for st in ast.walk(fn)
            if isinstance(st, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in st.targets)
            and _names_bn(st.value)
        ]
    found.sort(key=lambda p: not p[0])
    return found[0][1] if found else None


def _names_bn(e: ast.expr) -> bool:
    return any(
        isinstance(n, ast.Attribute | ast.Name)
        and _BN_NAME.match(n.attr if isinstance(n, ast.Attribute) else n.id) is not None
        for n in ast.walk(e)
    )
