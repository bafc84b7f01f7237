"""Rules about checkpoints and files: loading before rank 0 has finished writing (15),
every rank writing the same files (16), per-rank shards loaded on another world size.
The wrapper's state_dict (12) is in rules_save_wrapper.py."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Final

from ddptui.lint.anchor import deep_worker_write, io_helper_call, owning_method, run_level_site
from ddptui.lint.flow import Flow, ident
from ddptui.lint.lint15 import (
    dunder_used,
    none_guarded,
    rank_conjoined_else,
    reloads,
)
from ddptui.lint.lint24 import guards_nearby
from ddptui.lint.lint26_anchor import fallback_write, guarded_sibling, rankless_owner
from ddptui.lint.lint26_order import Event, Frame, branch, events, torch_call
from ddptui.lint.lint36 import rank_guarded_uses
from ddptui.lint.lint41 import descriptor, item_loader_write
from ddptui.lint.lint43 import shared_site
from ddptui.lint.lint50 import caught
from ddptui.lint.model import Hit
from ddptui.lint.nodes import calls_in
from ddptui.lint.project import FuncNode
from ddptui.lint.script import Script
from ddptui.lint.syntax import const, kwarg, last

_WRITE_MODES: Final = ("w", "a", "x")
_DELETERS: Final = frozenset({"os.remove", "os.unlink"})
_DELETES: Final = frozenset({"shutil.rmtree"}) | _DELETERS  # said "deletes", not "writes"
_MORE_PLACES: Final = 5  # later writes of one writer named as second places, at most
_SHARDED_TYPES: Final = frozenset({"SHARDED_STATE_DICT", "LOCAL_STATE_DICT"})


_torch = torch_call  # its home is lint26_order, which the checkpoint walk moved to


def _roots(s: Script) -> list[list[ast.stmt]]:
    top = [
        st
        for st in s.tree.body
        if not isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    ]
    funcs = [fn for fns in s.functions.values() for fn in fns if not s.call_sites(fn)]
    return [top, *[fn.body for fn in funcs]]


def _path(call: ast.Call, position: int, *names: str) -> ast.expr | None:
    for n in names:
        v = kwarg(call, n)
        if v is not None:
            return v
    return kwarg(call, "\0", position)


def ckpt_barrier(s: Script, f: Flow) -> Iterator[Hit]:  # noqa: PLR0912 - one case per event
    if not f.distributed:
        return
    reported: set[int] = set()
    memo: dict[tuple[FuncNode, bool], list[Event]] = {}
    for root in _roots(s):
        pending: ast.Call | None = None
        written: list[ast.Call] = []  # `save_pretrained(dir)` on some ranks, not waited for
        stack: list[Frame] = []
        unwaited: list[tuple[ast.Call, ...]] = []  # call sites of the saves since a sync
        for kind, call, guarded, via in events(s, f, root, False, frozenset(), memo):
            if not isinstance(call, ast.Call):  # an if/else: the else starts from before the if
                pending, written = branch(kind, stack, pending, written)
                continue
            if kind == "psave" and guarded:
                written.append(call)
            elif kind == "pload" and not guarded:
                saved_by = reloads(s, written, call)
                if saved_by is not None and call.lineno not in reported:
                    reported.add(call.lineno)
                    yield _barrier_hit(s, saved_by, call)
            if kind == "save" and guarded:
                pending = call
                unwaited.append(via)
            elif kind == "sync" and not guarded:
                pending = None
                written = []
                unwaited = []
            elif kind == "load" and not guarded and pending is not None:
                saved, loaded = const(_path(pending, 1, "f")), const(_path(call, 0, "f"))
                if isinstance(saved, str) and isinstance(loaded, str) and saved != loaded:
                    continue
                at, by = call, pending
                if s.path_of(pending) != s.path_of(call) and not (
                    isinstance(saved, str) and saved == loaded
                ):
                    # helpers of two files: they meet on one file only where their call
                    # sites in one function pass the same path (lint43)
                    sites = shared_site(s, unwaited, via)
                    if sites is None:
                        continue
                    by, at = sites
                if at.lineno not in reported:
                    reported.add(at.lineno)
                    yield _barrier_hit(s, by, at)
                pending = None


def _barrier_hit(s: Script, saved: ast.Call, call: ast.Call) -> Hit:
    return Hit.at(
        "DDP-CKPT-BARRIER",
        call,
        (
            "every rank loads a checkpoint here, but only some ranks wrote it "
            f"({_where(s, saved, call)}) and nothing waits for that write to finish"
        ),
        saved_at=saved.lineno,
    )


def _where(s: Script, node: ast.AST, here: ast.AST) -> str:
    line = getattr(node, "lineno", 0)
    return f"line {line}" if s.path_of(node) == s.path_of(here) else f"{s.path_of(node)}:{line}"


def file_writer(s: Script, f: Flow, c: ast.Call) -> tuple[str, ast.expr | None] | None:  # noqa: PLR0911, PLR0912 - one case per writer
    """(what, path) for a call that writes a file or starts a logger."""
    qn = s.call_name(c)
    name = last(qn)
    if _torch(s, c, "save"):
        path = _path(c, 1, "f")
        if path is not None and any(
            isinstance(o, ast.Call) and "BytesIO" in s.call_name(o) for o in s.origins(path)
        ):
            return None
        return "torch.save", path
    if name == "save" and "OmegaConf" in qn:
        # `OmegaConf.save(config=options, f=Path(checkpoint_dir) / "options_restart.yaml")`
        # (metatrain before PR #391): the file itself, like torch.save
        return "OmegaConf.save", _path(c, 1, "f")
    if name == "SummaryWriter" or (
        # `importlib.import_module(module).SummaryWriter(log_dir)` (palette's VisualWriter)
        isinstance(c.func, ast.Attribute) and c.func.attr == "SummaryWriter"
    ):
        return "SummaryWriter", _path(c, 0, "log_dir", "logdir")
    if qn in ("wandb.init", "mlflow.start_run"):
        return qn, None
    # (with sharded models every rank must take part in save_pretrained: DDP scripts only)
    if name == "save_pretrained" and f.ddp_calls and kwarg(c, "is_main_process") is None:
        return "save_pretrained", _path(c, 0, "save_directory")
    if name == "FileHandler" and "logging" in qn:
        return "logging.FileHandler", _path(c, 0, "filename")
    if name == "JSONStreamBackend" and "dllogger" in qn:
        # its JSON log file (DeepLearningExamples 8c7d66f DLRM scripts/utils.py:184)
        return "dllogger.JSONStreamBackend", _path(c, 1, "filename")
    if name == "basicConfig" and "logging" in qn and kwarg(c, "filename") is not None:
        return "logging.basicConfig(filename=...)", kwarg(c, "filename")
    if qn in ("open", "builtins.open") or _path_manager_open(qn):
        mode = const(kwarg(c, "mode", 1))
        if isinstance(mode, str) and mode.startswith(_WRITE_MODES):
            return "open(..., " + repr(mode) + ")", _path(c, 0, "file")
    if qn == "shutil.rmtree" and f.ddp_calls and const(kwarg(c, "ignore_errors", 1)) is not True:
        # every rank deletes the shared folder (openpi before 5f7958d: `--overwrite` ran
        # `shutil.rmtree(config.checkpoint_dir)` on all ranks): the slower ones fail
        # with FileNotFoundError or delete what the faster ones already re-created
        return "shutil.rmtree", _path(c, 0, "path")
    if qn in ("shutil.copyfile", "shutil.copy", "shutil.copy2") and f.ddp_calls:
        # every rank copies the config into the same run folder (ayolov2's builder)
        return qn, _path(c, 1, "dst")
    if name in _MEDIA_WRITERS and not s.callees(c):
        path = next((a for a in [*c.args, *(k.value for k in c.keywords)] if _path_like(a)), None)
        if path is not None:
            return f"{ast.unparse(c.func)}", path
    return _deleter_or_dumper(s, f, c)


# a library's one-call writers of a serialised object (batchgenerators' `save_json(obj, file)`
# in nnU-Net, mmcv's `dump`-style helpers have their own names): the path is the second argument
_DUMPERS: Final = frozenset(
    {"save_json", "save_pickle", "write_json", "write_pickle", "save_yaml", "write_yaml"}
)
_MISSING: Final = frozenset(
    {"FileNotFoundError", "OSError", "IOError", "Exception", "BaseException"}
)


def _deleter_or_dumper(s: Script, f: Flow, c: ast.Call) -> tuple[str, ast.expr | None] | None:
    """Every rank deleting one file (`os.remove(latest)`: nnU-Net before 9ee5d6c; the ranks
    race, the losers raise FileNotFoundError, a `try` that catches it excuses it) or dumping
    an object with a library's one-call writer (`save_json(dct, join(out, "debug.json"))`,
    nnU-Net before e99caf5)."""
    qn = s.call_name(c)
    if not f.ddp_calls or s.callees(c):
        return None
    if qn in _DELETERS:
        fn = s.scope_of(c)
        return None if caught(s, c, fn, _MISSING) else (qn, _path(c, 0, "path"))
    if last(qn) in _DUMPERS and len(c.args) > 1:
        return last(qn), _path(c, 1, "file")
    return None


def _path_manager_open(qn: str) -> bool:
    """An `open` of a file-system layer, the same file on a shared disk: iopath's and
    fvcore's `PathManager.open(path, "w")` / `g_pathmgr.open` (detectron2, mmf, fast-reid),
    `fsspec.open`, TensorFlow's `gfile.GFile` / `gfile.Open`."""
    parts = qn.split(".")
    if len(parts) < 2:
        return False
    owner, name = parts[-2].lower(), parts[-1]
    if name == "open":
        return owner in ("pathmanager", "g_pathmgr", "pathmgr", "path_manager", "fsspec")
    return owner == "gfile" and name in ("GFile", "Open")


