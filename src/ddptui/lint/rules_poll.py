"""DDP-CKPT-BARRIER where the writer and the readers are the two branches of one rank
test: `if local_rank == 0: torch.save(x, p) else: while not os.path.exists(p): sleep;
torch.load(p)` (DiffuSeq a21fa64 "Fix race condiction"). The file exists as soon as the
write begins, so the other ranks load a half-written file; only a barrier after the
write (or a marker written after it) makes them wait for the whole of it."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddptui.lint.flow import Flow, calls_in
from ddptui.lint.model import Hit
from ddptui.lint.rules_io import _path, _torch
from ddptui.lint.script import Script


def _polls(s: Script, stmts: list[ast.stmt], path: str) -> bool:
    """A loop in these statements waits on `os.path.exists(path)` (or `.exists()`)."""
    for st in stmts:
        if isinstance(st, ast.While) and any(
            isinstance(c, ast.Call) and s.call_name(c).endswith("exists") and path in ast.unparse(c)
            for c in ast.walk(st.test)
        ):
            return True
    return False


def _in_memory(s: Script, path: ast.expr) -> bool:
    """`io.BytesIO()` (or a file object of a `with`): no file the others could see."""
    return any(
        isinstance(o, ast.Call) and s.call_name(o).endswith(("BytesIO", "TemporaryFile"))
        for o in [path, *s.origins(path)]
    ) or any(
        isinstance(a, ast.withitem)
        and a.optional_vars is not None
        and ast.unparse(a.optional_vars) == ast.unparse(path)
        for a in s.nodes
    )


def save_then_load_across_branches(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.distributed:
        return
    for n in s.nodes:
        if not isinstance(n, ast.If) or not n.orelse or not f.is_rank_test(n.test):
            continue
        for writer, reader in ((n.body, n.orelse), (n.orelse, n.body)):
            saves = [c for c in calls_in(writer) if _torch(s, c, "save")]
            for load in (c for c in calls_in(reader) if _torch(s, c, "load")):
                target = _path(load, 0, "f")
                if target is None:
                    continue
                path = ast.unparse(target)
                save = next(
                    (c for c in saves if (p := _path(c, 1, "f")) and ast.unparse(p) == path), None
                )
                before = [c for c in calls_in(reader) if c.lineno < load.lineno]
                if save is None or _in_memory(s, target) or any(f.call_sync(c) for c in before):
                    continue  # a buffer in memory, or the readers wait in a collective
                waits = (
                    "wait only until the file exists, which it does as soon as the write begins"
                    if _polls(s, reader, path)
                    else "do not wait for the write at all"
                )
                yield Hit.at(
                    "DDP-CKPT-BARRIER",
                    load,
                    (
                        f"the ranks where `{ast.unparse(n.test)}` is "
                        f"{'true' if reader is n.body else 'false'} load "
                        f"`{path}` here while the others write it (line {save.lineno}); they "
                        f"{waits}, so they can read a half-written file"
                    ),
                    saved_at=save.lineno,
                )
                return


RULES = (save_then_load_across_branches,)
