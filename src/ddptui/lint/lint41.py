"""Precision of lint41, from the warnings on correct projects of blind batches V1..AD2.

- DDP-ALL-RANKS-IO in a dataset's item loader: a write in `__getitem__`, or in a method of
  the same class that `__getitem__` reaches through `self.<method>(...)` calls (vits2's and
  Bert-VITS2's spectrogram cache: `__getitem__` -> `get_audio_text_speaker_pair` ->
  `get_audio`, which `torch.save`s the spectrogram of that one clip). The distributed
  sampler hands each rank its own items, so no two ranks write the same item's file. A
  write in the dataset's `__init__` (every rank builds the dataset) or in a method
  `__getitem__` does not reach keeps the finding.
- DDP-RANK-DIVERGENCE on a `break` under a call whose answer a collective decides (wenet's
  `wenet_join`, CosyVoice's `cosyvoice_join`: `try: dist.monitored_barrier(group_join,
  timeout)` / `except RuntimeError: return True`, the uneven-workload join): every rank
  waits in the same barrier and leaves on its outcome, not on its own data. A function
  that only reads this rank's loss or data, with no collective deciding its return, keeps
  the finding.
- DDP-ALL-RANKS-IO on `open(sys.stdout.fileno(), "w", buffering=1)` (open-pi-zero's line
  buffered stdout): a file descriptor this process already holds, not a path shared by
  the ranks.
"""

from __future__ import annotations

import ast
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.script import Script
from ddptui.lint.syntax import last

_HOPS: Final = 3  # self-calls followed from `__getitem__`


def item_loader_write(s: Script, c: ast.Call) -> bool:
    """`c` runs in a dataset's `__getitem__` or a method of its class that `__getitem__`
    reaches through `self.<method>(...)` (see the module docstring)."""
    fn = s.scope_of(c)
    cls = s.class_of(c)
    if not isinstance(fn, ast.FunctionDef) or cls is None or s.parents.get(fn) is not cls:
        return False
    methods = {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)}
    start = methods.get("__getitem__")
    if start is None:
        return False
    reached, todo = {start.name}, [start]
    for _ in range(_HOPS + 1):
        nxt = []
        for m in todo:
            for call in s.function_calls(m):
                func = call.func
                if (
                    isinstance(func, ast.Attribute)
                    and isinstance(func.value, ast.Name)
                    and func.value.id == "self"
                    and func.attr in methods
                    and func.attr not in reached
                ):
                    reached.add(func.attr)
                    nxt.append(methods[func.attr])
        todo = nxt
    return fn.name in reached and fn.name != "__init__"


def descriptor(s: Script, path: ast.expr | None) -> bool:
    """`open(sys.stdout.fileno(), ...)` / `open(1, ...)`: a descriptor, not a shared path."""
    if isinstance(path, ast.Constant):
        return isinstance(path.value, int) and not isinstance(path.value, bool)
    return isinstance(path, ast.Call) and last(s.call_name(path)) == "fileno"


def collective_answer(s: Script, f: Flow, test: ast.expr) -> bool:
    """`test` is (`not`) a call of project functions each of which returns from the
    handler of a `try` around a collective (see the module docstring)."""
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    if not isinstance(test, ast.Call):
        return False
    callees = s.callees(test)
    return bool(callees) and all(_returns_on_collective(f, fn) for fn in callees)


def _returns_on_collective(f: Flow, fn: ast.AST) -> bool:
    for t in ast.walk(fn):
        if not isinstance(t, ast.Try):
            continue
        held = any(
            isinstance(c, ast.Call) and f.collective(c) for st in t.body for c in ast.walk(st)
        )
        answers = any(isinstance(r, ast.Return) for h in t.handlers for r in ast.walk(h))
        if held and answers:
            return True
    return False
