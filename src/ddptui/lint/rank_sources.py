"""Where a rank's value comes from when its own name says nothing: the list of physical
GPUs read from CUDA_VISIBLE_DEVICES, the values assigned to an attribute anywhere in the
script, and the class-level default a config class declares for `self.x`. Read by
rules_project.rank_kind; kept apart to keep that module small. Pure core: `ast` only."""

from __future__ import annotations

import ast

from ddptui.lint.script import Script


def visible_devices(s: Script, expr: ast.expr) -> bool:
    """The list of physical GPU numbers read from CUDA_VISIBLE_DEVICES (a name given it)."""
    for o in [expr, *s.origins(expr)]:
        if any(
            isinstance(n, ast.Constant) and n.value == "CUDA_VISIBLE_DEVICES" for n in ast.walk(o)
        ):
            return True
    return False


def attr_values(s: Script, text: str) -> list[ast.expr]:
    return [
        n.value
        for n in s.nodes
        if isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Attribute) and ast.unparse(t) == text for t in n.targets)
    ]


def declared(s: Script, text: str) -> list[ast.expr]:
    """For `self.x` that no method assigns: the class-level default a config class declares
    (`global_rank: int = Field(default_factory=get_global_rank)`, pydantic and dataclasses;
    snowflake's ArcticTraining sets the GPU from it)."""
    if not text.startswith("self.") or text.count(".") != 1:
        return []
    return [
        st.value
        for cls in s.classes.values()
        for st in cls.body
        if isinstance(st, ast.AnnAssign)
        and isinstance(st.target, ast.Name)
        and st.target.id == text[5:]
        and isinstance(st.value, ast.Call)
    ]
