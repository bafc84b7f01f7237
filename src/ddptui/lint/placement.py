"""Where the fix goes when that is not where a finding is said. A rule says a finding
where it sees the pitfall (the collective, the write, the `torch.save`); the user edits
another line: the rank-only `if` that keeps the other ranks out of the collective, the
caller that hands a helper the DDP wrapper, the `--local_rank` reads that pick the GPU,
the start of the block that only prepares a write (which the rank guard wraps). This
module adds those lines to a finding as second places; it never adds or drops one."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from typing import Any, Final

from ddptui.lint.flow import ident, is_main_flag, is_rank_name
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.reach import is_param
from ddptui.lint.script import Script
from ddptui.lint.syntax import const, last

Where = tuple[ast.AST, int, str]  # (a node of the file, line, label)

_MAX: Final = 4  # more callers or uses than this (a library helper): its own line says enough
_GPU_PICKS: Final = frozenset(
    {"set_device", "device", "cuda", "to", "DistributedDataParallel", "DDP"}
)
_PREP: Final = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Import, ast.ImportFrom)


def places(s: Script, hit: Hit) -> list[Where]:
    """The hit's second places, each once, none on the hit's own line."""
    node = hit.node
    if node is None:
        return []
    found: list[Where] = [(n, getattr(n, "lineno", 0), label) for n, label in hit.also]
    found += _by_id(s, hit, node)
    out: list[Where] = []
    seen = {(s.path_of(node), hit.line)}
    for n, line, label in found:
        k = (s.path_of(n), line)
        if line > 0 and k not in seen:
            seen.add(k)
            out.append((n, line, label))
    return out


def _by_id(s: Script, hit: Hit, node: ast.AST) -> list[Where]:
    guard = hit.facts.get("guard_line")
    if hit.id == "DDP-RANK-DIVERGENCE" and isinstance(guard, int):
        return [(node, guard, "rank-only branch at")]
    if hit.id == "DDP-ALL-RANKS-IO":
        return list(_io_places(s, node))
    if hit.id == "DDP-RANK-SEED" and isinstance(node, ast.Call):
        return [(n, n.lineno, "seeds at") for n in _helper_seeds(s, node)] + _after_wrap(s)
    placer = _PLACERS.get(hit.id)
    if placer is None or not isinstance(node, placer[0]):
        return []
    return [(n, n.lineno, placer[1]) for n in placer[2](s, node)]


# --- the epoch loop: where the pass over the loader starts -------------------------


def _pass_start(_s: Script, loop: ast.For | ast.While) -> list[ast.stmt]:
    """The first statement of the epoch loop's body that starts a pass over the loader
    (`batches = iter(loader)`, `for batch in loader:`): `set_epoch` goes just before it,
    which can be lines below the loop's header (logging, a progress bar, resuming)."""
    for st in loop.body:
        if isinstance(st, ast.For | ast.AsyncFor) and not _counts(st.iter):
            return [st, *_loader_use(st)]
        if any(
            isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == "iter"
            for c in own_nodes(st)
        ):
            return [st]
    return []


def _loader_use(loop: ast.For | ast.AsyncFor) -> list[ast.stmt]:
    """A loop over the loaders themselves (`for k, loader in loaders.items():`): the first
    statement of its body that runs the loop's loader (passes it to a call or iterates
    it), where `set_epoch` goes for that loader (MDIL-SNU/SevenNet@41d3831, fixed in 8a7bc7a)."""
    it = loop.iter
    if not (
        isinstance(it, ast.Call)
        and isinstance(it.func, ast.Attribute)
        and it.func.attr in {"items", "values"}
    ):
        return []
    names = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
    for st in loop.body:
        for n in own_nodes(st):
            runs = (
                isinstance(n, ast.Call)
                and any(isinstance(a, ast.Name) and a.id in names for a in n.args)
            ) or (
                isinstance(n, ast.For | ast.AsyncFor)
                and isinstance(n.iter, ast.Name)
                and n.iter.id in names
            )
            if runs:
                return [st]
    return []


def _counts(expr: ast.expr) -> bool:
    """`range(...)`: a count, not a pass over data."""
    return (
        isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "range"
    )


