"""lint16's readings, from the false errors of blind batch L: a rank-only DDP forward
under no_grad inside a loop that trains on every rank (its one buffer broadcast is
answered by the other ranks' next training forward); a seed from the node's index."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.rules_seed import _seeding as seeding
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


_NODE_INDEX: Final = frozenset(
    {"node_id", "node_idx", "node_rank", "nodeid", "machine_rank", "group_rank", "node_index"}
)


def _node_index(s: Script, e: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Name) and n.id.lower() in _NODE_INDEX)
        or (isinstance(n, ast.Attribute) and n.attr.lower() in _NODE_INDEX)
        or (isinstance(n, ast.Constant) and n.value in ("NODE_RANK", "GROUP_RANK"))
        for n in ast.walk(e)
    )


def node_seed(s: Script, f: Flow) -> Iterator[Hit]:
    """`set_seeds(cfg, node_id)`: a seed from the node's index, not the process's rank,
    is the same on every GPU process of a node (vissl 8e0476b, vissl/engines/train.py:79;
    PR #299 passes dist_rank)."""
    if not f.distributed:
        return
    for c in s.calls:
        args = [*c.args, *(k.value for k in c.keywords)]
        if not args or not seeding(s, c) or not any(_node_index(s, a) for a in args):
            continue
        if any(not _node_index(s, a) and f.is_rank_expr(a) for a in args):
            continue  # the process's rank goes in too
        yield Hit.at(
            "DDP-RANK-SEED",
            c,
            (
                f"`{ast.unparse(c)[:60]}` seeds from the node's index, not the process's "
                "rank: every GPU process of a node draws the same random stream"
            ),
            seed=ast.unparse(args[0]),
        )


RULES = (node_seed,)
