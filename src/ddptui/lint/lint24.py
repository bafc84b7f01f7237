"""Round 24, from the misses of blind batch Q: where a finding is said so that the line
shown is the one the user changes."""

from __future__ import annotations

import ast

from ddptui.lint.flow import Flow
from ddptui.lint.nodes import own_nodes
from ddptui.lint.script import Script


def bn_anchors(s: Script, layer: ast.AST, wrap: ast.Call) -> list[ast.AST]:
    """Where a BatchNorm layer of another file is said: where the entry builds or wraps
    the model (OpenOOD's pipeline: `net = get_network(...)`, where its fix converts), and,
    when a helper module wraps the model, beside that wrap too (MagFace's `builder()`: the
    fix 1647d2b converts right before its `DistributedDataParallel(...)`), or at the layer
    when that module defines it (lightweight-gan)."""
    home = s.module_of(wrap)
    out = [s.entry_anchor(wrap)]
    if home is not s.entry:
        out.append(layer if s.module_of(layer) is home else wrap)
    return list(dict.fromkeys(out))


def guards_nearby(s: Script, f: Flow, write: ast.Call) -> bool:
    """The function of another file that holds an unguarded write guards another of its
    statements by the rank itself (ayolov2's TrainModelBuilder.__init__: `if RANK in [-1,
    0]: os.makedirs(...)`, then every rank writes `full_cfg.yaml`): the guard the write
    lacks goes right there, so the write is said in place, not at the entry's call."""
    fn = s.scope_of(write)
    if s.module_of(write) is s.entry or not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    return any(
        isinstance(n, ast.If) and bool(n.body) and f.local_guard(n.body[0]) is not None
        for n in own_nodes(fn)
    )


def both_ways(f: Flow, branch: ast.If) -> bool:
    """Both sides of an `if`/`else` run a backward pass (QEfficient's `if
    train_config.grad_scaler: scaler.scale(loss).backward() else: loss.backward()`): the
    test picks how, not whether, so every iteration still runs one."""

    def backward_in(stmts: list[ast.stmt]) -> bool:
        return any(
            isinstance(n, ast.Call) and f.is_backward(n)
            for st in stmts
            for n in [st, *own_nodes(st)]
        )

    return bool(branch.orelse) and backward_in(branch.body) and backward_in(branch.orelse)


def seed_anchor(s: Script, at: ast.AST) -> ast.AST:
    """DDP-SEED where the model is built or wrapped in another file (RT-DETR's
    `warp_model` in src/misc/dist.py): the seed goes in the entry, right after its call
    that starts the process group (`dist.init_distributed()`), else at the entry's call
    that leads to the model."""
    if s.module_of(at) is s.entry:
        return at
    init = next(
        (
            c
            for c in s.calls
            if isinstance(c.func, ast.Attribute | ast.Name)
            and (c.func.attr if isinstance(c.func, ast.Attribute) else c.func.id)
            == "init_process_group"
        ),
        None,
    )
    for node in (init, at):
        if node is not None and s.module_of(anchor := s.entry_anchor(node)) is s.entry:
            return anchor
    return at


def trimmed(s: Script, shard: ast.AST) -> bool:
    """The data split by rank was first cut to a multiple of the world size (sparsify's fix
    0f662ad: `dataset.select(range(len(dataset) - len(dataset) % world_size))` before
    `dataset.shard(world_size, rank)`): every rank gets as many items."""
    if not (isinstance(shard, ast.Call) and isinstance(shard.func, ast.Attribute)):
        return False
    for o in s.origins(shard.func.value):
        for n in ast.walk(o):
            if (
                isinstance(n, ast.BinOp)
                and isinstance(n.op, ast.Mod | ast.FloorDiv)
                and "len(" in ast.unparse(n.left)
                and "world" in ast.unparse(n.right).lower()
            ):
                return True
    return False
