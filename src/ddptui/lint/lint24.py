"""Round 24, from the misses of blind batch Q: where a finding is said so that the line
shown is the one the user changes."""

from __future__ import annotations

import ast

from ddptui.lint.script import Script


def bn_anchor(s: Script, layer: ast.Call, wrap: ast.Call) -> ast.AST:
    """Where a BatchNorm layer of another file is said: beside the wrap when the project
    wraps the model in a helper module (MagFace's `builder()`: the conversion goes right
    before that `DistributedDataParallel(...)`), at the layer when that module defines it
    too (lightweight-gan), else where the entry builds or wraps the model."""
    home = s.module_of(wrap)
    if home is s.entry:
        return s.entry_anchor(wrap)
    return layer if s.module_of(layer) is home else wrap