# --- an attribute read through a module-level wrapper: its other reads --------------


def _global_reads(s: Script, read: ast.Attribute) -> list[ast.Attribute]:
    """`model.last_loss` read at module level, where `model` is the DDP wrapper: the same
    read in functions of that module that use the global `model` (nanoGPT-style
    `estimate_loss()`), which the same fix (`raw_model.last_loss`) covers."""
    if not isinstance(read.value, ast.Name) or not isinstance(s.scope_of(read), ast.Module):
        return []
    name, mod = read.value.id, s.scope_of(read)
    out = [
        n
        for n in ast.walk(mod)
        if isinstance(n, ast.Attribute)
        and n is not read
        and n.attr == read.attr
        and isinstance(n.value, ast.Name)
        and n.value.id == name
        and isinstance(n.ctx, ast.Load)
        and _uses_global(s, n, name)
    ]
    return sorted(out, key=lambda n: n.lineno)[:_MAX] if len(out) <= _MAX else []


def _uses_global(s: Script, node: ast.AST, name: str) -> bool:
    """`node` sits in a function that neither takes nor binds `name` (reads the global)."""
    fn = _function(s, node)
    if fn is None or is_param(fn, name):
        return False
    return not any(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
        for n in own_nodes(fn)
    )


# --- the `--local_rank` flag: the reads that pick the GPU --------------------------


def _flag_uses(s: Script, flag: ast.Call) -> list[ast.Attribute]:
    """`torch.cuda.set_device(args.local_rank)`, `DDP(..., device_ids=[args.local_rank])`
    for `parser.add_argument("--local_rank", default=0)`: the fix reads LOCAL_RANK there."""
    if last(s.call_name(flag)) != "add_argument" or not flag.args:
        return []
    name = const(flag.args[0])
    if not isinstance(name, str) or not name.startswith("--"):
        return []
    dest = name.lstrip("-").replace("-", "_")

    def read(n: ast.AST) -> bool:
        return isinstance(n, ast.Attribute) and n.attr == dest and isinstance(n.ctx, ast.Load)

    picked = [
        n
        for c in s.calls
        if last(s.call_name(c)) in _GPU_PICKS
        for a in [*c.args, *(k.value for k in c.keywords)]
        for n in ast.walk(a)
    ]
    uses: list[ast.Attribute] = [n for n in picked if isinstance(n, ast.Attribute) and read(n)]
    # a value taken from the flag first (Chinese-CLIP's `args.local_device_rank =
    # max(args.local_rank, 0)`, then `set_device(args.local_device_rank)`): the read there
    uses += [
        x
        for n in picked
        if isinstance(n, ast.Attribute | ast.Name) and not read(n)
        for o in s.origins(n)
        if o is not n
        for x in ast.walk(o)
        if isinstance(x, ast.Attribute) and read(x)
    ]
    uses = list(dict.fromkeys(uses))
    return sorted(uses, key=lambda n: (s.path_of(n), n.lineno))[:_MAX] if uses else []


# --- a call to a project helper: the lines inside it --------------------------------


def _helper_seeds(s: Script, call: ast.Call) -> list[ast.Call]:
    """`seed_everything(cfg.seed)`: the first seeding call inside the helper, where the
    rank is added to the seed."""
    out = []
    for fn in s.callees(call)[:1]:
        seeds = [
            c
            for c in s.function_calls(fn)
            if "seed" in last(s.call_name(c)).lower() and c is not call
        ]
        out += sorted(seeds, key=lambda c: c.lineno)[:1]
    return out


def _after_wrap(s: Script) -> list[Where]:
    """Where the per-rank seed goes: right after the DDP wrap, which has broadcast rank 0's
    weights by then (goodfire-ai/spd's run_spd.py: the wrap in another file than the
    seed)."""
    wraps = [c for c in s.calls if last(s.call_name(c)) == "DistributedDataParallel"]
    return [(c, c.end_lineno or c.lineno, "seed per rank after the wrap at") for c in wraps[:2]]


# --- a helper handed the wrapper: its callers ---------------------------------------


