"""DDP-INIT-BEFORE-SET-DEVICE, from a miss of blind batch AI2 (theolepage/sslsv,
train_distributed.py before the fix that made it `torch.cuda.set_device(rank)`): the
process "picks" its GPU with `torch.cuda.device(rank)` written as a statement.
`torch.cuda.device` is a context manager: called alone it builds the object and drops it,
so the current GPU stays 0 in every process, and NCCL's state, barriers and anything put
on "cuda" land on GPU 0 of each node.

Said where the statement is, in a project that starts a process group and picks no GPU
any other way (`set_device`, CUDA_VISIBLE_DEVICES, `device_id=` to the group)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.rules_set_device import _cuda_picker
from ddptui.lint.script import Script
from ddptui.lint.syntax import kwarg, last


def device_context_as_statement(s: Script, f: Flow) -> Iterator[Hit]:
    inits = [c for c in s.calls if last(s.call_name(c)) == "init_process_group"]
    if not inits or any(_cuda_picker(s, c) for c in s.calls):
        return
    if f.uses("CUDA_VISIBLE_DEVICES") or any(kwarg(c, "device_id") is not None for c in inits):
        return
    for c in s.calls:
        stmt = s.parents.get(c)
        if (
            isinstance(stmt, ast.Expr)
            and s.call_name(c) == "torch.cuda.device"
            and len(c.args) == 1
            and not c.keywords
        ):
            dev = ast.unparse(c.args[0])
            yield Hit.at(
                "DDP-INIT-BEFORE-SET-DEVICE",
                c,
                (
                    f"`{ast.unparse(c)}` as a statement picks no GPU (`torch.cuda.device` is a "
                    f"context manager, for `with`): the current GPU stays 0 in every process; "
                    f"`torch.cuda.set_device({dev})` picks it"
                ),
                device=dev,
            )


RULES = (device_context_as_statement,)
