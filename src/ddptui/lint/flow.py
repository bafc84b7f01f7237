"""What a script does across ranks: which calls are collectives or DDP sync points,
which code runs on only some ranks (under `if rank == 0:`, after `if rank != 0:
return`, in a function only ever called that way), and which loops train."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Iterable
from typing import Final

from ddptui.lint.flagoff import flag_guarded, switched_off
from ddptui.lint.frameworks import ddp_kind, engine_collective, keyed_value
from ddptui.lint.lightning import lightning_collective, sentinel_sign
from ddptui.lint.nodes import calls_in, own_nodes
from ddptui.lint.project import FuncNode
from ddptui.lint.rank_pairs import paired_rank_sync, rank_minus_one
from ddptui.lint.script import Pick, Script
from ddptui.lint.syntax import const, last

COLLECTIVES: Final = frozenset(
    {
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_object",
        "reduce",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "broadcast",
        "broadcast_object_list",
        "barrier",
        "monitored_barrier",
        "gather",
        "gather_object",
        "scatter",
        "scatter_object_list",
        "all_to_all",
        "all_to_all_single",
        "new_group",
        "all_reduce_coalesced",
    }
)
# Collectives of the launchers' objects (accelerate.Accelerator, lightning Fabric).
LAUNCHER_COLLECTIVES: Final = frozenset(
    {
        "wait_for_everyone",
        "gather",
        "gather_for_metrics",
        "reduce",
        "pad_across_processes",
        "barrier",
        "all_reduce",
        "all_gather",
        "broadcast",
    }
)
LAUNCHERS: Final = frozenset({"Accelerator", "Fabric"})
WRAPPERS: Final = frozenset({"DistributedDataParallel", "FullyShardedDataParallel"})
# call_sync names a sync point reached through calls as "<inner> in `f()`", once per hop
# (innermost first): sync_hops reads the functions back from that description
_HOP: Final = re.compile(r" in `([\w.]+)\(\)`")
_RANK_IDS: Final = frozenset(
    {
        "gpu",
        "gpu_id",
        "gpu_idx",
        "device_id",
        "local_gpu",
        "proc_id",
        "proc_idx",
        "process_index",
        "local_process_index",
        "process_id",
    }
)
_MAIN_FLAG: Final = re.compile(
    r"^(is_)?(local_|global_|world_)?(main|master|primary|chief|leader)(_process|_proc|_rank"
    r"|_node|_worker)?$|^(is_)?rank_?(0|zero)(_only)?$|^is_(global|local|world)_(zero|process_zero)$"
    r"|^is_(local_|world_)?process_zero$"
)
_RANK_ENV: Final = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "SLURM_PROCID",
        "SLURM_LOCALID",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "PMI_RANK",
    }
)
_GET_RANK: Final = frozenset(
    {
        "get_rank",
        "get_local_rank",
        "get_node_local_rank",
        "get_global_rank",
        "get_group_rank",
        "Get_rank",  # mpi4py
    }
)


def is_main_flag(name: str) -> bool:
    """`is_master`, `is_main_process`, `rank0_only`...: a name that means "this is the
    main process"."""
    return bool(_MAIN_FLAG.match(name.lower()))


def ident(expr: ast.expr) -> str | None:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return None


def is_rank_name(name: str) -> bool:
    low = name.lower()
    if low in _RANK_IDS:
        return True
    # `ranks`, `rank_list`, `world_rank_size`, `ranking` name many ranks or none
    return "rank" in low and not any(
        w in low for w in ("ranks", "list", "world", "size", "ranking")
    )