# libraries' calls that write a file to the path they are given (videos, images, figures)
_MEDIA_WRITERS: Final = frozenset(
    {"make_video", "images_to_video", "write_video", "save_video", "save_image", "imwrite",
     "imsave", "mimsave", "mimwrite", "savefig", "write_gif", "save_gif"}
)  # fmt: skip


def _path_like(expr: ast.expr) -> bool:
    """A file path by its looks: `folder + "/update_" + str(n)`, an f-string with a
    separator, os.path.join."""
    if isinstance(expr, ast.Call) and ident(expr.func) == "join":
        return True
    # (a bare `path` parameter is the caller's business: said there, if anywhere)
    return isinstance(expr, ast.BinOp | ast.JoinedStr) and any(
        isinstance(n, ast.Constant) and isinstance(n.value, str) and "/" in n.value
        for n in ast.walk(expr)
    )


def _referenced(s: Script, node: ast.AST) -> bool:
    owner = s.scope_of(node)
    if not isinstance(owner, ast.FunctionDef | ast.AsyncFunctionDef):
        return True
    if s.call_sites(owner) or dunder_used(s, owner):
        return True
    return any(
        isinstance(n, ast.Name | ast.Attribute)
        and ident(n) == owner.name
        and not isinstance(n.ctx, ast.Store)
        for n in s.nodes
    )


