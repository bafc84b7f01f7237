"""Rules whose evidence is spread over functions and files of a real project: a writer
gated on the LOCAL rank (one writer per node), a wrapper attribute read in a helper the
DDP model is passed to (rules_wrapper.py), processes that never pick their GPU, a distributed loop over a
loader every rank reads whole, DataLoader generators seeded alike on every rank."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Final

from ddptui.lint.callers import local_predicate
from ddptui.lint.flow import Flow, ident
from ddptui.lint.model import Hit
from ddptui.lint.nodes import calls_in, own_nodes
from ddptui.lint.project import FuncNode
from ddptui.lint.rules_data import is_loader, iterated, split_by_rank
from ddptui.lint.rules_io import file_writer
from ddptui.lint.rules_wrapper import (
    wrapper_attr_inherited,
    wrapper_attr_passed,
    wrapper_attr_self,
)
from ddptui.lint.script import Script
from ddptui.lint.syntax import const, kwarg, last

_LOCAL_NAME: Final = re.compile(r"local_?rank|local_process_index|localid|local_proc", re.I)
_LOCAL_ENV: Final = frozenset(
    {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}
)
_MASTER_OPS: Final = (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Gt, ast.LtE, ast.Lt, ast.GtE)
_MAX_HOPS: Final = 3
_DEVICE_NAME: Final = re.compile(
    r"device|gpu|rank|^dev$|^cuda", re.I
)  # calls followed from a gate to the write it guards


# --- 1. the local rank as the "main process" test -----------------------------------


def is_local(s: Script, expr: ast.AST, depth: int = 0) -> bool:  # noqa: PLR0911 - per kind
    """The local rank (`args.local_rank`, `LOCAL_RANK`, `int(os.environ["LOCAL_RANK"])`,
    a name given one of those), not the global one."""
    if depth > 3:
        return False
    if isinstance(expr, ast.Name | ast.Attribute):
        values = (
            s.assigned(s.scope_of(expr), expr.id, module_too=True)
            if isinstance(expr, ast.Name)
            else []
        )
        if any(_global_rank_call(s, v) for v in values):
            return False  # `local_rank = dist.get_rank()` (yeyupiaoling/MASR eeb9154)
        if _LOCAL_NAME.search(ident(expr) or ""):
            return True
        return any(is_local(s, v, depth + 1) for v in values)
    if isinstance(expr, ast.Call):
        name = last(s.call_name(expr))
        if name in ("get_local_rank", "get_node_local_rank"):
            return True
        if name in ("int", "getenv", "get") and expr.args:
            return is_local(s, expr.args[0], depth + 1)
        return False
    if isinstance(expr, ast.Subscript):
        return const(expr.slice) in _LOCAL_ENV and "environ" in ast.unparse(expr.value)
    if isinstance(expr, ast.Constant):
        return expr.value in _LOCAL_ENV
    return False


def _global_rank_call(s: Script, value: ast.expr) -> bool:
    """`dist.get_rank()`: the global rank, whatever the name it is given; also
    `0 if not dist.is_initialized() else dist.get_rank()` (DeepLearningExamples 8c7d66f
    HiFiGAN hifigan/logging.py:34 names that `local_rank`), a constant in one branch."""
    if isinstance(value, ast.IfExp):
        sides = (value.body, value.orelse)
        return any(_global_rank_call(s, v) for v in sides) and all(
            isinstance(v, ast.Constant) or _global_rank_call(s, v) for v in sides
        )
    return isinstance(value, ast.Call) and last(s.call_name(value)) == "get_rank"


def _zero_side(expr: ast.expr) -> bool:
    v = const(expr)
    if isinstance(v, int) and not isinstance(v, bool):
        return v in (0, -1)
    if isinstance(expr, ast.List | ast.Tuple | ast.Set):
        return {const(e) for e in expr.elts} <= {0, -1} and 0 in {const(e) for e in expr.elts}
    return False


def local_master_test(s: Script, test: ast.AST) -> ast.expr | None:
    """The local-rank side of `local_rank == 0`, `local_rank > 0`, `local_rank <= 0` (not
    `local_rank != -1`: distributed or not; not `local_rank in [-1, 0]`, which the older
    Hugging Face examples use throughout: kept quiet, precision first)."""
    for n in [test, *own_nodes(test)]:
        if not (isinstance(n, ast.Compare) and len(n.ops) == 1):
            continue
        if not isinstance(n.ops[0], _MASTER_OPS) or isinstance(n.ops[0], ast.In | ast.NotIn):
            continue  # `local_rank in [-1, 0]`: the older Hugging Face idiom, left alone
        left, right = n.left, n.comparators[0]
        for side, other in ((left, right), (right, left)):
            if _zero_side(other) and const(other) != -1 and is_local(s, side):
                return side
    return None


def _writes(s: Script, f: Flow, stmts: list[ast.AST], hops: int = 0) -> ast.Call | None:
    """A file writer (torch.save, a log file, SummaryWriter...) these statements run,
    through project calls (bounded)."""
    for call in calls_in(stmts):
        if file_writer(s, f, call) is not None:
            return call
        if hops < _MAX_HOPS:
            for fn in s.callees(call):
                found = _writes(s, f, list(fn.body), hops + 1)
                if found is not None:
                    return found
    return None


def _gated(s: Script, f: Flow, test_if: ast.If) -> ast.Call | None:
    """The write an `if` on the local rank lets through: in its branches, and after it
    when its body leaves (`if local_rank > 0: return logger`)."""
    parts: list[ast.AST] = [*test_if.body, *test_if.orelse]
    if test_if.body and isinstance(test_if.body[-1], ast.Return | ast.Continue | ast.Raise):
        parent = s.parents.get(test_if)
        for stmts in (getattr(parent, k, None) for k in ("body", "orelse", "finalbody")):
            if isinstance(stmts, list) and test_if in stmts:
                parts += stmts[stmts.index(test_if) + 1 :]
    return _writes(s, f, parts)


def _ifs_testing(root: ast.AST, text: str) -> list[ast.If]:
    return [
        n
        for n in ast.walk(root)
        if isinstance(n, ast.If)
        and any(ast.unparse(m) == text for m in ast.walk(n.test) if isinstance(m, ast.expr))
    ]


def _param_of(s: Script, call: ast.Call, arg: ast.expr) -> list[tuple[FuncNode, str]]:
    """(callee, parameter name) that receives `arg` at this call."""
    out: list[tuple[FuncNode, str]] = []
    for fn in s.callees(call):
        params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
        if params[:1] == ["self"] and s.class_of(fn) is not None:
            params = params[1:]
        for kw in call.keywords:
            if kw.value is arg and kw.arg:
                out.append((fn, kw.arg))
        if arg in call.args:
            i = call.args.index(arg)
            if i < len(params) and not any(isinstance(a, ast.Starred) for a in call.args[:i]):
                out.append((fn, params[i]))
    return out


def _param_gates(  # noqa: PLR0912 - three places a gate can be: callee, body, class
    s: Script, f: Flow, fn: FuncNode, param: str, flag: bool, hops: int = 0
) -> ast.Call | None:
    """A write in `fn` (or in the class that keeps the parameter as `self.x`) gated on
    the parameter: tested against 0 (`flag` False) or used as the test (`flag` True);
    a parameter handed on to another function (`super().__init__(..., flag)`) followed."""
    if hops < _MAX_HOPS:
        for call in calls_in(fn.body):
            for arg in [*call.args, *(k.value for k in call.keywords)]:
                if isinstance(arg, ast.Name) and arg.id == param:
                    for inner, name in _param_of(s, call, arg):
                        if inner is not fn and (
                            w := _param_gates(s, f, inner, name, flag, hops + 1)
                        ):
                            return w
    for n in ast.walk(fn):
        w = _gated(s, f, n) if isinstance(n, ast.If) and _tests_param(n.test, param, flag) else None
        if w is not None:
            return w
    cls = s.class_of(fn)
    if cls is None or fn.name != "__init__":
        return None
    for n in ast.walk(fn):
        if (
            isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Name)
            and n.value.id == param
            and len(n.targets) == 1
            and isinstance(n.targets[0], ast.Attribute)
        ):
            for test_if in _ifs_testing(cls, ast.unparse(n.targets[0])):
                if (w := _gated(s, f, test_if)) is not None:
                    return w
    return None


def _tests_param(test: ast.expr, param: str, flag: bool) -> bool:
    """The test reads the parameter: as a flag, or compared with 0."""
    if param not in {ident(m) for m in ast.walk(test) if isinstance(m, ast.expr)}:
        return False
    return flag or any(
        isinstance(c, ast.Compare) and any(_zero_side(x) for x in c.comparators)
        for c in ast.walk(test)
    )


def local_master_io(s: Script, f: Flow) -> Iterator[Hit]:
    """Checkpoints and log files written where `local_rank == 0`: on a multi-node run
    that is one process per node, all writing the same files."""
    if not f.distributed:
        return
    reported: set[int] = set()
    for n in s.nodes:
        found = _local_gate(s, f, n)
        if found is None:
            continue
        at, side, write = found
        if _reloaded(s, write):
            continue
        line = getattr(at, "lineno", 0)
        if line in reported:
            continue
        reported.add(line)
        wpath = s.path_of(write)
        yield Hit.at(
            "DDP-ALL-RANKS-IO",
            at,
            (
                f"`{ast.unparse(side)}` (the rank on this node) picks the writer of "
                f"`{ast.unparse(write.func)}` ({wpath}:{write.lineno}): on a multi-node run "
                "local rank 0 of every node writes the same files"
            ),
            what=f"`{ast.unparse(write.func)}` under a local-rank test",
        )


def _local_gate(s: Script, f: Flow, n: ast.AST) -> tuple[ast.AST, ast.expr, ast.Call] | None:
    if isinstance(n, ast.If):
        return _if_gate(s, f, n)
    if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
        return _flag_gate(s, f, n, n.targets[0].id)
    if isinstance(n, ast.Call):
        return _passed_gate(s, f, n)
    return None


def _if_gate(s: Script, f: Flow, n: ast.If) -> tuple[ast.AST, ast.expr, ast.Call] | None:
    """`if local_rank == 0: torch.save(...)`, `if args.local_rank > 0: return`."""
    side = local_master_test(s, n.test)
    at: ast.AST = n.test
    if side is None:  # `if if_main_process():` whose True comes from `LOCAL_RANK == 0`
        found = local_predicate(s, n.test, local_master_test)
        at, side = found if found is not None else (at, None)
    if side is None or _is_param(s, side):
        return None  # a parameter's test: said at the caller that passes the local rank
    w = _gated(s, f, n)
    return (at, side, w) if w is not None else None


def _flag_gate(
    s: Script, f: Flow, n: ast.Assign, name: str
) -> tuple[ast.AST, ast.expr, ast.Call] | None:
    """`save_to_disk = local_rank == 0`, then `if save_to_disk:` or a helper given it."""
    side = local_master_test(s, n.value)
    if side is None or not isinstance(n.value, ast.Compare | ast.BoolOp | ast.UnaryOp):
        return None
    scope = s.scope_of(n)
    for test_if in _ifs_testing(scope, name):
        if (w := _gated(s, f, test_if)) is not None:
            return n, side, w
    for call in calls_in([scope]):
        for arg in [*call.args, *(k.value for k in call.keywords)]:
            if isinstance(arg, ast.Name) and arg.id == name:
                for fn, param in _param_of(s, call, arg):
                    if (w := _param_gates(s, f, fn, param, True)) is not None:
                        return n, side, w
    return None


def _passed_gate(s: Script, f: Flow, n: ast.Call) -> tuple[ast.AST, ast.expr, ast.Call] | None:
    """`setup_logger(name, out_dir, args.local_rank)` into `if local_rank > 0: return`."""
    for arg in [*n.args, *(k.value for k in n.keywords)]:
        if isinstance(arg, ast.Name | ast.Attribute | ast.Call) and is_local(s, arg):
            for fn, param in _param_of(s, n, arg):
                if (w := _param_gates(s, f, fn, param, False)) is not None:
                    return n, arg, w
    return None


def _reloaded(s: Script, write: ast.Call) -> bool:
    """A snapshot each node saves for itself and loads back at start from the same path
    (the multi-node tutorial's node-local snapshot): one writer per node on purpose."""
    if last(s.call_name(write)) != "save" or len(write.args) < 2:
        return False
    target = write.args[1]
    if not isinstance(target, ast.Attribute | ast.Constant):
        return False  # a local name (`save_file`) says nothing across functions
    path = ast.unparse(target)
    return any(
        c is not write
        and last(s.call_name(c)) in ("load", "open", "exists", "isfile")
        and c.args
        and ast.unparse(c.args[0]) == path
        for c in s.calls
    )


def _is_param(s: Script, expr: ast.expr) -> bool:
    scope = s.scope_of(expr)
    if not isinstance(expr, ast.Name) or not isinstance(scope, ast.FunctionDef):
        return False
    return expr.id in {a.arg for a in scope.args.args + scope.args.kwonlyargs} and bool(
        s.call_sites(scope)
    )


# --- 3. processes that never pick their GPU -------------------------------------------


def never_sets_device(s: Script, f: Flow) -> Iterator[Hit]:
    """`init_process_group("nccl")`, then bare `.cuda()` with no `set_device` and no
    per-process device anywhere: every process of the node works on GPU 0."""
    if not f.inits_group or _picks_device(s, f):
        return
    # it knows processes share a node (reads the local rank) yet never uses it for the
    # GPU; without that, one GPU per process (Slurm --gpus-per-task=1) may be the setup
    if not any(
        isinstance(n, ast.Name | ast.Attribute | ast.Subscript) and is_local(s, n) for n in s.nodes
    ):
        return
    for c in s.calls:
        bare = (
            isinstance(c.func, ast.Attribute)
            and c.func.attr == "cuda"
            and not c.args
            and not c.keywords
            and not s.call_name(c).startswith("torch.")
        )
        if bare and not _single_process(s, f, c):
            text = ast.unparse(c)
            text = text if len(text) < 60 else "..." + text[-45:]
            yield Hit(
                "DDP-HARDCODED-DEVICE",
                c.func.end_lineno or c.lineno,  # the line of `.cuda()` in a chained call
                (
                    f"`{text}` with no `torch.cuda.set_device(local_rank)` anywhere: "
                    "`.cuda()` means the current GPU, which is GPU 0 in every process"
                ),
                {"seen": "`.cuda()` while the current GPU is never set"},
                node=c,
            )
            return


def _picks_device(s: Script, f: Flow) -> bool:  # noqa: PLR0911 - one case per way to pick
    """Some code chooses a GPU per process: set_device, CUDA_VISIBLE_DEVICES, a device
    or `.cuda(i)`/`.to(i)` from a variable, `cuda:{...}`, DDP's device_ids."""
    for n in s.nodes:
        if isinstance(n, ast.Constant) and n.value == "CUDA_VISIBLE_DEVICES":
            return True
        if isinstance(n, ast.JoinedStr) and "cuda:" in ast.unparse(n):
            return True
        if not isinstance(n, ast.Call):
            continue
        name = last(s.call_name(n))
        if name in ("set_device", "set_device_index", "device") and (
            name != "device"
            or len(n.args) > 1
            or any(k.arg == "index" for k in n.keywords)
            or (n.args and not isinstance(n.args[0], ast.Constant))  # torch.cuda.device(i)
        ):
            return True
        a0 = n.args[0] if n.args else None
        if name == "cuda" and a0 is not None and not isinstance(a0, ast.Constant):
            return True
        if (
            name == "to"
            and a0 is not None
            and (_DEVICE_NAME.search(ident(a0) or "") or f.rank_valued(a0))
        ):
            return True
        if name in ("Accelerator", "Fabric", "Trainer", "DataParallel") or any(
            k.arg in ("device_ids", "device_id") for k in n.keywords
        ):
            return True
    return False


def _single_process(s: Script, f: Flow, node: ast.AST) -> bool:
    for a in s.ancestors(node):
        if isinstance(a, ast.If) and any(
            w in ast.unparse(a.test).lower() for w in ("distributed", "world_size", "ddp")
        ):
            return True
    return False


# --- 4. a distributed loop over a loader every rank reads whole -----------------------


def distributed_loader(s: Script, f: Flow) -> Iterator[Hit]:
    """`init_process_group()` without a DDP model (inference, feature extraction), and a
    loop over a DataLoader with no DistributedSampler that writes its results: every
    rank does the whole dataset (N times the work, duplicate outputs)."""
    if not f.inits_group or f.wrapper_calls or f.uses("DistributedSampler", "prepare"):
        return
    for loop in s.nodes:
        it = iterated(s, loop)  # None for anything but a for loop
        if it is None or not isinstance(loop, ast.For | ast.AsyncFor):
            continue
        loaders = [o for o in s.origins(it) if is_loader(s, o)]
        if not loaders or _writes(s, f, list(loop.body)) is None:
            continue
        loader = loaders[0]
        if not isinstance(loader, ast.Call) or any(
            kwarg(loader, k, i) is not None for k, i in (("sampler", 3), ("batch_sampler", 4))
        ):
            continue
        data = kwarg(loader, "dataset", 0)
        if any(k.arg is None for k in loader.keywords) or (
            data is not None and split_by_rank(s, f, data)
        ):
            continue
        yield Hit.at(
            "DDP-SAMPLER",
            loader,
            (
                f"`{ast.unparse(loader.func)}` of `{ast.unparse(data) if data else 'the data'}` "
                "has no DistributedSampler, and every process of the group runs this loop: "
                "each rank processes the whole dataset"
            ),
            severity="warning",
            dataset=ast.unparse(data) if data else "dataset",
            loader=_name_of(s, loader),
        )
        return


def _name_of(s: Script, node: ast.AST) -> str:
    parent = s.parents.get(node)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
        return ast.unparse(parent.targets[0])
    return "loader"


RULES = (
    local_master_io,
    wrapper_attr_passed,
    wrapper_attr_self,
    wrapper_attr_inherited,
    never_sets_device,
    distributed_loader,
)
