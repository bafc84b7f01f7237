"""Rules about the model and its set-up: the wrapper, devices, BatchNorm, the loss,
seeds, NCCL variables, mixed precision (pitfalls 1, 2, 5-8, 10, 11, 17; fp16)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Final

from ddptui.lint.anchor import first_binding
from ddptui.lint.callers import moved_with_owner
from ddptui.lint.device_facts import moves_itself, on_meta, sets_visible_devices
from ddptui.lint.flow import Flow, ident
from ddptui.lint.frameworks import moved_held
from ddptui.lint.lint13 import rank0_gpu0
from ddptui.lint.lint18 import bn_rebinding
from ddptui.lint.lint24 import bn_anchors, seed_anchor
from ddptui.lint.model import Hit
from ddptui.lint.rules_seed import rank_seed, seed_calls
from ddptui.lint.script import Script
from ddptui.lint.syntax import const, kwarg, last

_CUDA_N: Final = re.compile(r"^cuda:\d+$")
_MOVERS: Final = frozenset({"to", "cuda"})
# `model.to(torch.bfloat16)`, `.to(self._dtype)`: a cast, the module stays where it is
_DTYPE: Final = re.compile(
    r"^(torch\.(float|bfloat|half|double|int|uint|bool|complex)\w*|\w*dtype|\w*\.\w*dtype)$", re.I
)
_BN: Final = re.compile(r"^(Lazy)?BatchNorm[123]d$")
_BN_ARCHS: Final = re.compile(
    r"^(resnet|resnext|wide_resnet|densenet|mobilenet|efficientnet|inception_v3|googlenet|regnet"
    r"|shufflenet|mnasnet|convnext_|vgg\d+_bn)"
)
NCCL_TUNING: Final = frozenset(
    {
        "NCCL_ALGO",
        "NCCL_PROTO",
        "NCCL_BUFFSIZE",
        "NCCL_NTHREADS",
        "NCCL_MIN_NCHANNELS",
        "NCCL_MAX_NCHANNELS",
        "NCCL_MIN_CTAS",
        "NCCL_MAX_CTAS",
        "NCCL_P2P_DISABLE",
        "NCCL_SHM_DISABLE",
        "NCCL_IB_DISABLE",
        "NCCL_NET_GDR_LEVEL",
        "NCCL_NET_GDR_READ",
        "NCCL_P2P_LEVEL",
        "NCCL_CROSS_NIC",
        "NCCL_NSOCKS_PERTHREAD",
        "NCCL_SOCKET_NTHREADS",
        "NCCL_IB_QPS_PER_CONNECTION",
        "NCCL_LL_THRESHOLD",
        "NCCL_TREE_THRESHOLD",
        "NCCL_CHUNKSIZE",
        "NCCL_NVLS_ENABLE",
        "NCCL_COLLNET_ENABLE",
        "NCCL_P2P_NET_CHUNKSIZE",
        "NCCL_IB_GID_INDEX",
        "NCCL_LAUNCH_MODE",
        "NCCL_NET_SHARED_BUFFERS",
    }
)
_WEIGHTED_LOSS: Final = frozenset({"CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss"})


def receiver(call: ast.Call) -> str | None:
    return ast.unparse(call.func.value) if isinstance(call.func, ast.Attribute) else None


def _moves(c: ast.Call) -> bool:
    """`.cuda()`, `.to(device)`; not a cast alone (`.to(torch.bfloat16)`, `.to(dtype=...)`)."""
    if not (isinstance(c.func, ast.Attribute) and c.func.attr in _MOVERS):
        return False
    if c.func.attr == "cuda" or kwarg(c, "device") is not None:
        return True
    if c.args:
        return not all(_DTYPE.match(ast.unparse(a)) for a in c.args)
    return not any(k.arg in ("dtype", "memory_format") for k in c.keywords)


def moved_before(s: Script, expr: ast.expr, line: int) -> bool:
    """Whether the module `expr` was put on a device before `line` (`.to()`, `.cuda()`,
    built with `device=`), as far as the file shows."""
    if any(last(s.call_name(c)) == "set_default_device" for c in s.calls):
        return True
    places = [(ast.unparse(expr), s.scope_of(expr), line)]
    for o in s.origins(expr):
        if not isinstance(o, ast.Call) or (o.lineno > line and s.scope_of(o) is places[0][1]):
            continue
        if _moves(o) or kwarg(o, "device") is not None:
            return True
        if any(
            isinstance(a, ast.With)
            and "device" in (ctx := ast.unparse(a.items[0].context_expr))
            and "meta" not in ctx
            for a in s.ancestors(o)
        ):
            # built under `with torch.device("cuda"):`; not "meta", where parameters have
            # no storage until `to_empty` (ecmwf/WeatherGenerator's trainer wrapped its meta
            # model in DDP first: blind AI1)
            return True
        parent = s.parents.get(o)
        if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
            here = s.scope_of(o) is places[0][1]
            places.append((ast.unparse(parent.targets[0]), s.scope_of(o), line if here else 10**9))
    if any(
        c.lineno < until and _moves(c) and receiver(c) == text
        for text, scope, until in places
        for c in s.function_calls(scope)
    ):
        return True
    # moved where it travelled through (`model, diffusion = build(...)`, `model.to(dev)`,
    # then `Trainer(model=model)` wraps it): a mover on a value built by the same call
    built = {o for o in s.origins(expr) if isinstance(o, ast.Call) and _is_constructor(s, o)}
    return bool(built) and any(
        isinstance(c.func, ast.Attribute)
        and _moves(c)
        and not (s.scope_of(c) is places[0][1] and c.lineno > line)
        and built & set(s.origins(c.func.value))
        for c in s.calls
    )


def dataparallel(s: Script, f: Flow) -> Iterator[Hit]:
    if f.wrapper_calls:
        return  # DataParallel is then the single-process fallback branch
    for c in s.calls:
        qn = s.call_name(c)
        if last(qn) == "DataParallel" and qn.startswith("torch"):
            yield Hit.at(
                "DDP-DATAPARALLEL",
                c,
                (
                    "nn.DataParallel in a script that starts a process group: each process trains "
                    "its own copy and gradients are never synchronised across processes"
                    if f.inits_group
                    else "nn.DataParallel: one process drives every GPU of one machine"
                ),
                severity="error" if f.inits_group else None,
                model=_arg0(c),
            )


def _arg0(call: ast.Call) -> str:
    return ast.unparse(call.args[0]) if call.args else "model"


def wrap_before_to(s: Script, f: Flow) -> Iterator[Hit]:
    for call in f.ddp_calls:
        if not call.args or last(s.call_name(call)) in ("build_ddp", "create_ddp_model"):
            continue  # mmcv's moves the model itself; detectron2 builds it on its device
        arg = call.args[0]
        end = call.end_lineno or call.lineno  # `DDP(\n model.cuda(rank), ...)`: inside it
        if moved_before(s, arg, end):
            continue
        parent = s.parents.get(call)
        names = {ast.unparse(arg)}
        if isinstance(parent, ast.Assign):
            names |= {ast.unparse(t) for t in parent.targets}
        later = [
            c
            for c in s.function_calls(s.scope_of(call))
            if c.lineno > end
            and isinstance(c.func, ast.Attribute)
            and _moves(c)
            and receiver(c) in names
        ]
        built_here = any(
            isinstance(o, ast.Call)
            and _is_constructor(s, o)
            and not _holds_moved(s, o)
            and not moves_itself(s, o)
            and not _after_or_wrapper(s, f, o, call, end)
            for o in s.origins(arg)
        )
        meta = on_meta(s, arg)
        if meta is not None:
            yield Hit.at(
                "DDP-WRAP-BEFORE-TO",
                call,
                (
                    f"`{ast.unparse(arg)}` is built on the meta device (line {meta.lineno}: no "
                    "storage) and wrapped in DDP before it is materialised on its GPU "
                    "(`to_empty(device=...)`): DDP's first broadcast of rank 0's weights has "
                    "nothing to send"
                ),
                model=ast.unparse(arg),
            )
        elif later:
            yield Hit.at(
                "DDP-WRAP-BEFORE-TO",
                call,
                (
                    f"`{ast.unparse(arg)}` is wrapped in DDP here and moved to its device only "
                    f"afterwards (line {later[0].lineno})"
                ),
                also=((later[0], "moved to its device at"),),  # the fix moves it before
                model=ast.unparse(arg),
            )
        elif kwarg(call, "device_ids") is not None and built_here and not moved_held(s, arg):
            yield Hit.at(
                "DDP-WRAP-BEFORE-TO",
                call,
                (
                    f"`{ast.unparse(arg)}` is still on the CPU when DDP wraps it with device_ids="
                    f"{ast.unparse(kwarg(call, 'device_ids') or arg)}"
                ),
                model=ast.unparse(arg),
            )


def _after_or_wrapper(s: Script, f: Flow, o: ast.Call, call: ast.Call, end: int) -> bool:
    """An origin that cannot be what this DDP call wraps: a DDP wrapper itself (`module =
    DDP(module, ...)` in a loop rebinds the name to the wrapper) or a value assigned
    later in the same function (StyleGAN2-ADA's snapshot `module = copy.deepcopy(module)
    .cpu()` after the wrapping loop, whose `for name, module in [...]` reads modules moved
    with `.to(device)`)."""
    return o is call or o in f.ddp_calls or (s.scope_of(o) is s.scope_of(call) and o.lineno > end)


def _holds_moved(s: Script, call: ast.Call) -> bool:
    """A container built from modules already on the GPU (`Wrapper(self.model)` after
    `self.model = build().to(device)`): it is there too."""
    return any(
        isinstance(o, ast.Call) and isinstance(o.func, ast.Attribute) and o.func.attr in _MOVERS
        for a in [*call.args, *(k.value for k in call.keywords)]
        for o in s.origins(a)
    )


def _is_constructor(s: Script, call: ast.Call) -> bool:
    name = ident(call.func) or ""
    # `config.instantiate(cfg.model)` (torchtune's, hydra's) builds the module on the CPU
    return (
        name in s.classes
        or (name[:1].isupper() and not name.isupper())
        or (name == "instantiate" and kwarg(call, "device") is None)
    )


def hardcoded_device(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.distributed or sets_visible_devices(s):
        return
    seen: set[int] = set()
    for node in s.nodes:
        what = _hardcoded(s, f, node) or _before_set_device(s, node)
        if what and (_single_process_branch(s, f, node) or rank0_gpu0(s, f, node)):
            continue
        # a multi-line call is reported on the line of its hard-coded argument
        at = next(
            (
                k.value
                for k in getattr(node, "keywords", ())
                if what and k.arg and what.startswith(f"`{k.arg}=")
            ),
            node,
        )
        line = getattr(at, "lineno", 0)
        if what and line not in seen:
            seen.add(line)
            yield Hit.at(
                "DDP-HARDCODED-DEVICE", at, f"{what}: every rank uses the same GPU", seen=what
            )


