"""DDP-CKPT-BARRIER where the writer and the readers are the two branches of one rank
test: `if local_rank == 0: torch.save(x, p) else: while not os.path.exists(p): sleep;
torch.load(p)` (DiffuSeq a21fa64 "Fix race condiction"). The file exists as soon as the
write begins, so the other ranks load a half-written file; only a barrier after the
write (or a marker written after it) makes them wait for the whole of it."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.nodes import calls_in
from ddptui.lint.reach import walked
from ddptui.lint.rules_io import _path, _torch, _where
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


def _keys(s: Script, path: ast.expr) -> set[str]:
    """What names the file in a path expression: constants (`_TRAIN_STATE_FILE`, a
    string), followed through the names it was built from."""
    out: set[str] = set()
    for e in [path, *s.origins(path)]:
        for n in ast.walk(e):
            if isinstance(n, ast.Name) and n.id.lstrip("_").isupper():
                out.add(n.id)
            elif isinstance(n, ast.Constant) and isinstance(n.value, str) and "." in n.value:
                out.add(repr(n.value))
    return out


def save_returns_before_the_write(s: Script, f: Flow) -> Iterator[Hit]:
    """A checkpoint class whose save method writes a file on rank 0 only and returns on
    the other ranks with no barrier after the write, while its load method reads that
    file on every rank (KempnerForge c36863b "Fix race in CheckpointManager save/load
    collectives": "save() returned on non-rank-0 before rank-0 committed train_state.pt").
    """
    if not f.distributed:
        return
    for cls in s.classes.values():
        methods = [m for m in cls.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)]
        for writer in methods:
            for save in (c for c in calls_in(writer.body) if _torch(s, c, "save")):
                target = _path(save, 1, "f")
                if target is None or f.local_guard(save) is None:
                    continue
                keys = _keys(s, target)
                if not keys:
                    continue
                after = [c for c in calls_in(writer.body) if c.lineno > save.lineno]
                if any(f.call_sync(c) for c in after):
                    continue
                for reader in methods:
                    load = next(
                        (
                            c
                            for c in calls_in(reader.body)
                            if reader is not writer
                            and _torch(s, c, "load")
                            and f.local_guard(c) is None
                            and (p := _path(c, 0, "f")) is not None
                            and keys & _keys(s, p)
                        ),
                        None,
                    )
                    if (
                        load is None
                        or _loaded_only_before_saved(s, writer.name, reader.name)
                        or _loaded_at_construction(s, cls, reader.name)
                    ):
                        continue
                    yield Hit.at(
                        "DDP-CKPT-BARRIER",
                        save,
                        (
                            f"`{cls.name}.{writer.name}` writes `{ast.unparse(target)}` on one "
                            "rank only and returns on the others with no barrier after the "
                            f"write, while `{cls.name}.{reader.name}` loads it on every rank "
                            f"({_where(s, load, save)}): a rank that gets there first "
                            "reads a half-written or an older file"
                        ),
                        saved_at=save.lineno,
                        # the class alone does not show a load after a save in one run
                        severity="warning",
                    )
                    return


def _loaded_at_construction(s: Script, cls: ast.ClassDef, reader: str) -> bool:
    """The class calls its reader only as `self.load()` in its own `__init__`, and nothing
    else in the project calls an object's method of that name: the object resumes once,
    when it is built, before its save can run (ProPainter's and E2FGVI's `Trainer`,
    sczhou/ProPainter@e870e79 core/trainer.py:103)."""
    init = next(
        (m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name == "__init__"), None
    )
    if init is None:
        return False
    own = [a for a in _calls_of(s, [cls], reader) if ast.unparse(a.value) == "self"]
    others = [
        a
        for a in _calls_of(s, [m.tree for m in s.modules], reader)
        if ast.unparse(a.value) != "self" and not _module_value(s, a.value)
    ]
    return bool(own) and not others and all(s.scope_of(c) is init for c in own)


def _calls_of(s: Script, roots: list[ast.AST], name: str) -> list[ast.Attribute]:
    """The `x.name` of every `x.name(...)` call under these nodes."""
    return [
        n.func
        for r in roots
        for n in walked(s, r)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == name
    ]


def _module_value(s: Script, value: ast.expr) -> bool:
    """`torch`, `json`, `np`: a name bound by an import, not an object."""
    if not isinstance(value, ast.Name):
        return False
    mod = s.module_of(value)
    return value.id in mod.aliases and not s.assigned(s.scope_of(value), value.id)


def _loaded_only_before_saved(s: Script, writer: str, reader: str) -> bool:
    """The project calls the class's reader, then its writer, once each way in one
    function and outside any loop around both (resume at start, save at the end:
    pytorch/examples FSDP2): no rank can read what this run is still writing."""
    by_obj: dict[str, list[ast.Call]] = {}
    for n in s.nodes:
        if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)):
            continue
        if n.func.attr in (writer, reader):
            by_obj.setdefault(ast.unparse(n.func.value), []).append(n)
    # the one object whose both methods are called (not `torch.save` beside `ckpt.load`)
    both = [
        cs for cs in by_obj.values()
        if {c.func.attr for c in cs if isinstance(c.func, ast.Attribute)} == {writer, reader}
    ]  # fmt: skip
    if len(both) != 1:
        return False
    calls = both[0]
    saves = [c for c in calls if isinstance(c.func, ast.Attribute) and c.func.attr == writer]
    loads = [c for c in calls if c not in saves]
    scope = s.scope_of(saves[0])
    if any(s.scope_of(c) is not scope for c in calls):
        return False
    if max(c.lineno for c in loads) >= min(c.lineno for c in saves):
        return False
    first_save = min(saves, key=lambda c: c.lineno)
    return not any(
        isinstance(a, ast.For | ast.AsyncFor | ast.While) for a in s.ancestors(first_save)
    )


RULES = (save_then_load_across_branches, save_returns_before_the_write)
