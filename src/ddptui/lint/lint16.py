"""lint16's readings, from the false errors of blind batch L: a rank-only DDP forward
under no_grad inside a loop that trains on every rank (its one buffer broadcast is
answered by the other ranks' next training forward)."""

from __future__ import annotations

import ast
from typing import Final

from ddptui.lint.flow import Flow, own_nodes
from ddptui.lint.script import Script

# what SyncFlow adds to a DDP forward under no_grad whose model shows buffers
BUFFERS: Final = " (under no_grad: its buffer broadcast)"


def in_training_loop(s: Script, f: Flow, call: ast.Call, guard: ast.AST) -> bool:
    """A rank-only DDP forward under no_grad syncs only the model's buffers, once; DDP's
    `require_forward_param_sync` then makes the rank skip that broadcast in its next
    training forward while the others do theirs: in a loop that trains on every rank the
    counts match (YOLOP's per-epoch `validate()` on rank 0), after the loop nothing does."""
    for loop in s.ancestors(call):
        if isinstance(loop, ast.FunctionDef | ast.AsyncFunctionDef):
            return False
        if isinstance(loop, ast.For | ast.AsyncFor | ast.While) and guard not in set(
            s.ancestors(loop)
        ):
            return any(
                isinstance(c, ast.Call)
                and c is not call
                and guard not in set(s.ancestors(c))
                and (w := f.call_sync(c)) is not None
                and BUFFERS not in w
                for c in own_nodes(loop)
            )
    return False