def _hardcoded(s: Script, f: Flow, node: ast.AST) -> str | None:  # noqa: PLR0911 - one case per API
    if isinstance(node, ast.Assign) and _cuda_n(node.value):
        return f"`{ast.unparse(node)}`"
    if not isinstance(node, ast.Call):
        return None
    qn = s.call_name(node)
    a0 = node.args[0] if node.args else None
    if (
        last(qn) == "device"
        and qn.startswith("torch")
        and a0 is not None
        and (
            _cuda_n(a0)
            or (const(a0) == "cuda" and len(node.args) > 1 and isinstance(const(node.args[1]), int))
        )
    ):
        return f"`{ast.unparse(node)}`"
    if (
        last(qn) in ("set_device", "set_device_index")
        and a0 is not None
        and (_cuda_n(a0) or _int(a0))
    ):
        return f"`{ast.unparse(node)}`"
    if (
        isinstance(node.func, ast.Attribute)
        and node.func.attr in _MOVERS
        and a0 is not None
        and (_cuda_n(a0) or _int(a0))
    ):
        return f"`{ast.unparse(node)}`"
    for kw in node.keywords:
        if kw.arg in ("device", "map_location") and _cuda_n(kw.value):
            return f"`{ast.unparse(node)}`"
    if node in f.ddp_calls:
        ids = kwarg(node, "device_ids")
        if isinstance(ids, ast.List | ast.Tuple) and any(_int(e) for e in ids.elts):
            return f"`device_ids={ast.unparse(ids)}`"
        out = kwarg(node, "output_device")
        if out is not None and _int(out):
            return f"`output_device={ast.unparse(out)}`"
    return None