class Flow:
    """Rank and synchronisation facts of one script, computed on demand and cached."""

    def __init__(self, script: Script) -> None:
        self.s = script
        self._busy: set[FuncNode] = set()  # functions being walked (recursion guard)
        self._guard_busy: set[FuncNode] = set()
        self._idents: set[str | None] | None = None
        self._loops: list[ast.For | ast.AsyncFor | ast.While] | None = None
        self._rv_memo: dict[ast.AST, bool] = {}
        self._bw_memo: dict[FuncNode, bool] = {}  # _func_backward's answers
        self._rt_memo: dict[tuple[ast.AST, int], bool] = {}  # is_rank_test's answers
        self._calls_memo: dict[int, tuple[list[ast.stmt], list[ast.Call]]] = {}
        self._bw_cuts = 0  # call cycles cut so far (see _func_backward)
        self.memo: dict[tuple[str, ast.AST, int], object] = {}  # rules' own answers
        self._re_memo: dict[ast.AST, bool] = {}
        self._paired: set[FuncNode] = set()  # functions whose sync is a zero-first pair
        kinds = {c: ddp_kind(script, c) for c in script.calls}
        self.wrapper_calls = [c for c in script.calls if self._is_wrapper(c) or kinds[c]]
        # torch's DDP, its subclasses (mmcv, mmengine, the project's) and apex's: the
        # wrapper's `module.` keys and attributes (frameworks.py says which rule holds)
        self.ddp_calls = [c for c in self.wrapper_calls if kinds[c]]
        # the subset with torch's reducer: no_sync, find_unused_parameters, buffers
        self.torch_ddp_calls = [c for c in self.ddp_calls if kinds[c] == "torch"]
        names = [script.call_name(c) for c in script.calls]
        self.inits_group = any(
            last(n) == "init_process_group" or n == "deepspeed.init_distributed" for n in names
        )
        self.distributed = bool(
            self.wrapper_calls or self.inits_group or any(self.collective(c) for c in script.calls)
        )

    def _is_wrapper(self, call: ast.Call) -> bool:
        qn = self.s.call_name(call)
        return last(qn) in WRAPPERS and qn.split(".")[0] == "torch"

    def uses(self, *names: str) -> bool:
        """Whether the file mentions any of these attribute or function names at all."""
        if self._idents is None:
            self._idents = {
                ident(n) for n in self.s.nodes if isinstance(n, ast.Attribute | ast.Name)
            }
        return any(n in self._idents for n in names)

    # --- values ---------------------------------------------------------------------

    def is_ddp_value(self, expr: ast.expr) -> bool:
        # `self.model["generator"]`: the dict's entry (a `Pick` of a tuple unpacking
        # follows its origins: `model, opt = wrap(model, opt)`)
        if isinstance(expr, ast.Subscript) and not isinstance(expr, Pick):
            return any(self.is_ddp_value(v) for v in keyed_value(self.s, expr))
        return any(isinstance(o, ast.Call) and o in self.ddp_calls for o in self.s.origins(expr))

    def is_wrapped_value(self, expr: ast.expr) -> bool:
        return any(
            isinstance(o, ast.Call) and o in self.wrapper_calls for o in self.s.origins(expr)
        )

    def launcher_value(self, expr: ast.expr) -> bool:
        return any(
            isinstance(o, ast.Call) and last(self.s.call_name(o)) in LAUNCHERS
            for o in self.s.origins(expr)
        )

    # --- synchronisation points ------------------------------------------------------

    def collective(self, call: ast.Call) -> str | None:
        """`dist.all_reduce` for a collective call (point-to-point send/recv are not)."""
        qn = self.s.call_name(call)
        if qn.startswith("torch.distributed.") and last(qn) in COLLECTIVES:
            return f"dist.{last(qn)}"
        f = call.func
        if (
            isinstance(f, ast.Attribute)
            and f.attr in LAUNCHER_COLLECTIVES
            and self.launcher_value(f.value)
        ):
            return f"{ast.unparse(f.value)}.{f.attr}"
        said = lightning_collective(self.s, call)
        if said is not None:
            return said
        return engine_collective(self.s, call)

    def is_backward(self, call: ast.Call) -> bool:
        f = call.func
        return isinstance(f, ast.Attribute) and f.attr == "backward"

    def direct_sync(self, call: ast.Call) -> str | None:
        """What makes this call wait for the other ranks, if anything does."""
        name = self.collective(call)
        if name:
            return name
        if self.wrapper_calls and self.is_wrapped_value(call.func):
            return f"the DDP forward `{ast.unparse(call.func)}(...)`"
        if self.is_backward(call) and (self.wrapper_calls or self.launcher_value(call.func)):
            return f"`{ast.unparse(call.func)}()` (DDP's gradient all-reduce)"
        return None

    def call_sync(self, call: ast.Call) -> str | None:
        """direct_sync, or the first sync point inside a same-file function it calls."""
        here = self.direct_sync(call)
        if here:
            return here
        for func in self.s.callees(call):
            inner = self.function_sync(func)
            if inner and func in self._paired and rank_minus_one(self.s, call):
                continue  # `zero_first(-1)`: the single-process value takes neither barrier
            if inner and not switched_off(self.s, call, func, self._func_syncs(func)):
                return f"{inner} in `{func.name}()`"
        return None

    @staticmethod
    def sync_hops(what: str) -> list[str]:
        """The functions a sync point described by call_sync is reached through, innermost
        first ("`dist.barrier` in `sync()` in `step()`" -> ["sync", "step"])."""
        return _HOP.findall(what)

    def _func_syncs(self, func: FuncNode) -> list[ast.Call]:
        """The sync points `func` runs itself (as function_sync counts them); a function
        met again through a call cycle adds nothing."""
        if func in self._busy or not flag_guarded(func):
            return []
        self._busy.add(func)
        try:
            return [
                call
                for call in calls_in(func.body)
                if self.local_guard(call) is None and self.call_sync(call)
            ]
        finally:
            self._busy.discard(func)

    @functools.cache  # noqa: B019 - one Flow per lint run
    def function_sync(self, func: FuncNode) -> str | None:
        if func in self._busy:
            return None
        self._busy.add(func)
        try:
            # a collective the function itself keeps under a rank test (the "local rank 0
            # first" helper: `if local_rank not in (-1, 0): barrier()`) depends on the
            # arguments: not counted for its callers (precision first)
            for call in calls_in(func.body):
                if self.local_guard(call) is None:
                    found = self.call_sync(call)
                    if found:
                        return found
            paired = paired_rank_sync(self, calls_in(func.body))  # zero-first helpers
            if paired:
                self._paired.add(func)
            return paired
        finally:
            self._busy.discard(func)

    def stmts_sync(self, stmts: Iterable[ast.AST]) -> str | None:
        for call in calls_in(stmts):
            found = self.call_sync(call)
            if found:
                return found
        return None

    def has_backward(self, func: FuncNode) -> bool:
        return self._func_backward(func, set())

    def stmts_backward(self, stmts: Iterable[ast.AST]) -> bool:
        """A backward pass in these statements, or in a project function they call."""
        return any(
            self.is_backward(c) or any(self.has_backward(fn) for fn in self.s.callees(c))
            for c in calls_in(stmts)
        )

    def reaches(
        self, calls: Iterable[ast.Call], hit: Callable[[ast.Call], bool], hops: int = 3
    ) -> bool:
        """One of these calls is a `hit`, or one in the project functions they call, `hops`
        calls deep at most."""
        for c in calls:
            if hit(c):
                return True
            if hops and any(
                self.reaches(calls_in(fn.body), hit, hops - 1) for fn in self.s.callees(c)
            ):
                return True
        return False

    def _calls_of(self, stmts: list[ast.stmt]) -> list[ast.Call]:
        """calls_in(stmts) of a body, kept: a function is walked once per caller path."""
        kept = self._calls_memo.get(id(stmts))
        if kept is None or kept[0] is not stmts:
            kept = self._calls_memo[id(stmts)] = (stmts, calls_in(stmts))
        return kept[1]

    def _stmts_backward(self, stmts: list[ast.stmt], seen: set[FuncNode]) -> bool:
        for call in self._calls_of(stmts):
            if self.is_backward(call):
                return True
            for f in self.s.callees(call):
                if f in seen:
                    self._bw_cuts += 1
                elif self._func_backward(f, seen):
                    return True
        return False

    def _func_backward(self, func: FuncNode, seen: set[FuncNode]) -> bool:
        """Whether `func` runs a backward pass, memoised: without it every path through a
        project's call graph was walked again (minutes on a 34-file project). A False
        found while a call cycle was cut depends on the path, and is not kept."""
        known = self._bw_memo.get(func)
        if known is not None:
            return known
        cuts = self._bw_cuts
        found = self._stmts_backward(func.body, seen | {func})
        if found or cuts == self._bw_cuts:
            self._bw_memo[func] = found
        return found

    def training_loops(self) -> list[ast.For | ast.AsyncFor | ast.While]:
        """Loops whose body runs a backward pass (directly or through same-file calls)."""
        if self._loops is None:
            self._loops = [
                n
                for n in self.s.nodes
                if isinstance(n, ast.For | ast.AsyncFor | ast.While)
                and self._stmts_backward(n.body, set())
            ]
        return self._loops

    # --- rank-dependent code ----------------------------------------------------------

    def rank_valued(self, expr: ast.AST, depth: int = 0) -> bool:
        if depth:
            return self._rank_valued(expr, depth)
        found = self._rv_memo.get(expr)
        if found is None:
            found = self._rv_memo[expr] = self._rank_valued(expr, 0)
        return found

    def _rank_valued(self, expr: ast.AST, depth: int = 0) -> bool:  # noqa: PLR0911 - per kind
        """Whether an expression IS the rank or is computed from it (`rank`, `args.local_rank`,
        `dist.get_rank()`, `int(os.environ["RANK"])`, `rank % 8`, `is_master = rank == 0`);
        a call that merely takes the rank as an argument is not."""
        if isinstance(expr, ast.Name):
            if is_rank_name(expr.id):
                return True
            return depth < 3 and any(
                self.rank_valued(v, depth + 1)
                for v in self.s.assigned(self.s.scope_of(expr), expr.id, module_too=True)
            )
        if isinstance(expr, ast.Attribute):
            return is_rank_name(expr.attr)
        if isinstance(expr, ast.Call):
            name = last(self.s.call_name(expr))
            if name in _GET_RANK:
                return True
            if name in ("int", "str", "float", "get", "getenv"):
                return any(self.rank_valued(a, depth) for a in expr.args)
            return False
        if isinstance(expr, ast.Constant):
            return expr.value in _RANK_ENV and self._in_environ(expr)
        if isinstance(expr, ast.Subscript):
            # `os.environ["RANK"]`; `config["local_rank"]`: a config dict's rank entry
            # (RUCAIBox/RecBole's trainer tests `self.config["local_rank"] != 0`)
            key = expr.slice
            return (
                isinstance(key, ast.Constant)
                and isinstance(key.value, str)
                and is_rank_name(key.value)
            ) or (self.rank_valued(key, depth) and "environ" in ast.unparse(expr.value))
        if isinstance(expr, ast.BinOp):
            return self.rank_valued(expr.left, depth) or self.rank_valued(expr.right, depth)
        if isinstance(expr, ast.UnaryOp):
            return self.rank_valued(expr.operand, depth)
        if isinstance(expr, ast.IfExp):
            return self.rank_valued(expr.body, depth) or self.rank_valued(expr.orelse, depth)
        if isinstance(expr, ast.Compare | ast.BoolOp | ast.JoinedStr | ast.FormattedValue):
            return any(self.rank_valued(c, depth) for c in ast.iter_child_nodes(expr))
        return False

    def is_rank_expr(self, expr: ast.AST, depth: int = 0) -> bool:
        """Whether the rank appears anywhere in an expression (a per-rank path, a rank
        slice); names are followed to what they were given."""
        if depth:
            return self._is_rank_expr(expr, depth)
        found = self._re_memo.get(expr)
        if found is None:
            found = self._re_memo[expr] = self._is_rank_expr(expr, 0)
        return found

    def _is_rank_expr(self, expr: ast.AST, depth: int) -> bool:
        if self._saved_by_every_rank(expr):
            return False
        for n in [expr, *own_nodes(expr)]:
            if self.rank_valued(n):
                return True
            if isinstance(n, ast.Name) and depth < 2:
                for v in self.s.assigned(self.s.scope_of(n), n.id):
                    # `a, b = f(x)`: one of f's results, not everything f was given
                    if (
                        not isinstance(v, Pick)
                        and not self._saved_by_every_rank(v)
                        and self.is_rank_expr(v, depth + 1)
                    ):
                        return True
        return False

    def _saved_by_every_rank(self, expr: ast.AST) -> bool:
        """`torch.load(f"checkpoint_gpu_{rank}.pt")` of a per-rank file that every rank
        writes at the same point (`torch.save(..., <same path>)` under no rank test,
        arcface_torch's train_v2): the ranks read back values they saved together."""
        if not (
            isinstance(expr, ast.Call) and expr.args and last(self.s.call_name(expr)) == "load"
        ):
            return False
        path = ast.unparse(expr.args[0])
        return any(
            last(self.s.call_name(c)) == "save"
            and len(c.args) > 1
            and ast.unparse(c.args[1]) == path
            and self.local_guard(c) is None
            for c in self.s.calls
        )

    def _in_environ(self, node: ast.AST) -> bool:
        parent = self.s.parents.get(node)
        if isinstance(parent, ast.Subscript | ast.Call):
            text = ast.unparse(parent)
            return "environ" in text or "getenv" in text
        return False

    def is_rank_test(self, test: ast.expr, depth: int = 0) -> bool:
        """`rank == 0`, `dist.get_rank() != 0`, `is_main_process()`, `args.local_rank in
        [-1, 0]`, `self.is_master`... but not `local_rank != -1` (distributed or not).
        Memoised per node and depth: a flag passed down through many call sites fans out
        at every level, and without it a 34-file project took minutes."""
        key = (test, depth)
        found = self._rt_memo.get(key)
        if found is None:
            found = self._rt_memo[key] = self._is_rank_test(test, depth)
        return found

    def _is_rank_test(self, test: ast.expr, depth: int) -> bool:  # noqa: PLR0911 - one case per node kind
        if depth > 7:
            return False
        if isinstance(test, ast.BoolOp):
            return any(self.is_rank_test(v, depth + 1) for v in test.values)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self.is_rank_test(test.operand, depth + 1)
        if isinstance(test, ast.Compare):
            sides = [test.left, *test.comparators]
            ranked = [s for s in sides if self.rank_valued(s)]
            if not ranked:
                return False
            others = [s for s in sides if s not in ranked]
            # `rank >= 0`: distributed or not, the same on every rank (lint/lightning.py)
            return not sentinel_sign(test) and (
                not others or not all(const(o) in (-1, None) for o in others)
            )
        if isinstance(test, ast.Name | ast.Attribute):
            name = ident(test) or ""
            if _MAIN_FLAG.match(name.lower()):
                return True
            if isinstance(test, ast.Name):
                scope = self.s.scope_of(test)
                values = self.s.assigned(scope, test.id, module_too=True)
                if not values and isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
                    values = self.s.param_args(scope, test.id)  # a flag the caller computed
                return any(self.is_rank_test(v, depth + 1) for v in values)
            if isinstance(test.value, ast.Name) and test.value.id == "self":
                # `self.save_to_disk`, given `save_to_disk = local_rank == 0` by the caller
                return any(
                    self.is_rank_test(v, depth + 1)
                    for v, _ in self.s.self_attr_values(test, test.attr)
                )
            return False
        if isinstance(test, ast.Call):
            if _MAIN_FLAG.match(last(self.s.call_name(test)).lower()):
                return True
            return any(
                isinstance(r, ast.Return)
                and r.value is not None
                and self.is_rank_test(r.value, depth + 1)
                for f in self.s.callees(test)
                for r in own_nodes(f)
            )
        return False

    def local_guard(self, node: ast.AST) -> ast.AST | None:
        """The rank test that keeps `node` from running on every rank, within its function:
        an enclosing `if` on the rank, or an earlier `if rank != 0: return`."""
        child = node
        for a in self.s.ancestors(node):
            if (
                isinstance(a, ast.If | ast.IfExp)
                and child is not a.test
                and self.is_rank_test(a.test)
            ):
                return a
            for stmts in _stmt_lists(a):
                if child in stmts:
                    for earlier in stmts[: stmts.index(child)]:
                        # `if rank != 0: return`, also one level down (`if distributed:
                        # gather(); if not is_main_process(): return`)
                        inner = (
                            [earlier, *earlier.body, *earlier.orelse]
                            if isinstance(earlier, ast.If)
                            else []
                        )
                        for st in inner:
                            if (
                                isinstance(st, ast.If)
                                and _exits(st.body)
                                and self.is_rank_test(st.test)
                            ):
                                return st
            if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.Module):
                return None
            child = a
        return None

    @functools.cache  # noqa: B019
    def func_guarded(self, func: FuncNode) -> bool:
        """Every call of `func` in the file runs on some ranks only (or it is decorated
        so: `@rank_zero_only`)."""
        for d in func.decorator_list:
            name = ident(d.func if isinstance(d, ast.Call) else d) or ""
            if _MAIN_FLAG.match(name.lower()) or "rank_zero" in name or "main_process" in name:
                return True
        if func in self._guard_busy:
            return False
        self._guard_busy.add(func)
        try:
            sites = self.s.call_sites(func)
            return (
                bool(sites) and all(self.guarded(c) for c in sites) and not self._both_arms(sites)
            )
        finally:
            self._guard_busy.discard(func)

    def _both_arms(self, sites: tuple[ast.Call, ...]) -> bool:
        """Called in both arms of one rank test (`if rank == 0: train(..., logger)
        else: train(..., None)`, RVC-Project's training script): every rank runs it."""
        arms: dict[ast.AST, set[str]] = {}
        for c in sites:
            g = self.local_guard(c)
            if isinstance(g, ast.If):
                arm = "body" if any(c in set(ast.walk(st)) for st in g.body) else "orelse"
                arms.setdefault(g, set()).add(arm)
        return any(len(v) == 2 for v in arms.values())

    def guarded(self, node: ast.AST) -> bool:
        if self.local_guard(node) is not None:
            return True
        owner = self.s.scope_of(node)
        return isinstance(owner, ast.FunctionDef | ast.AsyncFunctionDef) and self.func_guarded(
            owner
        )


def _stmt_lists(node: ast.AST) -> list[list[ast.stmt]]:
    return [
        v for k in ("body", "orelse", "finalbody") if isinstance(v := getattr(node, k, None), list)
    ]


def _exits(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], ast.Return | ast.Continue | ast.Break | ast.Raise)
