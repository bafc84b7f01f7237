"""Calibration from blind batch R (lint25): two DDP-HARDCODED-DEVICE readings on correct
projects rest on what the code does not show.

- A device built from the global rank and stored where nothing reads it (CosyVoice's
  `Executor.__init__`: `self.device = torch.device('cuda:{}'.format(self.rank))`, and no
  `.device` of the executor is read anywhere in the project): no GPU is picked from it.
- The global rank given to `set_device` in a file that first sets the GPU from LOCAL_RANK
  (TorchRec's BERT4Rec example: `set_device(device)` from LOCAL_RANK in `main`, then
  `set_device(dist.get_rank())` per epoch): on one node both name the same GPU; from the
  second node on the later call names one that does not exist. Whether the example runs on
  several nodes is not visible, so the finding is a warning that says so. A global rank
  given to `set_device` with no local-rank device in the file stays an error.
"""

from __future__ import annotations

import ast

from ddptui.lint.script import Script


def device_doubt(s: Script, node: ast.AST) -> str | None:
    return _unread_store(s, node) or _reset_after_local(s, node)


def _unread_store(s: Script, node: ast.AST) -> str | None:
    at: ast.AST | None = node
    while at is not None and not isinstance(at, ast.stmt):
        at = s.parents.get(at)
    if not (isinstance(at, ast.Assign) and len(at.targets) == 1 and _device_value(at.value)):
        return None
    tgt = at.targets[0]
    if isinstance(tgt, ast.Attribute) and ast.unparse(tgt.value) == "self":
        name = tgt.attr
        cls = next((a for a in s.ancestors(at) if isinstance(a, ast.ClassDef)), None)
        if cls is None:
            return None
        read = any(
            isinstance(n, ast.Attribute)
            and n.attr == name
            and isinstance(n.ctx, ast.Load)
            and ((ast.unparse(n.value) == "self" and cls in s.ancestors(n)) or _of_class(s, n, cls))
            for n in s.nodes
        )
    elif isinstance(tgt, ast.Name):
        name = tgt.id
        read = any(
            isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
            for n in s.nodes
        )
    else:
        return None
    if read:
        return None
    return (
        f"not certain: `{ast.unparse(tgt)}` is stored here and read nowhere in the project, "
        "so no GPU is picked from it"
    )


def _device_value(v: ast.expr) -> bool:
    """The stored value is the device itself (`torch.device(...)`, a "cuda:N" string), not
    something built with it (`DDP(m, device_ids=[0])` is a model)."""
    if isinstance(v, ast.Constant | ast.JoinedStr):
        return True
    return isinstance(v, ast.Call) and ast.unparse(v.func).split(".")[-1] in ("device", "format")


def _of_class(s: Script, n: ast.Attribute, cls: ast.ClassDef) -> bool:
    """`executor.device` where `executor = Executor(...)`."""
    if not isinstance(n.value, ast.Name) or n.value.id == "self":
        return False
    return any(
        isinstance(o, ast.Call) and ast.unparse(o.func).split(".")[-1] == cls.name
        for o in s.origins(n.value)
    )


def _set_device(n: ast.AST) -> bool:
    return (
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute | ast.Name)
        and (n.func.attr if isinstance(n.func, ast.Attribute) else n.func.id) == "set_device"
    )


def _reset_after_local(s: Script, node: ast.AST) -> str | None:
    call: ast.AST | None = node
    while call is not None and not isinstance(call, ast.stmt) and not _set_device(call):
        call = s.parents.get(call)
    if call is None or not _set_device(call):
        return None
    here = s.path_of(call)
    local = any(
        isinstance(n, ast.Constant) and n.value == "LOCAL_RANK" and s.path_of(n) == here
        for n in s.nodes
    )
    first = [
        n
        for n in s.nodes
        if n is not call
        and _set_device(n)
        and s.path_of(n) == here
        and "rank" not in ast.unparse(n).lower()
    ]
    if not (local and first):
        return None
    line = getattr(first[0], "lineno", "?")
    return (
        f"not certain: the file also sets the GPU from LOCAL_RANK (line {line}); the global "
        "rank names the same GPU on one node, and the code does not show a run on several"
    )
