"""An attribute a model's `__init__` may leave without parameters: DDP-FIND-UNUSED's
unused-layer reading asks it before it calls a layer no method reads an error (blind batch
AP1's false error on a correct project, raoyongming/GFNet)."""

from __future__ import annotations

import ast
import re
from typing import Final

from ddptui.lint.reach import self_attr
from ddptui.lint.script import Script
from ddptui.lint.syntax import last

# torch layers with no parameters: one of them in an attribute's other arm means the
# unused layer may hold nothing for DDP to wait for
_PARAMETER_FREE: Final = re.compile(
    r"(Identity|Dropout\d?d?|ReLU6?|GELU|SiLU|Tanh|Sigmoid|Softmax|Flatten|Upsample"
    r"|(Adaptive)?(Max|Avg)Pool\dd)$"
)


def may_hold_nothing(s: Script, init: ast.FunctionDef, attr: str) -> bool:
    """`__init__` also gives `self.<attr>` a parameter-free layer or None on some path: the
    timm-style `self.pre_logits = nn.Identity()` unless `representation_size` is given
    (raoyongming/GFNet's gfnet.py: its default build has nothing unused)."""
    for n in ast.walk(init):
        if not (isinstance(n, ast.Assign) and len(n.targets) == 1):
            continue
        if self_attr(n.targets[0]) != attr:
            continue
        v = n.value
        if isinstance(v, ast.Constant) and v.value is None:
            return True
        if isinstance(v, ast.Call) and _PARAMETER_FREE.match(last(s.call_name(v))):
            return True
    return False