_MODE_WORDS: Final = ("distributed", "ddp", "world_size", "is_initialized", "multiprocessing")


def _before_set_device(s: Script, node: ast.AST) -> str | None:
    """`torch.empty(1, device="cuda")` at import time, above the module's own
    `torch.cuda.set_device(local_rank)`: the current GPU is still 0, so every rank puts
    a CUDA context and the tensor on GPU 0."""
    if not isinstance(node, ast.Call) or s.class_of(node) is not None:
        return None
    if not isinstance(s.scope_of(node), ast.Module):
        return None
    dev = next((k for k in node.keywords if k.arg == "device" and const(k.value) == "cuda"), None)
    if dev is None:
        return None
    tree = s.module_of(node).tree
    later = [
        c
        for c in s.calls
        if last(s.call_name(c)) == "set_device" and s.scope_of(c) is tree and c.lineno > node.lineno
    ]
    if not later:
        return None
    return (
        f'`device="cuda"` in `{ast.unparse(node)}` runs at import, before '
        f"`{ast.unparse(later[0])}` (line {later[0].lineno}) while the current GPU is still 0"
    )


def _single_process_branch(s: Script, f: Flow, node: ast.AST) -> bool:
    """Inside `if args.distributed: ... else: ...` (or `local_rank == -1`): the
    single-process branch may name GPU 0."""
    for a in s.ancestors(node):
        if isinstance(a, ast.If | ast.IfExp):
            text = ast.unparse(a.test).lower()
            if any(w in text for w in _MODE_WORDS) or (
                isinstance(a.test, ast.Compare)
                and any(const(c) in (-1, None) for c in a.test.comparators)
                and f.rank_valued(a.test.left)
            ):
                return True
    return False


