"""Round 37 (blind batch AC): readings of pitfalls the lint had ids for but missed.

- DDP-NOT-APPLIED: a wrapper built only to be asked for its parameters. `params =
  group_parameters(DDP(model, ...))` hands the wrapper to a helper that reads nothing of it
  but `.parameters()` / `.named_parameters()`; the wrapper is then dropped and the bare
  model trains, with no gradient ever all-reduced (bytedance/ParaGen 27c2e9d
  paragen/optim/__init__.py, fixed in PR #32 "fix ddp bug", which keeps the wrapper).
- DDP-SAVE-WRAPPER: loading the wrapper's own in-memory copy back into it
  (`best = copy.deepcopy(model.state_dict())` ... `model.load_state_dict(best)`) says
  nothing of who reads the saved file; only a load of what `torch.load` read makes the
  save consistent (BatsResearch/taglets bb6ac49 taglets/pipeline/trainable.py).
- DDP-HARDCODED-DEVICE: on resume, every key of the saved run config overwrites `args`
  (`for k, v in conf.items(): setattr(args, k, v)`), and the file was written from the
  whole `args`, local rank included (by rank 0): every process then takes rank 0's
  local rank for its GPU (hirofumi0810/neural_sp 17ffccc neural_sp/bin/asr/train.py,
  fixed in PR #329, which leaves `local_rank` out of the restore).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.project import FuncNode
from ddptui.lint.script import Script

# what a helper may read of a module and still hold nothing of it afterwards
_PARAMETER_READS: Final = frozenset({"parameters", "named_parameters"})


def _param_name(s: Script, fn: FuncNode, call: ast.Call, arg: ast.expr) -> str | None:
    """The parameter of `fn` that receives the positional argument `arg` of `call`."""
    if any(isinstance(a, ast.Starred) for a in call.args):
        return None
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    is_method = s.class_of(fn) is not None and params[:1] in (["self"], ["cls"])
    index = call.args.index(arg) + (1 if is_method else 0)
    return params[index] if index < len(params) else None


def _parameters_only(s: Script, fn: FuncNode, name: str) -> bool:
    """Every read of `name` in `fn` is `name.parameters()` / `name.named_parameters()`:
    the helper keeps no reference to the module it was given."""
    uses = [
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
    ]
    for n in uses:
        attr = s.parents.get(n)
        call = s.parents.get(attr) if attr is not None else None
        if not (
            isinstance(attr, ast.Attribute)
            and attr.attr in _PARAMETER_READS
            and isinstance(call, ast.Call)
            and call.func is attr
        ):
            return False
    return bool(uses)


def discarded_wrap(s: Script, f: Flow) -> Iterator[Hit]:
    for c in f.torch_ddp_calls:
        outer = s.parents.get(c)
        if not (isinstance(outer, ast.Call) and c in outer.args) or not c.args:
            continue
        fns = s.callees(outer)
        if len(fns) != 1:
            continue
        name = _param_name(s, fns[0], outer, c)
        if name is None or not _parameters_only(s, fns[0], name):
            continue
        inner = ast.unparse(c.args[0])
        yield Hit.at(
            "DDP-NOT-APPLIED",
            c,
            (
                f"the DDP wrapper of `{inner}` is only handed to `{fns[0].name}`, which reads "
                f"its parameters and keeps nothing: training uses the unwrapped `{inner}`"
            ),
            why=(
                f"`{ast.unparse(outer.func)}(...)` is given a fresh DDP wrapper of `{inner}` and "
                "only asks it for its parameters; the wrapper is then dropped, while the code "
                f"keeps using `{inner}` (the bare model)."
            ),
        )


def in_memory_copy(s: Script, load: ast.Call) -> bool:
    """`model.load_state_dict(best)` where `best` is a `.state_dict()` taken in the
    process (a copy kept in memory), not something `torch.load` read from a file."""
    if not load.args or not isinstance(load.args[0], ast.Name):
        return False
    origins = s.origins(load.args[0])
    if not origins:
        return False
    for o in origins:
        if isinstance(o, ast.Constant) and o.value is None:
            continue  # `best = None` before the first copy
        calls = [n for n in ast.walk(o) if isinstance(n, ast.Call)]
        if any(
            isinstance(n.func, ast.Attribute | ast.Name) and _last(n.func) in {"load", "load_file"}
            for n in calls
        ):
            return False
        if not any(
            isinstance(n.func, ast.Attribute) and n.func.attr == "state_dict" for n in calls
        ):
            return False
    return True


def restored_rank(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.ddp_calls:
        return
    for loop in s.nodes:
        if not isinstance(loop, ast.For):
            continue
        restore = _restore(s, loop)
        if restore is None:
            continue
        obj, key = restore
        fn = s.scope_of(loop)
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) or not _saved_whole(
            s, fn, obj
        ):
            continue
        read = _rank_read_after(f, fn, obj, loop)
        if read is None or _key_filtered(loop, key):
            continue
        field = ast.unparse(read)
        yield Hit.at(
            "DDP-HARDCODED-DEVICE",
            loop.body[0],
            (
                f"every key of the loaded config overwrites `{obj}`, `{read.attr}` too: "
                f"the file was saved from the whole `{obj}` by one process, so every process "
                f"reads that process's `{field}` (line {read.lineno}) after a resume"
            ),
            seen=(
                f"`{field}` restored from a config saved from `{obj}` (line {loop.lineno}): "
                "one process's local rank for every process"
            ),
        )


def _restore(s: Script, loop: ast.For) -> tuple[str, str] | None:
    """`for k, v in conf.items(): setattr(args, k, v)` with `conf` loaded from a file:
    (the object overwritten, the key's name)."""
    it = loop.iter
    if not (
        isinstance(loop.target, ast.Tuple)
        and len(loop.target.elts) == 2
        and all(isinstance(e, ast.Name) for e in loop.target.elts)
        and isinstance(it, ast.Call)
        and isinstance(it.func, ast.Attribute)
        and it.func.attr == "items"
        and isinstance(it.func.value, ast.Name)
    ):
        return None
    key, value = (e.id for e in loop.target.elts if isinstance(e, ast.Name))
    loaded = any(
        isinstance(o, ast.Call) and "load" in _last(o.func).lower()
        for o in s.origins(it.func.value)
    )
    if not loaded:
        return None
    for n in ast.walk(loop):
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id == "setattr"
            and len(n.args) == 3
            and isinstance(n.args[0], ast.Name)
            and [ast.unparse(a) for a in n.args[1:]] == [key, value]
        ):
            return n.args[0].id, key
    return None


