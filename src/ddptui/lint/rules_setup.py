"""Rules about how a process joins the group: the process group started before the
process picks its GPU, and a world size counted from this node's GPUs under a launcher
that already says how many processes there are."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.rules_project import rank_kind
from ddptui.lint.script import Script
from ddptui.lint.syntax import const, kwarg, last


def _inits(s: Script) -> list[ast.Call]:
    return [c for c in s.calls if last(s.call_name(c)) == "init_process_group"]


def init_before_set_device(s: Script, f: Flow) -> Iterator[Hit]:
    """`dist.init_process_group("nccl")`, a collective or a `.cuda()`, and only then
    `torch.cuda.set_device(...)` in the same function: what runs in between runs on the
    current GPU, GPU 0 in every process (an init directly followed by set_device is
    harmless: nothing ran on the wrong GPU)."""
    for init in _inits(s):
        backend = const(kwarg(init, "backend", 0))
        if (backend is not None and backend != "nccl") or kwarg(init, "device_id") is not None:
            continue
        scope = s.scope_of(init)
        later = [
            c
            for c in own_nodes(scope)
            if isinstance(c, ast.Call)
            and last(s.call_name(c)) == "set_device"
            and s.call_name(c).startswith("torch")
            and c.lineno > init.lineno
        ]
        earlier = [
            c
            for c in own_nodes(scope)
            if isinstance(c, ast.Call)
            and last(s.call_name(c)) == "set_device"
            and c.lineno < init.lineno
        ]
        between = [
            c
            for c in own_nodes(scope)
            if isinstance(c, ast.Call)
            and later
            and init.lineno < c.lineno < later[0].lineno
            and (f.collective(c) or _touches_gpu(s, c))
        ]
        if later and not earlier and between:
            yield Hit.at(
                "DDP-INIT-BEFORE-SET-DEVICE",
                init,
                (
                    f"`{ast.unparse(init)[:60]}` starts NCCL, and "
                    f"`{ast.unparse(between[0])[:50]}` (line {between[0].lineno}) runs before "
                    f"`{ast.unparse(later[0])}` (line {later[0].lineno}): on GPU 0 in every "
                    "process"
                ),
                device=ast.unparse(later[0].args[0]) if later[0].args else "local_rank",
            )
            return


def _touches_gpu(s: Script, c: ast.Call) -> bool:
    """A call that puts something on the current GPU: `.cuda()`, `.to("cuda")`,
    `torch.device("cuda")` users."""
    name = last(s.call_name(c))
    if name == "cuda" and not c.args:
        return True
    return name == "to" and bool(c.args) and const(c.args[0]) == "cuda"


def world_from_device_count(s: Script, f: Flow) -> Iterator[Hit]:
    """`world_size = torch.cuda.device_count()` given to `init_process_group` in a script
    a launcher starts (RANK from the environment, no mp.spawn): on two nodes the world
    is twice that, and the group never completes."""
    if f.uses("spawn", "start_processes", "Process"):
        return  # the script starts its own processes: one node by construction
    for init in _inits(s):
        world = kwarg(init, "world_size")
        rank = kwarg(init, "rank")
        if world is None or rank is None:
            continue
        kind = rank_kind(s, rank) or _named_local(rank)
        if kind is None:
            continue
        counted = [
            o
            for o in [world, *s.origins(world)]  # `world_size=torch.cuda.device_count()`
            if isinstance(o, ast.Call) and last(s.call_name(o)) == "device_count"
        ]
        # (a local rank given as the rank, `rank=args.local_rank` (relora before its
        # multi-node fix): a launcher's process too, whose node count the code ignores)
        if counted and (_from_env(s, rank) or kind == "local"):
            # said where the count is taken, and at the argument too (where the fix may go)
            here = counted[0] is world or (
                world.lineno == counted[0].lineno and s.module_of(world) is s.module_of(counted[0])
            )
            counted_at = "" if here else f" at line {world.lineno}"
            yield Hit.at(
                "DDP-WORLD-FROM-DEVICE-COUNT",
                counted[0],
                (
                    f"`{ast.unparse(counted[0])}` is this node's GPU count, given as the world "
                    f"size{counted_at} to `init_process_group` (line {init.lineno}) while the "
                    f"rank `{ast.unparse(rank)}` comes from the launcher: on more than one "
                    "node the group never completes"
                ),
                also=() if here else ((world, "given as the world size at"),),
            )
            return


def _named_local(rank: ast.expr) -> str | None:
    """'local' for a rank whose name says so and whose value the code does not show (a
    function's `local_rank` parameter, reached through `getattr(module, "init_dist_%s" %
    launcher)`: OpenPCDet 1f5b787)."""
    name = rank.attr if isinstance(rank, ast.Attribute) else getattr(rank, "id", "")
    return "local" if name.lower().replace("_", "") in {"localrank", "lrank"} else None


def _from_env(s: Script, rank: ast.expr) -> bool:
    return any("environ" in ast.unparse(o) or "getenv" in ast.unparse(o) for o in s.origins(rank))


RULES = (init_before_set_device, world_from_device_count)
