"""DDP wrappers of other frameworks, and which of torch DDP's rules hold for each.

What each one is, read in its own sources:

- mmcv's `MMDistributedDataParallel` (mmcv/parallel/distributed.py) and mmengine's
  (mmengine/model/wrappers/distributed.py) subclass torch's DistributedDataParallel:
  `.module`, the `module.` prefix of `state_dict()`, no attribute forwarding, `no_sync`,
  `find_unused_parameters`, the buffer broadcast in forward: all torch's.
  (`train_step`/`val_step` are the wrapper's own methods: `rules_project._WRAPPER_API`.)
- apex's `DistributedDataParallel` (apex/parallel/distributed.py) is a plain
  `nn.Module` holding `self.module`: `state_dict()` keys start with `module.` and model
  attributes are not forwarded (nn.Module.__getattr__ finds only parameters, buffers and
  submodules), so DDP-SAVE-WRAPPER and DDP-WRAPPER-ATTR hold. It has no `no_sync`, no
  `find_unused_parameters` and no buffer broadcast in forward: those rules stay silent.
- A project class whose base is one of these is the same wrapper.
- Not wrappers in this sense (silent): torch FSDP and fairscale's FSDP/ShardedDDP
  (`state_dict()` hooks strip their own prefixes; FSDP's `__getattr__` forwards to the
  wrapped module), DeepSpeed's engine (`DeepSpeedEngine.__getattr__` forwards to
  `self.module`, checkpoints through `save_checkpoint`), accelerate's `prepare()` and
  Lightning strategies (the wrap is the library's; `unwrap_model` is its API).
"""

from __future__ import annotations

import ast
import re
from typing import Final, Literal

from ddptui.lint.reach import registered
from ddptui.lint.script import Script
from ddptui.lint.syntax import last

Kind = Literal["torch", "apex"]

# dotted names as Script.qualname gives them (the import's module path, then the name)
_TORCH_LIKE: Final = frozenset(
    {
        "mmcv.parallel.MMDistributedDataParallel",
        "mmcv.parallel.distributed.MMDistributedDataParallel",
        "mmengine.model.MMDistributedDataParallel",
        "mmengine.model.wrappers.MMDistributedDataParallel",
        "mmengine.model.wrappers.distributed.MMDistributedDataParallel",
    }
)
_APEX: Final = frozenset(
    {
        "apex.parallel.DistributedDataParallel",
        "apex.parallel.distributed.DistributedDataParallel",
    }
)


def ddp_kind(s: Script, call: ast.Call, depth: int = 0) -> Kind | None:
    """Which DDP a call builds: "torch" (torch's or a subclass of it), "apex", or None."""
    qn = s.call_name(call)
    return _kind_of_name(s, qn, call.func, depth)


def _kind_of_name(s: Script, qn: str, expr: ast.expr, depth: int) -> Kind | None:
    head = qn.split(".", 1)[0]
    if qn in _TORCH_LIKE or (head == "torch" and last(qn) == "DistributedDataParallel"):
        return "torch"
    # mmcv.device.build_ddp: MMDistributedDataParallel on CUDA; detectron2's
    # create_ddp_model: DistributedDataParallel(model, device_ids=[local rank]) when world > 1
    if last(qn) in ("build_ddp", "create_ddp_model"):
        return "torch"
    if qn in _APEX or (head == "apex" and last(qn) == "DistributedDataParallel"):
        return "apex"
    cls = s.class_named(expr) if depth <= 3 else None
    # `class MegDistributedDataParallel(DistributedDataParallel)`: its base's kind
    kinds = [
        _kind_of_name(s, bq, base, depth + 1)
        for base in (cls.bases if cls is not None else [])
        if (bq := s.qualname(base))
    ]
    return next((k for k in kinds if k is not None), None)


_DIST_WORDS: Final = re.compile(
    r"^(local_|global_|world_|node_)?rank$|distributed|^ddp|_ddp$|world_size|get_rank"
    r"|init_process_group|all_reduce|all_gather|barrier|is_main_process|is_master"
    # DDP's own flag, set by a class that knows it runs wrapped (mmediting's BasicVSR)
    r"|^find_unused_parameters$",
    re.I,
)


def quiet_alternative(self: Script, node: ast.AST) -> bool:
    """`node` lies in a registered runner (one of the trainers a config picks: an IL
    trainer beside the DD-PPO one: it loads data, saves or backpropagates itself) whose
    code, and its project base classes', shows nothing distributed: it runs alone, so DDP
    rules have nothing to say about it. A registered model, head or dataset is not a
    runner: the distributed trainer runs it, and what is said about it stands."""
    cls = next(
        (a for a in self.ancestors(node) if isinstance(a, ast.ClassDef) and registered(a)),
        None,
    )
    return cls is not None and _runner(cls) and not _shows_distributed(self, cls, 0)


def framework_called(self: Script, node: ast.AST) -> bool:
    """`node` lies in a registered class whose code shows nothing distributed (a
    dataset's `evaluate()` writing its results, a model's hook): the framework's runner
    calls it, on the ranks its own hooks choose (mmcv's DistEvalHook evaluates on rank
    0), which the project's code does not show: who writes there is not judged."""
    cls = next(
        (a for a in self.ancestors(node) if isinstance(a, ast.ClassDef) and registered(a)),
        None,
    )
    return cls is not None and not _shows_distributed(self, cls, 0)