def _function(s: Script, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    fn = s.scope_of(node)
    return fn if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) else None


def _passing_callers(s: Script, node: ast.AST) -> list[ast.Call]:
    """`def save_model(model, ...): torch.save(model.state_dict(), ...)`: the calls that
    hand it the model (the fix passes `model.module` there), when there are few."""
    fn = _function(s, node)
    if fn is None:
        return []
    saved = node.args[0] if isinstance(node, ast.Call) and node.args else node
    passed = {
        id(a)
        for n in ast.walk(saved)
        if isinstance(n, ast.Name) and n.id != "self" and is_param(fn, n.id)
        for a in s.param_args(fn, n.id)
    }
    sites = [c for c in s.call_sites(fn) if any(id(n) in passed for n in ast.walk(c))]
    return sites if len(sites) <= _MAX else []


# --- a write on every rank: where the rank guard goes -------------------------------


def _io_places(s: Script, node: ast.AST) -> Iterator[Where]:
    written = _append_write(s, node)
    if written is not None:
        yield written, written.lineno, "written at"
    stmt = _stmt(s, node)
    if stmt is not None:
        yield from _guard_places(s, stmt)
    fn = _function(s, node)
    if fn is None or (isinstance(node, ast.Call) and s.callees(node)):
        return  # said at a helper's call already (the entry's call of what writes)
    if _handed_on(s, fn):
        return  # `mp.spawn(main_worker, ...)`: each rank's entry, not a helper
    # not `main()`; nor a call under a rank test already (`if is_master(): save(...)`):
    # that caller writes on one rank, the fix goes to the others (lint46: Open Catalyst's
    # save_checkpoint, guarded in one trainer and not in three others)
    # (each site once: a module two entries import lists its calls twice)
    sites = [
        c
        for c in dict.fromkeys(s.call_sites(fn))
        if _function(s, c) is not None and not _rank_guarded(s, c)
    ]
    if 0 < len(sites) <= _MAX:
        for c in sites:
            yield c, c.lineno, "called from"
            at = _stmt(s, c)
            if at is not None:
                yield from _guard_places(s, at)


def _guard_places(s: Script, stmt: ast.stmt) -> Iterator[Where]:
    """Where a rank guard of `stmt` goes: the start of what only prepares it, and the
    `if` whose condition the rank test joins."""
    start = _guard_from(s, stmt)
    yield start, start.lineno, "guard from"
    yield from _enabling_if(s, stmt)


def _enabling_if(s: Script, stmt: ast.stmt) -> Iterator[Where]:
    """The `if` of its function whose body holds the write (`if enabled:`, `if
    args.save_every and step % n == 0:`): the rank test joins that condition, as the fixes
    write it (`if enabled and rank == 0:`), however deep in loops and `try` the write is."""
    child: ast.AST = stmt
    for a in s.ancestors(stmt):
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Module):
            return
        if isinstance(a, ast.If) and child in a.body:
            text = ast.unparse(a.test)
            if "__name__" not in text and not _rank_guarded(s, a.body[0]):
                yield a, a.lineno, "or join the rank test to the condition at"
            return
        child = a


