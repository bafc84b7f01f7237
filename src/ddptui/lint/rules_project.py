"""Rules that real projects needed: the global rank used where the local GPU index
belongs, and model parameters that take no part in forward while DDP is not told."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Final

from ddptui.lint.device_facts import device_string
from ddptui.lint.exclusive import exclusive, held
from ddptui.lint.flow import Flow, ident
from ddptui.lint.lint27 import layer_attrs
from ddptui.lint.model import Hit
from ddptui.lint.nodes import own_nodes
from ddptui.lint.param_free import may_hold_nothing
from ddptui.lint.rank_sources import attr_values, declared, visible_devices
from ddptui.lint.script import Script
from ddptui.lint.syntax import const, kwarg, last

_GLOBAL_ENV: Final = frozenset({"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"})
_LOCAL_ENV: Final = frozenset(
    {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}
)
_GLOBAL_NAME: Final = re.compile(r"^(global_|world_)?rank$|^RANK$|^global_rank$", re.I)
_FIRST_HELPER: Final = re.compile(r"zero_first|rank_zero_first|main_process_first|local_first")
_LAYERS: Final = re.compile(
    r"^(Linear|Bilinear|LazyLinear|Conv[123]d|ConvTranspose[123]d|Embedding|EmbeddingBag"
    r"|LSTM|GRU|RNN|LSTMCell|GRUCell|MultiheadAttention|LayerNorm|Sequential|ModuleList"
    r"|ModuleDict|Transformer\w*|BatchNorm[123]d|GroupNorm)$"
)


def _env_key(expr: ast.expr) -> str | None:
    """'RANK' for `os.environ["RANK"]`, `os.getenv("RANK")`, `os.environ.get("RANK", 0)`."""
    if isinstance(expr, ast.Subscript) and "environ" in ast.unparse(expr.value):
        v = const(expr.slice)
        return v if isinstance(v, str) else None
    if isinstance(expr, ast.Call) and expr.args and ident(expr.func) in ("getenv", "get"):
        if ident(expr.func) == "get" and "environ" not in ast.unparse(expr.func):
            return None
        v = const(expr.args[0])
        return v if isinstance(v, str) else None
    return None


# torch.distributed, and DeepSpeed's drop-in `from deepspeed import comm as dist`
_DIST_MODULE: Final = re.compile(r"distributed|^deepspeed\.comm\.")


def rank_kind(s: Script, expr: ast.expr, depth: int = 0) -> str | None:  # noqa: PLR0911, PLR0912
    """'global' when an expression is the global rank as far as the code shows
    (`dist.get_rank()`, `int(os.environ["RANK"])`, `node_rank * gpus + gpu`, a name given
    one of those), 'local' for the local rank or a GPU index computed from it
    (`LOCAL_RANK`, `rank % torch.cuda.device_count()`), None when unknown."""
    if depth > 4:
        return None
    env = _env_key(expr)
    if env is not None:
        return "global" if env in _GLOBAL_ENV else "local" if env in _LOCAL_ENV else None
    if isinstance(expr, ast.Call):
        name = last(s.call_name(expr))
        if name == "get_rank" and _DIST_MODULE.search(s.call_name(expr)) and not expr.args:
            return None if kwarg(expr, "group") is not None else "global"
        if name in ("get_local_rank", "get_node_local_rank", "current_device"):
            return "local"
        if name in ("int", "str") and expr.args:
            return rank_kind(s, expr.args[0], depth + 1)
        if name in ("Field", "field"):
            return _field_kind(s, expr, depth)
        return _returned_kind(s, expr, depth)
    if isinstance(expr, ast.Subscript) and visible_devices(s, expr.value):
        return "physical"  # `[int(i) for i in os.environ["CUDA_VISIBLE_DEVICES"].split(",")][r]`
    if isinstance(expr, ast.BinOp):
        if isinstance(expr.op, ast.Mod):
            return "local"
        text = ast.unparse(expr).lower()
        if isinstance(expr.op, ast.Add) and "node" in text and ("gpu" in text or "rank" in text):
            return "global"  # node_rank * gpus_per_node + gpu
        return None
    if isinstance(expr, ast.Name | ast.Attribute):
        kinds: set[str] = set()
        origins = s.origins(expr)
        if isinstance(expr, ast.Attribute) and origins == [expr]:  # `args.rank = ...`
            origins = attr_values(s, ast.unparse(expr))
        elif isinstance(expr, ast.Attribute) and not origins:  # a declared field of `self`
            origins = declared(s, ast.unparse(expr))
        for o in origins:
            if o is expr or isinstance(o, ast.Constant):
                continue  # `rank = dist.get_rank() if dist.is_initialized() else 0`
            k = rank_kind(s, o, depth + 1)
            if k is None and isinstance(o, ast.Name | ast.Attribute) and o is not expr:
                continue
            kinds.add(k or "unknown")
        if "physical" in kinds:
            return "physical"
        if kinds == {"global"}:
            return "global"
        if "local" in kinds:
            return "local"
        return None
    return None


def _returned_kind(s: Script, call: ast.Call, depth: int) -> str | None:
    """What a project helper returns (`def get_rank(): return dist.get_rank() if ...
    else 0`): 'global' when every value it returns that is not a constant is."""
    kinds = {
        rank_kind(s, r.value, depth + 1)
        for fn in s.callees(call)
        for r in own_nodes(fn)
        if isinstance(r, ast.Return) and r.value is not None and not isinstance(r.value, ast.Constant)
    }
    return kinds.pop() if len(kinds) == 1 else None


def _field_kind(s: Script, call: ast.Call, depth: int) -> str | None:
    """A declared field's value: `Field(default_factory=f)` / `field(default_factory=f)` is
    what `f()` returns; `Field(default=x)` is `x`."""
    factory = kwarg(call, "default_factory")
    if factory is not None:
        fake = ast.copy_location(ast.Call(func=factory, args=[], keywords=[]), call)
        s.parents[fake] = call  # resolved where the field is declared
        return _returned_kind(s, fake, depth)
    default = kwarg(call, "default", 0)
    return rank_kind(s, default, depth + 1) if default is not None else None


def _sinks(s: Script, f: Flow) -> Iterator[tuple[ast.AST, ast.expr, str]]:
    """(where to report, the value, what it is used for) of GPU-index arguments."""
    # device strings anywhere in the project's followed modules (a checkpoint loader
    # reached only through a runner class a config names)
    for n in dict.fromkeys(n for m in s.modules for n in m.nodes):
        v = device_string(n)
        if v is not None and isinstance(n, ast.expr):
            yield n, v, f"`{ast.unparse(n)}`"
    for c in s.calls:
        name = last(s.call_name(c))
        if not name and isinstance(c.func, ast.Attribute):
            name = c.func.attr  # `get_accelerator().set_device(...)`: DeepSpeed's accelerator
        a0 = c.args[0] if c.args else None
        if name in ("set_device", "set_device_index") and a0 is not None:
            yield c, a0, f"`{ast.unparse(c)}`"
        elif c in f.ddp_calls:
            ids = kwarg(c, "device_ids")
            if isinstance(ids, ast.List | ast.Tuple) and len(ids.elts) == 1:
                yield ids, ids.elts[0], f"`device_ids={ast.unparse(ids)}`"
            out = kwarg(c, "output_device")
            if out is not None:
                yield out, out, f"`output_device={ast.unparse(out)}`"
        elif name == "device" and s.call_name(c).startswith("torch") and len(c.args) > 1:
            if const(c.args[0]) == "cuda":
                yield c, c.args[1], f"`{ast.unparse(c)}`"
        elif isinstance(c.func, ast.Attribute) and c.func.attr == "cuda" and a0 is not None:
            yield c, a0, f"`{ast.unparse(c)}`"
        elif _FIRST_HELPER.search(name) and a0 is not None:
            yield c, a0, f"`{ast.unparse(c)}` (each node's local rank 0 should go first)"


def global_rank_device(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.distributed:
        return
    seen: set[ast.AST] = set()  # one finding per call (device_ids and output_device)
    for at, value, what in _sinks(s, f):
        call = at if isinstance(at, ast.Call) else s.parents.get(s.parents.get(at, at), at)
        if isinstance(at, ast.List | ast.Tuple):
            call = s.parents.get(s.parents.get(at, at), at)  # list -> keyword -> call
        kind = rank_kind(s, value)
        if kind not in ("global", "physical") or call in seen:
            continue
        seen.add(call)
        if kind == "physical":
            yield Hit.at(
                "DDP-HARDCODED-DEVICE",
                at,
                (
                    f"{what} is given `{ast.unparse(value)}`, a physical GPU number taken from "
                    "CUDA_VISIBLE_DEVICES: inside the process the visible GPUs are renumbered "
                    "0..n-1, so this names another GPU or none"
                ),
                seen=f"{what} with a GPU number from CUDA_VISIBLE_DEVICES",
            )
            continue
        source = _misnamed_source(s, value)
        if source is not None:
            if source in seen:
                continue
            seen.add(source)
            yield Hit.at(
                "DDP-HARDCODED-DEVICE",
                source,
                (
                    f"`{ast.unparse(value)}` is given the global rank `{ast.unparse(source)}` "
                    f"and then used as the GPU index ({what}): on the second node it names a "
                    "GPU that does not exist"
                ),
                seen=f"{what} with the global rank `{ast.unparse(value)}`",
            )
            continue
        # `Model(\n ...\n).cuda(rank)`: the line of the rank handed over, what changes
        where = value if isinstance(at, ast.Call) and value.lineno != at.lineno else at
        yield Hit.at(
            "DDP-HARDCODED-DEVICE",
            where,
            (
                f"{what} is given the global rank `{ast.unparse(value)}`, not the GPU index on "
                "this node: on the second node it names a GPU that does not exist"
            ),
            seen=f"{what} with the global rank `{ast.unparse(value)}`",
        )


def _misnamed_source(s: Script, value: ast.expr) -> ast.expr | None:
    """`local_rank = dist.get_rank()` in the function that then calls
    `set_device(local_rank)`, `.cuda(local_rank)`, `device_ids=[local_rank]` (MASR's
    trainer): the uses are right for a local rank, the assignment is what is wrong, and
    the fix (`int(os.environ["LOCAL_RANK"])`) goes on that one line. Only for a name
    that says it is the local rank, given the global rank once in the same function
    (besides constants): a name like `rank` is right and its uses are what change."""
    if not isinstance(value, ast.Name) or "local" not in value.id.lower():
        return None
    sources = [o for o in s.origins(value) if o is not value and not isinstance(o, ast.Constant)]
    if len(sources) != 1 or not isinstance(sources[0], ast.Call):
        return None
    source = sources[0]
    if s.scope_of(source) is not s.scope_of(value) or rank_kind(s, source) != "global":
        return None
    return source


def _module_class(s: Script, cls: ast.ClassDef) -> bool:
    return any(
        last(s.qualname(b) or "") == "Module" or s.class_named(b) is not None for b in cls.bases
    )


def _layer(s: Script, value: ast.expr) -> bool:
    if not isinstance(value, ast.Call):
        return False
    qn = s.call_name(value)
    if _LAYERS.match(last(qn)) and qn.startswith("torch"):
        return True
    cls = s.class_named(value.func)
    return cls is not None and _module_class(s, cls)


def unused_params(s: Script, f: Flow) -> Iterator[Hit]:
    """A layer built in `__init__` of a model that DDP wraps, which no other method of
    the class reads, while DDP runs without find_unused_parameters."""
    if not f.torch_ddp_calls or any(
        _set(kwarg(c, "find_unused_parameters"))
        or _set(kwarg(c, "static_graph"))
        or any(k.arg is None for k in c.keywords)  # `**ddp_args`: may carry either
        for c in f.torch_ddp_calls
    ):
        return
    frozen = _frozen(s)
    for cls, wrap in _wrapped_classes(s, f):
        found = _unused_layer(s, cls, None, 0)
        if found is None:
            continue
        owner, attr, node = found
        wrapped = set(s.origins(wrap.args[0])) if wrap.args else set()
        if any(attr in ast.unparse(y) or wrapped & set(s.origins(y)) for y in frozen):
            continue  # its parameters are frozen: DDP leaves them out
        where = s.path_of(node)
        via = "" if owner is cls else f" (through `{owner.name}`, which `{cls.name}` holds)"
        yield Hit.at(
            "DDP-FIND-UNUSED",
            s.entry_anchor(wrap),
            (
                f"DDP wraps `{cls.name}` without find_unused_parameters, but "
                f"`self.{attr}` of `{owner.name}` ({where}:{node.lineno}) takes no part in "
                f"what it runs{via}: DDP waits for gradients that never come and fails at "
                "the second step"
            ),
            severity="error",
        )
        return


def _set(flag: ast.expr | None) -> bool:
    """Given and not a literal False."""
    return flag is not None and const(flag) is not False


def _frozen(s: Script) -> list[ast.expr]:
    """What the code freezes: `y` of `for p in y.parameters(): p.requires_grad = False`
    or `p.requires_grad_(False)`, and of `y.requires_grad_(False)`."""
    out: list[ast.expr] = []
    for n in s.nodes:
        target: ast.expr | None = None
        if (
            isinstance(n, ast.Attribute)
            and n.attr == "requires_grad"
            and isinstance(n.ctx, ast.Store)
        ):
            target = n.value
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "requires_grad_"
        ):
            target = n.func.value
        if target is None:
            continue
        loop = next((a for a in s.ancestors(n) if isinstance(a, ast.For)), None)
        if (
            isinstance(target, ast.Name)
            and loop is not None
            and isinstance(loop.iter, ast.Call)
            and isinstance(loop.iter.func, ast.Attribute)
        ):
            target = loop.iter.func.value  # `for p in y.parameters():`
        out.append(target)
    return out


def _unused_layer(  # noqa: PLR0912 - the class, its methods that run, its submodules
    s: Script, cls: ast.ClassDef, entries: set[str] | None, depth: int
) -> tuple[ast.ClassDef, str, ast.Assign] | None:
    """A layer `cls.__init__` builds that the methods which run never read. `entries`:
    the methods called on it (None: any method may be, as for the model DDP wraps); a
    submodule of a project class is looked into with the methods its owner calls on it
    (`self.backbone.forward_hidden(x)` runs `forward_hidden`, not `forward`)."""
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    init = methods.get("__init__")
    if init is None or _reflective(cls):
        return None
    if entries is None:
        running = set(methods) - {"__init__"}
    else:
        if not entries <= set(methods):
            return None  # a method of a base class: not followed
        running, work = set(), list(entries)
        while work:
            m = work.pop()
            if m in running:
                continue
            running.add(m)
            work += [
                n.func.attr
                for n in ast.walk(methods[m])
                if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and isinstance(n.func.value, ast.Name)
                and n.func.value.id == "self"
                and n.func.attr in methods
            ]
    reads = _reads(cls, [methods[m] for m in running])
    in_init = _reads(cls, [init])
    for node in ast.walk(init):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        t = node.targets[0]
        if not (
            isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
        ):
            continue
        if (
            t.attr not in reads
            and t.attr not in in_init
            and _layer(s, node.value)
            and not may_hold_nothing(s, init, t.attr)
        ):
            return cls, t.attr, node
        if t.attr in reads and depth < 2:
            sub = _module_of_value(s, node.value)
            called = _methods_called(s, reads[t.attr], sub)
            if sub is not None and called is not None:
                found = _unused_layer(s, sub, called, depth + 1)
                if found is not None:
                    return found
    return None


def _reads(cls: ast.ClassDef, funcs: list[ast.FunctionDef]) -> dict[str, list[ast.Attribute]]:
    out: dict[str, list[ast.Attribute]] = {}
    for fn in funcs:
        for n in ast.walk(fn):
            if (
                isinstance(n, ast.Attribute)
                and isinstance(n.value, ast.Name)
                and n.value.id == "self"
                and isinstance(n.ctx, ast.Load)
            ):
                out.setdefault(n.attr, []).append(n)
    return out


def _module_of_value(s: Script, value: ast.expr) -> ast.ClassDef | None:
    """The project nn.Module class a value is built from (`Backbone(...)`, or a parameter
    given one at the call sites)."""
    for o in s.origins(value):
        if isinstance(o, ast.Call):
            cls = s.class_named(o.func)
            if cls is not None and _module_class(s, cls):
                return cls
    return None


def _methods_called(
    s: Script, uses: list[ast.Attribute], sub: ast.ClassDef | None
) -> set[str] | None:
    """The methods run on `self.x` at these uses: `self.x(...)` is forward,
    `self.x.m(...)` is m, `self.x.size` (not a method) runs nothing; any other use
    (passed on, iterated, a child layer called directly): None (unknown)."""
    if sub is None:
        return None
    methods = {n.name for n in sub.body if isinstance(n, ast.FunctionDef)}
    out: set[str] = set()
    for use in uses:
        parent = s.parents.get(use)
        if isinstance(parent, ast.Call) and parent.func is use:
            out.add("forward")
        elif isinstance(parent, ast.Attribute) and parent.attr in methods:
            if not isinstance(s.parents.get(parent), ast.Call):
                return None  # a bound method handed on
            out.add(parent.attr)
        elif isinstance(parent, ast.Attribute) and parent.attr in layer_attrs(sub):
            return None  # a child layer read directly (`self.x.blocks[-1](q)`, TabICL)
        elif isinstance(parent, ast.Attribute) and not isinstance(s.parents.get(parent), ast.Call):
            continue  # a plain attribute (`self.x.context_length`) runs no layer
        else:
            return None
    return out


def _wrapped_classes(s: Script, f: Flow) -> list[tuple[ast.ClassDef, ast.Call]]:
    """The project model classes DDP wraps, each with its DDP call."""
    out: dict[ast.ClassDef, ast.Call] = {}
    for call in f.ddp_calls:
        if not call.args:
            continue
        for o in s.origins(call.args[0]):
            if isinstance(o, ast.Call):
                cls = s.class_named(o.func)
                if cls is not None and cls not in out and _module_class(s, cls):
                    out[cls] = call
    return list(out.items())


def _reflective(cls: ast.ClassDef) -> bool:
    """The class reaches its attributes by name or by iteration: no verdict possible."""
    return any(
        isinstance(n, ast.Name | ast.Attribute)
        and ident(n) in ("getattr", "children", "named_children", "modules", "__dict__", "_modules")
        for n in ast.walk(cls)
    ) or any(
        isinstance(n, ast.Attribute) and n.attr == "requires_grad" and isinstance(n.ctx, ast.Store)
        for n in ast.walk(cls)
    )


# What the DDP wrapper itself answers: nn.Module's API and DDP's own attributes.
_WRAPPER_API: Final = frozenset(
    {
        "module", "forward", "no_sync", "join", "join_hook", "join_device",
        "join_process_group", "register_comm_hook", "device_ids", "output_device",
        "process_group", "broadcast_buffers", "find_unused_parameters", "static_graph",
        "require_backward_grad_sync", "require_forward_param_sync", "gradient_as_bucket_view",
        "reducer", "logger", "bucket_bytes_cap", "device", "device_type", "dim",
        "parameters", "named_parameters", "buffers", "named_buffers", "children",
        "named_children", "modules", "named_modules", "state_dict", "load_state_dict",
        "train", "eval", "training", "to", "cuda", "cpu", "half", "float", "double",
        "bfloat16", "type", "zero_grad", "requires_grad_", "apply", "share_memory",
        "register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook",
        "register_backward_hook", "register_full_backward_pre_hook", "register_buffer",
        "register_parameter", "register_module", "add_module", "get_submodule",
        "get_parameter", "get_buffer", "extra_repr", "compile", "to_empty", "ipu", "xpu",
        "mtia", "set_extra_state", "get_extra_state", "register_state_dict_pre_hook",
        "register_load_state_dict_post_hook", "dump_patches", "call_super_init",
        # mmcv's and mmengine's MMDistributedDataParallel add these (frameworks.py)
        "train_step", "val_step", "test_step", "scatter", "to_kwargs",
    }
)  # fmt: skip


def wrapper_attr(s: Script, f: Flow) -> Iterator[Hit]:
    """`model = DDP(model)`, then `model.head` in the same function: the wrapper has no
    `head` (its model is `model.module`)."""
    for call in f.ddp_calls:
        assign = s.parents.get(call)
        if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1):
            continue
        name = ast.unparse(assign.targets[0])
        scope = s.scope_of(call)
        rebound = [
            n.lineno
            for n in ast.walk(scope)
            if isinstance(n, ast.Assign)
            and n is not assign
            and any(ast.unparse(t) == name for t in n.targets)
            and n.lineno > assign.lineno
        ]
        end = min(rebound, default=10**9)
        wrap_held = held(s, call)  # the tests the wrap runs under, for each read below
        said: set[str] = set()  # each attribute once: each is a place to unwrap
        for n in ast.walk(scope):
            if (
                isinstance(n, ast.Attribute)
                and n.attr not in said
                and isinstance(n.ctx, ast.Load)
                and ast.unparse(n.value) == name
                and assign.lineno < n.lineno < end
                and s.scope_of(n) is scope
                and not n.attr.startswith("_")
                and n.attr not in _WRAPPER_API
                and not _checks_wrapper(s, n)
                and not exclusive(wrap_held, held(s, n))
            ):
                yield Hit.at(
                    "DDP-WRAPPER-ATTR",
                    n,
                    (
                        f"`{ast.unparse(n)}` reads `{n.attr}` from the DDP wrapper made at line "
                        f"{assign.lineno}: it has none (the model is `{name}.module`)"
                    ),
                    model=name,
                    attr=n.attr,
                )
                said.add(n.attr)


def _checks_wrapper(s: Script, node: ast.AST) -> bool:
    """Under a test that tells the wrapper from the model (`hasattr(m, "module")`,
    `isinstance(m, DDP)`, `type(m) is dict` (Jingkang50/OpenOOD 3de61c4: a dict of
    wrappers or one wrapper), `if distributed`)."""
    for a in s.ancestors(node):
        if isinstance(a, ast.If | ast.IfExp):
            text = test_text(a.test, node)
            if any(
                w in text
                for w in ("module", "isinstance", "hasattr", "type(", "Parallel", "distributed")
            ) or _wrapper_test_helper(s, a.test):
                return True
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef):
            return False
    return False


def test_text(test: ast.expr, node: ast.AST) -> str:
    """The test's text without its `hasattr(x, ...)` checks of objects other than the
    one read (`hasattr(cfg.augmentation, "neftune_noise_alpha")` tells nothing of the
    model's mode; `hasattr(model, "module")` does)."""
    text = ast.unparse(test)
    base = ast.unparse(node.value) if isinstance(node, ast.Attribute) else ""
    for c in ast.walk(test):
        if (
            isinstance(c, ast.Call)
            and isinstance(c.func, ast.Name)
            and c.func.id == "hasattr"
            and c.args
            and base
            and not (ast.unparse(c.args[0]).startswith(base) or base.startswith(ast.unparse(c.args[0])))
        ):
            text = text.replace(ast.unparse(c), "")
    return text


RULES = (global_rank_device, unused_params, wrapper_attr)


def _wrapper_test_helper(s: Script, test: ast.expr) -> bool:
    """A project helper that tells the wrapper from the model (YOLOP's `is_parallel(model)`:
    `return type(model) in (nn.parallel.DataParallel, nn.parallel.DistributedDataParallel)`)."""
    return any(
        any(
            w in ast.unparse(r.value)
            for r in ast.walk(fn)
            if isinstance(r, ast.Return) and r.value is not None
            for w in ("DistributedDataParallel", "DataParallel", "hasattr", "isinstance")
        )
        for c in ast.walk(test)
        if isinstance(c, ast.Call)
        for fn in s.callees(c)
    )