def _cuda_n(e: ast.expr | None) -> bool:
    """`"cuda:0"`, also as `"cuda:0" if torch.cuda.is_available() else "cpu"`."""
    if isinstance(e, ast.IfExp) and const(e.orelse) == "cpu":
        e = e.body
    v = const(e)
    return isinstance(v, str) and bool(_CUDA_N.match(v))


def _int(e: ast.expr) -> bool:
    v = const(e)
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def find_unused(s: Script, f: Flow) -> Iterator[Hit]:
    for call in f.torch_ddp_calls:
        flag = kwarg(call, "find_unused_parameters")
        if flag is not None and const(flag) is True:
            yield Hit.at("DDP-FIND-UNUSED", flag, "DDP(..., find_unused_parameters=True)")


def nccl_tuning(s: Script, f: Flow) -> Iterator[Hit]:
    for node in s.nodes:
        keys: list[str] = []
        if isinstance(node, ast.Assign):
            keys = [
                str(const(t.slice))
                for t in node.targets
                if isinstance(t, ast.Subscript) and "environ" in ast.unparse(t.value)
            ]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            fn, base = node.func.attr, ast.unparse(node.func.value)
            if fn in ("setdefault", "putenv") or (fn == "__setitem__" and "environ" in base):
                keys = [str(const(node.args[0]))] if node.args else []
            elif fn == "update" and "environ" in base:
                keys = [kw.arg for kw in node.keywords if kw.arg]
                for a in node.args:
                    if isinstance(a, ast.Dict):
                        keys += [str(const(k)) for k in a.keys if k is not None]
        for key in keys:
            if key in NCCL_TUNING:
                yield Hit.at("DDP-NCCL-TUNING", node, f"the script sets {key} itself", variable=key)