def _handed_on(s: Script, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """`fn` is passed to a call (a process starter, a callback), not only called."""
    return any(
        isinstance(a, ast.Name) and a.id == fn.name
        for c in s.calls
        for a in [*c.args, *(k.value for k in c.keywords)]
    )


def _append_write(s: Script, node: ast.AST) -> ast.Call | None:
    """`f = open(path, "a+")`: appending creates nothing the ranks race on; the lines
    every rank writes through `f` do. The first such write."""
    if not (isinstance(node, ast.Call) and last(s.call_name(node)) == "open"):
        return None
    mode = (
        node.args[1]
        if len(node.args) > 1
        else next((k.value for k in node.keywords if k.arg == "mode"), None)
    )
    parent = s.parents.get(node)
    if not (
        isinstance(const(mode), str)
        and "a" in str(const(mode))
        and isinstance(parent, ast.Assign)
        and len(parent.targets) == 1
        and isinstance(parent.targets[0], ast.Name)
    ):
        return None
    handle = parent.targets[0].id
    writes = [
        c
        for c in s.function_calls(s.scope_of(node))
        if c.lineno > node.lineno
        and isinstance(c.func, ast.Attribute)
        and c.func.attr == "write"
        and isinstance(c.func.value, ast.Name)
        and c.func.value.id == handle
        and not _rank_guarded(s, c)
    ]
    return min(writes, key=lambda c: c.lineno) if writes else None


def _rank_guarded(s: Script, node: ast.AST) -> bool:
    """Under an `if` whose test reads a rank (`args.gpu == 0`, `is_master()`): that write
    is fixed."""
    return any(
        isinstance(a, ast.If)
        and any(
            isinstance(n, ast.Name | ast.Attribute)
            and (is_rank_name(ident(n) or "") or is_main_flag(ident(n) or ""))
            for n in ast.walk(a.test)
        )
        for a in s.ancestors(node)
    )


def _stmt(s: Script, node: ast.AST) -> ast.stmt | None:
    if isinstance(node, ast.stmt):
        return node
    return next((a for a in s.ancestors(node) if isinstance(a, ast.stmt)), None)


def _guard_from(s: Script, stmt: ast.stmt) -> ast.stmt:
    """The first statement of the run that ends at `stmt` and only prepares it (binds a
    name it reads: the path, the import of the writer's class, a name picked by an
    `if`); when that run is a whole `if` branch, the `if` (the guard joins its test)."""
    cur = stmt
    for _ in range(2):
        parent = s.parents.get(cur)
        body = _holding(parent, cur)
        if body is None:
            return cur
        i = body.index(cur)
        used = _loads(cur)
        while i > 0 and _prepares(body[i - 1], used):
            i -= 1
            used |= _loads(body[i])
        if i > 0 or not isinstance(parent, ast.If) or body is not parent.body:
            return body[i]
        cur = parent
    return cur


def _holding(parent: ast.AST | None, stmt: ast.stmt) -> list[ast.stmt] | None:
    for name in ("body", "orelse", "finalbody"):
        body = getattr(parent, name, None)
        if isinstance(body, list) and stmt in body:
            return body
    return None


def _loads(node: ast.AST) -> set[str]:
    """Names and dotted attributes (`args.save_dir`) `node` reads."""
    nodes = [node, *own_nodes(node)]
    return {n.id for n in nodes if isinstance(n, ast.Name)} | {
        ast.unparse(n) for n in nodes if isinstance(n, ast.Attribute)
    }


def _binds(st: ast.stmt) -> set[str]:
    """What `st` binds: `x`, `self.path`, an imported name (not `args` of `args.x = 1`)."""
    if isinstance(st, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).split(".")[0] for a in st.names}
    targets = st.targets if isinstance(st, ast.Assign) else [getattr(st, "target", None)]
    out: set[str] = set()
    for t in targets:
        for n in ast.walk(t) if isinstance(t, ast.Tuple | ast.List) else [t]:
            if isinstance(n, ast.Name):
                out.add(n.id)
            elif isinstance(n, ast.Attribute):
                out.add(ast.unparse(n))
    return out


def _prepares(st: ast.stmt, used: set[str]) -> bool:
    """An assignment or import of a name `used` reads, or an `if` whose branches do only
    that."""
    if isinstance(st, _PREP):
        return bool(_binds(st) & used)
    if isinstance(st, ast.If):
        branches = [*st.body, *st.orelse]
        return bool(branches) and all(_prepares(b, used) for b in branches)
    return False


# id: (the kind of node the rule says it at, the label, the second places' finder)
_PLACERS: Final[dict[str, tuple[Any, str, Callable[[Script, Any], list[Any]]]]] = {
    "DDP-HARDCODED-DEVICE": (ast.Call, "used as the device at", _flag_uses),
    "DDP-SAVE-WRAPPER": (ast.AST, "called from", _passing_callers),
    "DDP-SET-EPOCH": (ast.For | ast.While, "loader iterated at", _pass_start),
    "DDP-WRAPPER-ATTR": (ast.Attribute, "read too at", _global_reads),
}