def all_ranks_io(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.distributed:
        return
    seen: dict[tuple[str, str], tuple[Hit, list[tuple[ast.AST, str]]]] = {}  # one per file and writer
    owned: set[ast.AST] = set()
    for c in s.calls:
        found = file_writer(s, f, c)
        if found is None or not _referenced(s, c):
            continue
        what, path = found
        if (path is not None and f.is_rank_expr(path)) or any(
            f.is_rank_expr(kw.value) for kw in c.keywords
        ):
            continue  # one file per rank, on purpose
        if path is not None and _rank_suffixed(s, f, path):
            continue  # `filename + f".rank{rank}"` on the ranks but one (detectron2's logger)
        if path is not None and "devnull" in ast.unparse(path):
            continue  # `open(os.devnull, "w")`: a sink, not a shared file
        if (path is not None and _unique_per_process(s, path)) or (
            descriptor(s, path) or item_loader_write(s, c)
        ):
            # `tmp_<uuid4>` then an atomic os.replace: no two writers share it; a held
            # descriptor; a dataset item's own cache file (lint41)
            continue
        if f.guarded(c) or none_guarded(s, f, c) or rank_guarded_uses(s, f, c):
            continue
        # a helper of another file: said at the entry's call; a writer a project class
        # builds into `self.x` in `__init__` (a logger class): said there, its fix is there
        # (a method of a project class in another file: said in that method, see anchor.py)
        method = owning_method(s, f, c) if s.module_of(c) is not s.entry else None
        method = None if rankless_owner(s, method) else method  # (lint26_anchor)
        method = (
            c if method is None and (deep_worker_write(s, c) or guards_nearby(s, f, c)) else method
        )
        method = c if fallback_write(s, c) else guarded_sibling(s, f, c) or method
        anchor = method or run_level_site(s, f, c, io_helper_call(s, f, s.entry_anchor(c)))
        at = c if _class_owned(s, c) else anchor
        if at is c and anchor is not c:  # once per entry line, as when said there
            if anchor in owned:
                continue
            owned.add(anchor)
        if anchor is c and path is not None and last(s.call_name(c)) in _MEDIA_WRITERS:
            at = path  # `make_video(frames, ...,\n  video_dir + "/update_" + ...)`: the path
        key = (s.path_of(anchor), what)
        made = _path_made(s, path, c)
        if key in seen:
            # the same writer again in that file: a second place, and where its path is made
            seen[key][1].extend([(at, "also written at"), *made])
            continue
        summary = (
            f"`{what}` runs on every rank: each process "
            + ("deletes " if what in _DELETES else "writes ")
            + (f"`{ast.unparse(path)}`" if path is not None else "its own run")
            + ("" if at is c else f" ({s.path_of(c)}:{c.lineno})")
        )
        # said at the call that leads there: the write itself is where the fix may go too,
        # and the calls of the helper that holds it (a guard may go around any of them)
        here = ((c, "written at"), *_helper_calls(s, c, at)) if at is not c else ()
        seen[key] = (Hit.at("DDP-ALL-RANKS-IO", at, summary, also=(*here, *made), what=what), [])
    yield from _with_later_writes(seen.values())


def _helper_calls(s: Script, c: ast.Call, at: ast.AST) -> tuple[tuple[ast.AST, str], ...]:
    """The calls of the function that holds the write, but the one the finding is said
    at (at most three)."""
    fn = s.scope_of(c)
    if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
        return ()
    sites = [site for site in s.call_sites(fn) if site is not at]
    return tuple((site, "called from") for site in sites[:3])


def _with_later_writes(found: Iterable[tuple[Hit, list[tuple[ast.AST, str]]]]) -> Iterator[Hit]:
    """Each finding with the later writes of its writer in that file as second places:
    the fix goes there too."""
    for hit, more in found:
        also = tuple((n, label) for n, label in more if getattr(n, "lineno", 0) != hit.line)
        yield replace(hit, also=hit.also + also[: 2 * _MORE_PLACES]) if also else hit


def _path_made(s: Script, path: ast.expr | None, write: ast.Call) -> tuple[tuple[ast.AST, str], ...]:
    """Where the written path is made, when another function makes it: the f-string or
    join a helper's parameter comes from (llama-recipes' `metrics_filename =
    f"{output_dir}/metrics_data_{now}.json"`, written by `save_to_json(metrics_filename,
    ...)`), where the rank goes into the name."""
    if path is None or not isinstance(path, ast.Name | ast.Attribute):
        return ()
    made = [
        o
        for o in s.origins(path)
        if isinstance(o, ast.JoinedStr | ast.BinOp | ast.Call)
        and s.scope_of(o) is not s.scope_of(write)  # handed in: not seen beside the write
    ]
    return ((made[0], "its path is made at"),) if len(made) == 1 else ()


def _class_owned(s: Script, c: ast.Call) -> bool:
    """`self.writer = SummaryWriter(...)` in a class's `__init__`."""
    fn = s.scope_of(c)
    if not (isinstance(fn, ast.FunctionDef) and fn.name == "__init__" and s.class_of(c)):
        return False
    stmt = next((a for a in s.ancestors(c) if isinstance(a, ast.stmt)), None)
    return (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and ast.unparse(stmt.targets[0]).startswith("self.")
    )


def _rank_suffixed(s: Script, f: Flow, path: ast.expr) -> bool:
    """A path a helper is given that some assignment makes per rank: detectron2's and
    mmf's `setup_logger` (`if distributed_rank > 0: filename = filename +
    f".rank{distributed_rank}"`, then `_cached_log_stream(filename)` opens it): rank 0
    keeps the plain name, each other rank its own file."""
    return any(
        isinstance(o, ast.BinOp | ast.JoinedStr)
        and any(f.rank_valued(n) for n in ast.walk(o) if not isinstance(n, ast.Call))
        for o in s.origins(path)
    )


_UNIQUE: Final = frozenset({"uuid4", "uuid1", "getpid", "mkstemp", "mkdtemp", "NamedTemporaryFile"})


def _unique_per_process(s: Script, path: ast.expr) -> bool:
    """The path holds a name no other process draws (`uuid.uuid4().hex`, the pid)."""
    return any(
        isinstance(n, ast.Call) and last(s.call_name(n)) in _UNIQUE
        for o in [path, *s.origins(path)]
        for n in ast.walk(o)
    )


def sharded_world(s: Script, f: Flow) -> Iterator[Hit]:
    for c in s.calls:
        if not _torch(s, c, "load"):
            continue
        sharded_type = any(
            isinstance(n, ast.Attribute) and n.attr in _SHARDED_TYPES
            for n in ast.walk(s.scope_of(c))
        )
        path = _path(c, 0, "f")
        per_rank = path is not None and f.is_rank_expr(path)
        if not (per_rank or sharded_type) or _checks_world_size(s, c):
            continue
        yield Hit.at(
            "DDP-SHARDED-WORLD",
            c,
            (
                f"`{ast.unparse(c)[:70]}` loads "
                + ("this rank's own shard" if per_rank else "a sharded state dict")
                + ": it only fits the world size that wrote it"
            ),
            path=ast.unparse(path) if path is not None else "path",
        )


def _checks_world_size(s: Script, call: ast.Call) -> bool:
    scope = s.scope_of(call)
    return any(
        isinstance(n, ast.Compare) and "world_size" in ast.unparse(n) for n in ast.walk(scope)
    )


def main_only_writer(s: Script, f: Flow) -> Iterator[Hit]:
    """`self.tblogger = SummaryWriter(...) if self.main_process else None`, then
    `write_tbimg(self.tblogger, ...)` with no rank test: every other rank calls into
    `None` (yolov6 "fix DDP write_tbimg")."""
    if not f.distributed:
        return
    for a in s.nodes:
        if not (
            isinstance(a, ast.Assign)
            and len(a.targets) == 1
            and isinstance(a.value, ast.IfExp)
            and const(a.value.orelse) is None
            and isinstance(a.value.body, ast.Call)
            and file_writer(s, f, a.value.body) is not None
            and f.local_guard(a.value) is None
        ):
            continue
        held = ast.unparse(a.targets[0])
        use = next((c for c in s.calls if _unguarded_use(s, f, c, held)), None)
        if use is not None:
            yield Hit.at(
                "DDP-ALL-RANKS-IO",
                use,
                (
                    f"`{held}` exists on the main process only (line {a.lineno}), but "
                    f"`{ast.unparse(use)[:60]}` runs on every rank: the others write to None"
                ),
                what=ast.unparse(use.func),
            )
            return


def _unguarded_use(s: Script, f: Flow, c: ast.Call, held: str) -> bool:
    on = isinstance(c.func, ast.Attribute) and ast.unparse(c.func.value) == held
    params = [i for i, x in enumerate(c.args) if ast.unparse(x) == held]
    if not on and not params:
        return False
    if f.guarded(c) or any(
        isinstance(x, ast.If | ast.IfExp) and held in ast.unparse(x.test) for x in s.ancestors(c)
    ):
        return False
    for fn in s.callees(c):  # a helper that tests what it is given
        if any(isinstance(n, ast.If | ast.IfExp) for n in ast.walk(fn)) and any(
            isinstance(n, ast.Compare) and const(n.comparators[0]) is None for n in ast.walk(fn)
        ):
            return False
    return on or bool(s.callees(c))


def conjoined_else_io(s: Script, f: Flow) -> Iterator[Hit]:
    """`if ddp and get_rank() == 0: torch.save(...) else: torch.save(...)` (baby-llama2-
    chinese before PR #56): the `else` meant for a single-process run is also where every
    rank but 0 of the DDP run goes, so they all write the same file. Said at the `if`,
    the line the fix changes (`if ddp:` then `if get_rank() == 0:`)."""
    if not f.distributed:
        return
    for n in s.nodes:
        if not (isinstance(n, ast.If) and n.orelse and rank_conjoined_else(s, f, n.orelse[0])):
            continue
        writes = [
            (w, c)
            for c in calls_in(n.orelse)
            if (w := file_writer(s, f, c)) is not None
            and not f.is_rank_expr(w[1] or ast.Constant(0))
        ]
        if writes:
            (what, path), c = writes[0]
            yield Hit.at(
                "DDP-ALL-RANKS-IO",
                n,
                (
                    f"`{what}` in the `else` of `if {ast.unparse(n.test)}:` runs on every "
                    "rank but 0 of the DDP run too: each writes "
                    + (f"`{ast.unparse(path)}`" if path is not None else "its own run")
                    + f" (line {c.lineno})"
                ),
                what=what,
            )


RULES = (
    ckpt_barrier,
    all_ranks_io,
    sharded_world,
    main_only_writer,
    conjoined_else_io,
)