def batchnorm(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.ddp_calls or f.uses(  # mmcv's build_norm_layer: norm_cfg picks BN or SyncBN
        "convert_sync_batchnorm", "SyncBatchNorm", "convert_syncbn_model", "build_norm_layer"
    ):
        return
    # the code that runs first; then any class of an imported project module (a model
    # built through a registry or getattr() is not followed by name)
    known = any(
        isinstance(o, ast.Call) and s.class_named(o.func) is not None
        for c in f.ddp_calls
        for o in (s.origins(c.args[0]) if c.args else [])
    )
    classes = [
        n
        for m in ([] if known else s.modules[1:])  # the wrapped model's class is known
        for n in m.nodes
        if isinstance(n, ast.Call) and any(isinstance(a, ast.ClassDef) for a in s.ancestors(n))
    ]
    for c in [*s.calls, *classes]:
        qn = s.call_name(c)
        if (_BN.match(last(qn)) and qn.startswith("torch")) or (
            "torchvision" in qn and _BN_ARCHS.match(last(qn))
        ):
            model = _arg0(f.ddp_calls[0])
            here = s.module_of(c) is s.entry
            # in another file: said where the entry builds or wraps the model, where the
            # conversion belongs
            rebound = bn_rebinding(s, f, c)
            for at in [rebound] if rebound else [c] if here else bn_anchors(s, c, f.ddp_calls[0]):
                yield Hit.at(
                    "DDP-BATCHNORM",
                    at,
                    (
                        f"`{ast.unparse(c.func)}`"
                        + ("" if here else f" ({s.path_of(c)}:{c.lineno})")
                        + " keeps per-GPU BatchNorm statistics under DDP (no "
                        "SyncBatchNorm.convert_sync_batchnorm)"
                    ),
                    model=model,
                )
            return


def loss_device(s: Script, f: Flow) -> Iterator[Hit]:
    """A loss whose tensors (a weight, or buffers of a project loss class) stay on the CPU.
    A torch loss built without tensors is not said (lint47): it does no harm where it is,
    so an info about it gave the user nothing to do on correct projects."""
    if not f.distributed or not _uses_gpu(s):
        return
    for c in s.calls:
        qn = s.call_name(c)
        name = last(qn)
        weight = None
        if name.endswith("Loss") and qn.startswith("torch"):
            weight = kwarg(c, "pos_weight") or kwarg(
                c, "weight", 0 if name in _WEIGHTED_LOSS else None
            )
            if weight is None or _on_device(s, weight):
                continue
        elif not (name in s.classes and _has_state(s.classes[name]) and "loss" in name.lower()):
            continue
        if _criterion_moved(s, c) or moved_with_owner(s, c, lambda k: _criterion_moved(s, k)):
            continue
        yield Hit.at(
            "DDP-LOSS-DEVICE",
            c,
            f"`{ast.unparse(c)}` builds a loss whose tensors stay on the CPU"
            + (f" (weight `{ast.unparse(weight)}`)" if weight is not None else ""),
            criterion=_target(s, c) or name,
        )


def _uses_gpu(s: Script) -> bool:
    return any(
        (isinstance(n, ast.Attribute) and n.attr == "cuda")
        or (isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("cuda"))
        or (isinstance(n, ast.keyword) and n.arg == "device_ids")
        for n in s.nodes
    )


def _on_device(s: Script, e: ast.expr) -> bool:
    return any(
        isinstance(o, ast.Call)
        and (
            (isinstance(o.func, ast.Attribute) and o.func.attr in _MOVERS)
            or kwarg(o, "device") is not None
        )
        for o in [e, *s.origins(e)]
    )


def _has_state(cls: ast.ClassDef) -> bool:
    return any(
        isinstance(n, ast.Attribute | ast.Name) and ident(n) in ("register_buffer", "Parameter")
        for n in ast.walk(cls)
    )


def _target(s: Script, c: ast.expr) -> str | None:
    parent = s.parents.get(c)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
        return ast.unparse(parent.targets[0])
    return None


def _criterion_moved(s: Script, c: ast.Call, depth: int = 0) -> bool:
    parent = s.parents.get(c)
    if isinstance(parent, ast.Attribute) and parent.attr in _MOVERS:
        return True
    if isinstance(parent, ast.Return) and depth < 2:
        # a factory (`return EncNetLoss(**kwargs)` in `get_segmentation_loss`): moved
        # where the project moves what the factory returns (SegmenTron's `.to(device)`)
        fn = next((a for a in s.ancestors(c) if isinstance(a, ast.FunctionDef)), None)
        if fn is not None and any(_criterion_moved(s, k, depth + 1) for k in s.call_sites(fn)):
            return True
    name = _target(s, c)
    return name is not None and any(
        isinstance(k.func, ast.Attribute) and k.func.attr in _MOVERS and receiver(k) == name
        for k in s.calls
    )


def seed(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.distributed or seed_calls(s):
        return
    if f.ddp_calls and f.ddp_calls[0].args:
        arg = f.ddp_calls[0].args[0]
        built = [o for o in s.origins(arg) if isinstance(o, ast.Call) and _is_constructor(s, o)]
        first = first_binding(s, arg)  # where the model is first made, before its wrapping
        at = seed_anchor(s, first if first is not None else built[0] if built else f.ddp_calls[0])
        yield Hit.at(
            "DDP-SEED",
            at,
            (
                f"no seed is set before `{ast.unparse(arg)}` is built (DDP copies rank 0's "
                "weights, but everything else random differs per rank and per run)"
            ),
            model=ast.unparse(arg),
        )
        return
    grads = [
        c
        for c in s.calls
        if (f.collective(c) or "").endswith("all_reduce") and "grad" in ast.unparse(c)
    ]
    trains = any(f.is_backward(c) for c in s.calls)
    if grads and trains and not any((f.collective(c) or "").endswith("broadcast") for c in s.calls):
        yield Hit.at(
            "DDP-SEED",
            grads[0],
            (
                "gradients are averaged by hand, but no seed is set and no broadcast makes the "
                "initial weights equal: every rank trains a different model"
            ),
            severity="error",
            model="model",
        )


RULES = (
    dataparallel,
    wrap_before_to,
    hardcoded_device,
    find_unused,
    nccl_tuning,
    batchnorm,
    loss_device,
    seed,
    rank_seed,
)