def _runner(cls: ast.ClassDef) -> bool:
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name | ast.Attribute)
        and ident_of(n.func) in ("backward", "DataLoader", "save", "save_checkpoint")
        for n in ast.walk(cls)
    )


def _shows_distributed(self: Script, cls: ast.ClassDef, depth: int) -> bool:
    if any(
        isinstance(n, ast.Name | ast.Attribute) and _DIST_WORDS.search(ident_of(n))
        for n in ast.walk(cls)
    ):
        return True
    bases = [self.class_named(b) for b in cls.bases] if depth < 3 else []
    return any(b is not None and _shows_distributed(self, b, depth + 1) for b in bases)


def ident_of(n: ast.Name | ast.Attribute) -> str:
    return n.id if isinstance(n, ast.Name) else n.attr


def keyed_value(s: Script, expr: ast.Subscript) -> list[ast.expr]:
    """What `models["generator"]` (or `self.model["generator"]`) holds: the values put
    under that constant key into the dict it comes from, by the dict literal or a later
    `models["generator"] = DDP(models["generator"])` in the dict's scope."""
    key = expr.slice
    if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
        return []
    out: list[ast.expr] = []
    for o in s.origins(expr.value):
        if not isinstance(o, ast.Dict):
            continue
        out += [v for k, v in zip(o.keys, o.values, strict=False) if _same_key(k, key.value)]
        holder = s.parents.get(o)
        if not (isinstance(holder, ast.Assign) and len(holder.targets) == 1):
            continue
        name = ast.unparse(holder.targets[0])
        for n in ast.walk(s.scope_of(o)):
            if isinstance(n, ast.Assign) and any(
                isinstance(t, ast.Subscript)
                and ast.unparse(t.value) == name
                and _same_key(t.slice, key.value)
                for t in n.targets
            ):
                out.append(n.value)
    return out


def _same_key(k: ast.expr | None, key: str) -> bool:
    return isinstance(k, ast.Constant) and k.value == key


MOVERS: Final = frozenset({"to", "cuda"})


# --- collectives of the frameworks' engines ---------------------------------------------

# DeepSpeedEngine.save_checkpoint: "all processes must call this method and not just the
# process with rank 0" (deepspeed/runtime/engine.py: it gathers the ZeRO partitions and
# ends in a barrier). torch FSDP's state_dict()/optim_state_dict() all-gather the shards
# (torch/distributed/fsdp/_state_dict_utils.py, _optim_utils.py): every rank must call
# them, also with rank0_only=True.
_ENGINE_SYNCS: Final = frozenset({"save_checkpoint", "load_checkpoint"})
_FSDP_SYNCS: Final = frozenset(
    {"state_dict", "full_optim_state_dict", "optim_state_dict", "sharded_optim_state_dict",
     "summon_full_params"}
)  # fmt: skip


def engine_collective(s: Script, call: ast.Call) -> str | None:
    """`engine.save_checkpoint(d)` of a DeepSpeed engine, `fsdp_model.state_dict()`,
    `FSDP.full_optim_state_dict(model, opt)`: calls every rank must make."""
    fn = call.func
    qn = s.call_name(call)
    if last(qn) in _FSDP_SYNCS and "FullyShardedDataParallel" in qn:
        return f"FSDP.{last(qn)}"
    if not isinstance(fn, ast.Attribute) or fn.attr not in _ENGINE_SYNCS | _FSDP_SYNCS:
        return None
    made = [last(s.call_name(o)) for o in s.origins(fn.value) if isinstance(o, ast.Call)]
    made_qn = [s.call_name(o) for o in s.origins(fn.value) if isinstance(o, ast.Call)]
    if fn.attr in _ENGINE_SYNCS and any(q in ("deepspeed.initialize",) for q in made_qn):
        return f"{ast.unparse(fn.value)}.{fn.attr} (DeepSpeed)"
    if fn.attr in _FSDP_SYNCS and any(
        m == "FullyShardedDataParallel" and q.split(".", 1)[0] == "torch"
        for m, q in zip(made, made_qn, strict=True)
    ):
        return f"{ast.unparse(fn.value)}.{fn.attr}() of FSDP"
    return None


def moved_held(s: Script, arg: ast.expr) -> bool:
    """The module is held as `self.x` (directly, or by the caller of the function whose
    parameter DDP wraps) and some method moves it in place: `self.x.to(self.device)`."""
    exprs = [arg]
    scope = s.scope_of(arg)
    if isinstance(arg, ast.Name) and isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        exprs += s.param_args(scope, arg.id)
    # `Wrapper(self.actor_critic)`: a container of the held module
    exprs += [a for e in exprs if isinstance(e, ast.Call) for a in e.args]
    held = {t for e in exprs if (t := ast.unparse(e)).startswith("self.")}
    return bool(held) and any(
        isinstance(c.func, ast.Attribute)
        and c.func.attr in MOVERS
        and ast.unparse(c.func.value) in held
        for c in s.calls
    )