def _saved_whole(s: Script, fn: FuncNode, obj: str) -> bool:
    """`save_config(args, path)` / `yaml.dump(vars(args), f)` in the same function: the
    file holds every field of `obj`."""
    whole = {obj, f"vars({obj})", f"{obj}.__dict__"}
    return any(
        isinstance(n, ast.Call)
        and any(w in _last(n.func).lower() for w in ("save", "dump", "write"))
        and any(ast.unparse(a) in whole for a in n.args)
        for n in ast.walk(fn)
    )


def _rank_read_after(f: Flow, fn: FuncNode, obj: str, loop: ast.For) -> ast.Attribute | None:
    """The first read of `obj.<local rank>` after the restore, unless that field is set
    again after it (`args.local_rank = int(os.environ["LOCAL_RANK"])`)."""
    end = loop.end_lineno or loop.lineno
    reads: list[ast.Attribute] = []
    for n in ast.walk(fn):
        if not (
            isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name)
            and n.value.id == obj
            and n.lineno > end
            and "local_rank" in n.attr
        ):
            continue
        if not isinstance(n.ctx, ast.Load):
            return None
        reads.append(n)
    reads = [r for r in reads if f.rank_valued(r)]
    return min(reads, key=lambda r: (r.lineno, r.col_offset)) if reads else None


def _key_filtered(loop: ast.For, key: str) -> bool:
    """The restore leaves out the local rank, or filters keys by a list not spelled out
    here (`if k not in keep`): trusted."""
    for n in ast.walk(loop):
        if not isinstance(n, ast.Compare) or not any(
            isinstance(x, ast.Name) and x.id == key for x in [n.left, *n.comparators]
        ):
            continue
        for x in [n.left, *n.comparators]:
            if isinstance(x, ast.Name) and x.id == key:
                continue
            elts = x.elts if isinstance(x, ast.Tuple | ast.List | ast.Set) else [x]
            for e in elts:
                if not (isinstance(e, ast.Constant) and isinstance(e.value, str)):
                    return True
                if "rank" in e.value:
                    return True
    return False


def _last(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


RULES = (discarded_wrap, restored_rank)
