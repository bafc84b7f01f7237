"""Severity calibration (lint22): an error means the reading is certain; where the code
cannot establish it, the finding is a warning (found all the same, with the reason said).

Measured on the first scores of blind batches A-O: about one correct project in three got
an error, mostly from DDP-RANK-DIVERGENCE and DDP-WRAPPER-ATTR readings that rest on what
the code does not show. Each condition below names what the reading could not establish:

- DDP-RANK-DIVERGENCE, a `break`/`continue`/`return` under a condition on the rank's own
  data, loss or clock, with no collective in that branch: whether the value differs
  between ranks is not visible (a loss reduced first, a stop flag broadcast by a helper;
  wenet's empty batch and join). A loss found NaN or infinite (one rank's, plainly), or a
  branch that itself runs a collective only the leaving ranks join (`if not loss_finite:
  dist.all_reduce(...); continue`), stays an error.
- DDP-RANK-DIVERGENCE, a loop whose bound depends on the rank only through a name's origin
  (`range(start_epoch, n)`, `range(per_rank_split_lengths[i])`): no rank in the head.
- DDP-RANK-DIVERGENCE, a collective under a test that adds a bare setting to the rank
  (`master_process and args.write_tensors`, llm.c): it may never be on in a distributed
  run; `rank == 0 and step % 100 == 0` is no such setting and stays an error.
- DDP-RANK-DIVERGENCE, a collective under a rank test reached only two or more calls
  deep: on the way it may sit behind a flag, a backend branch or a world-size test the
  reading does not follow (mozilla/TTS: the "DDP forward" is the TensorFlow backend's).
  `if rank == 0: evaluate(model)` with the DDP forward in `evaluate`, or a barrier in the
  loader it calls, stays an error; a thin wrapper (`def barrier(): if
  dist.is_initialized(): dist.barrier()`) is no hop.
- DDP-RANK-DIVERGENCE, a collective under a rank test whose twin on the same tensor is
  called in the same file outside that test (MACE: rank 0 broadcasts a signal, the other
  ranks wait on the same broadcast in a loop): the ranks may pair up there.
- DDP-RANK-DIVERGENCE, the rank-0-last pattern: `if rank != 0: barrier(); return`, then
  `barrier()` after rank 0's work: every rank reaches one barrier (pangaea, H2O
  LLM Studio).
- DDP-WRAPPER-ATTR, an attribute the same function stores on the wrapper's name after the
  wrap and before the read (yolov5: `model.class_weights = ...` after `model =
  DDP(model)`): the read finds it on the wrapper. In a helper the wrapper is passed to,
  an attribute the project stores on a wrapper anywhere (yolov3 `model.hyp = hyp` after
  the wrap, read in utils' `compute_loss(..., model)` reached through test.py; a name
  re-bound in between through a call, as yolov3's `amp.initialize`, is not followed).
"""

from __future__ import annotations

import ast
import re
import weakref
from typing import Final

from ddptui.diagnosis.finding import Severity
from ddptui.lint.flow import Flow
from ddptui.lint.lint25 import device_doubt
from ddptui.lint.lint26 import step_bounded
from ddptui.lint.lint27 import doubt27
from ddptui.lint.model import Hit
from ddptui.lint.nonetest import none_test
from ddptui.lint.reach import walked
from ddptui.lint.script import Script

_RANK_WORD: Final = re.compile(r"(^|_)rank$|^get_rank$|^is_main|^is_master|master", re.I)
# a loss that is NaN or infinite on one rank: the plain case of a rank's own value
_NONFINITE: Final = re.compile(r"isnan|isinf|isfinite|nonfinite|not_finite|\bnan\b", re.I)

_flows: weakref.WeakKeyDictionary[Script, Flow] = weakref.WeakKeyDictionary()


def _flow(s: Script) -> Flow:
    from ddptui.lint.rules_sync import SyncFlow  # here: the rules import lint13, lint13 this

    f = _flows.get(s)
    if f is None:
        f = _flows[s] = SyncFlow(s)
    return f


def calibrated(s: Script, hit: Hit) -> tuple[Severity, str] | None:
    """A warning and its summary where the reading of this error is not certain; None
    where it stands."""
    if hit.id == "DDP-RANK-DIVERGENCE" and hit.node is not None:
        why = _divergence_doubt(s, hit)
    elif hit.id == "DDP-WRAPPER-ATTR" and hit.node is not None:
        why = _wrapper_doubt(s, hit)
    elif hit.id == "DDP-HARDCODED-DEVICE" and hit.node is not None:
        why = _fallback_device(s, hit.node) or device_doubt(s, hit.node) or doubt27(s, hit)
    elif hit.id == "DDP-UNEVEN-BATCH":
        why = step_bounded(s, hit)
    else:
        why = doubt27(s, hit)
    return ("warning", f"{hit.summary} ({why})") if why else None


def _fallback_device(s: Script, node: ast.AST) -> str | None:
    """A fixed GPU set only where no device was given (`if self.device is None:
    self.device = torch.device("cuda:0")`, Stark's trainer, whose distributed runs pass
    `settings.device = cuda:local_rank`): whether a distributed run ever reaches that default
    is not visible. A device fixed outside such a test stays an error."""
    at: ast.AST | None = node
    while at is not None and not isinstance(at, ast.If | ast.FunctionDef | ast.Module):
        at = s.parents.get(at)
    if not isinstance(at, ast.If) or _in_orelse(s, node, at):
        return None
    targets = {
        ast.unparse(t)
        for b in at.body
        for n in ast.walk(b)
        if isinstance(n, ast.Assign)
        for t in n.targets
    }
    # `x is None`, and within an `and` `x.index is None` (a device given without an index:
    # NVIDIA/physicsnemo's datapipes fill in `cuda:0`), or `not hasattr(obj, "_device")`
    # (a default its initialiser replaces: physicsnemo's DistributedManager)
    ops = at.test.values if isinstance(at.test, ast.BoolOp) else [at.test]
    tested = [ast.unparse(x[0]) for op in ops if (x := none_test(op)) is not None and x[1]]
    tested += [_unset_attr(op) for op in ops if _unset_attr(op)]
    if not any(n == t or n.startswith(t + ".") for n in tested for t in targets):
        return None
    return (
        f"not certain: a default for when no device was given (`if {ast.unparse(at.test)}:`); "
        "the code does not show a distributed run reaching it"
    )


def _unset_attr(test: ast.expr) -> str:
    """`obj._device` of `not hasattr(obj, "_device")`, else ""."""
    if not (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)):
        return ""
    call = test.operand
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id == "hasattr"
        and len(call.args) == 2
        and isinstance(call.args[1], ast.Constant)
        and isinstance(call.args[1].value, str)
    ):
        return f"{ast.unparse(call.args[0])}.{call.args[1].value}"
    return ""


def _in_orelse(s: Script, node: ast.AST, branch: ast.If) -> bool:
    at: ast.AST | None = node
    while at is not None and s.parents.get(at) is not branch:
        at = s.parents.get(at)
    return at is not None and at in branch.orelse


def _divergence_doubt(s: Script, hit: Hit) -> str | None:
    node = hit.node
    assert node is not None
    collective = str(hit.facts.get("collective", ""))
    condition = str(hit.facts.get("condition", ""))
    if (
        isinstance(node, ast.Break | ast.Continue | ast.Return)
        and hit.facts.get("reading") == "own-data"
        and not _NONFINITE.search(condition)
    ):
        return (
            f"not certain: the code does not show `{condition}` differing between ranks; "
            "a loss or flag reduced or broadcast first is the same on all of them"
        )
    if isinstance(node, ast.For | ast.AsyncFor | ast.While):
        if not _names_rank(_head(node)):
            return (
                f"not certain: the loop head names no rank; `{condition}` depends on it only "
                "through where its values come from"
            )
        return None
    if not isinstance(node, ast.Call) or hit.facts.get("reading") != "rank-guarded":
        return None
    line = hit.facts.get("guard_line")
    return _guarded_doubt(s, node, line if isinstance(line, int) else None, condition, collective)


def _guarded_doubt(
    s: Script, node: ast.Call, guard_line: int | None, condition: str, collective: str
) -> str | None:
    """A collective under a rank test: rank-0-last, or reached only through calls."""
    guard = _guard(s, node, guard_line, condition)
    if guard is not None and _rank0_last(s, guard, collective):
        return (
            f"the ranks that leave at `if {condition}:` wait in the same collective first: "
            "each rank reaches one"
        )
    twin = _joined_elsewhere(s, node, guard) if guard is not None else None
    if twin is not None:
        return (
            f"not certain: `{ast.unparse(twin)}` at line {twin.lineno}, outside that test, "
            "may be where the other ranks join it"
        )
    flag = _config_flag(s, guard) if guard is not None else None
    if flag is not None:
        return (
            f"not certain: it runs only while `{flag}` holds too, a setting the code does "
            "not show on in a distributed run"
        )
    hops = Flow.sync_hops(collective)
    if hops and _thin(s, hops[0].rsplit(".", 1)[-1]):
        hops = hops[1:]  # `def barrier(): if dist.is_initialized(): dist.barrier()`
    if len(hops) >= 2:
        return (
            f"not certain: the collective is reached only through calls ({len(hops)} deep); "
            "a flag, a backend branch or a world-size test on the way may keep it off"
        )
    gate = _argument_gate(s, node) if len(hops) == 1 else None
    if gate is not None:
        fn, test = gate
        return (
            f"not certain: in `{fn}()` the collective runs only when `{test}` holds, which "
            "the arguments decide"
        )
    return None


def _argument_gate(s: Script, call: ast.Call) -> tuple[str, str] | None:
    """The callee holds its collectives only under tests its arguments decide:
    NVIDIA/physicsnemo's `save_checkpoint(path, models=...)` barriers under `if
    is_distributed:`, which is true only for FSDP-wrapped models (blind batch AI4: a DDP
    example calls it on rank 0 alone, rightly). A test on a parameter, or on a local name
    assigned from one."""
    f = _flow(s)
    for fn in s.callees(call):
        params = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
        derived = set(params)
        for n in ast.walk(fn):
            if isinstance(n, ast.Assign) and _names(n.value) & derived:
                derived |= {t.id for t in n.targets if isinstance(t, ast.Name)}
        colls = [c for c in ast.walk(fn) if isinstance(c, ast.Call) and f.collective(c)]
        tests = [_gate(s, f, c, fn, derived) for c in colls]
        if colls and all(tests):
            return fn.name, ast.unparse(tests[0])[:40]  # type: ignore[arg-type]
    return None


def _gate(s: Script, f: Flow, c: ast.AST, fn: ast.AST, derived: set[str]) -> ast.expr | None:
    for a in s.ancestors(c):
        if a is fn:
            return None
        if isinstance(a, ast.If) and _names(a.test) & derived and not f.is_rank_test(a.test):
            return a.test
    return None


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _config_flag(s: Script, guard: ast.If) -> str | None:
    """`if master_process and args.write_tensors and not args.inference_only:` - beside
    the rank, a bare setting (a name or attribute, maybe negated) that may never be on in
    a distributed run. A comparison (`step % 100 == 0`) is no such flag: it comes true."""
    test = guard.test
    if not isinstance(test, ast.BoolOp) or not isinstance(test.op, ast.And):
        return None
    f = _flow(s)
    for op in test.values:
        bare = op.operand if isinstance(op, ast.UnaryOp) and isinstance(op.op, ast.Not) else op
        if isinstance(bare, ast.Name | ast.Attribute) and not f.is_rank_test(op):
            return ast.unparse(op)
    return None


def _joined_elsewhere(s: Script, call: ast.Call, guard: ast.If) -> ast.Call | None:
    """The same collective on the same tensor, called in the same file outside this rank
    test (MACE's LBFGS closure: rank 0 `broadcast(signal, src=0)`, the other ranks wait
    in a loop on `broadcast(signal, src=0)`): the ranks may pair up there."""
    first = call.args[0] if call.args else None
    name = s.call_name(call)
    if not isinstance(first, ast.Name) or not name.startswith("torch.distributed."):
        return None  # a collective itself: not a helper that reaches one, not a DDP forward
    for n in ast.walk(s.module_of(call).tree):
        if (
            isinstance(n, ast.Call)
            and n is not call
            and n.args
            and isinstance(n.args[0], ast.Name)
            and n.args[0].id == first.id
            and s.call_name(n) == name
            and guard not in set(s.ancestors(n))
        ):
            return n
    return None


def _thin(s: Script, name: str) -> bool:
    """Every project function of that name is a wrapper of a few statements around its
    collective: no hop where a flag could hide it."""
    funcs = [
        n
        for m in s.modules
        for n in walked(s, m.tree)  # walked once per run
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name
    ]
    return bool(funcs) and all(len(_code(fn.body)) <= 3 for fn in funcs)


def _code(body: list[ast.stmt]) -> list[ast.stmt]:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        return body[1:]
    return body


def _head(node: ast.For | ast.AsyncFor | ast.While) -> ast.expr:
    return node.iter if isinstance(node, ast.For | ast.AsyncFor) else node.test


def _names_rank(expr: ast.expr) -> bool:
    for n in ast.walk(expr):
        word = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else ""
        if word and _RANK_WORD.search(word):
            return True
    return False


def _guard(s: Script, call: ast.Call, guard_line: int | None, condition: str) -> ast.If | None:
    """The `if` the hit names: an enclosing one, or the early exit above the call (at
    `guard_line`)."""
    for a in s.ancestors(call):
        if isinstance(a, ast.If) and ast.unparse(a.test) == condition:
            return a
    if guard_line is None:
        return None
    line = guard_line
    scope = s.scope_of(call)
    return next(
        (
            n
            for n in ast.walk(scope)
            if isinstance(n, ast.If) and n.lineno == line and ast.unparse(n.test) == condition
        ),
        None,
    )


def _base(what: str) -> str:
    return what.split(" in `", 1)[0]


def _rank0_last(s: Script, guard: ast.If, collective: str) -> bool:
    """`if rank != 0: barrier(); return` and, after the `if`, the same collective on the
    path of the ranks that stay: each rank reaches it once."""
    if not guard.body or not isinstance(guard.body[-1], ast.Return):
        return False
    f = _flow(s)
    inside = f.stmts_sync(guard.body[:-1])
    if inside is None or _base(inside) != _base(collective):
        return False
    scope = s.scope_of(guard)
    body = getattr(scope, "body", [])
    if guard not in body:
        return False
    after = body[body.index(guard) + 1 :]
    later = f.stmts_sync(after)
    return later is not None and _base(later) == _base(collective)


# DeepSpeedEngine's own members a training step reads (not nn.Module's)
_DS_ENGINE: Final = frozenset(
    {
        "backward",
        "step",
        "optimizer",
        "lr_scheduler",
        "gradient_accumulation_steps",
        "is_gradient_accumulation_boundary",
        "get_global_grad_norm",
        "global_steps",
        "save_checkpoint",
        "load_checkpoint",
        "train_batch",
        "eval_batch",
        "get_lr",
        "fp16_enabled",
        "bfloat16_enabled",
        "zero_optimization_stage",
    }
)


def _deepspeed_engine(s: Script) -> bool:
    """The project calls `deepspeed.initialize` (directly or through an alias)."""
    return any(
        isinstance(n, ast.Attribute)
        and n.attr == "initialize"
        and s.qualname(n.value) == "deepspeed"
        for n in s.nodes
    )


def _wrapper_doubt(s: Script, hit: Hit) -> str | None:
    """`model.attr` read on the wrapper where the same scope stored `model.attr = ...` on
    that name after its last assignment (the wrap) and before the read: the attribute is
    on the wrapper itself (yolov5 `model.class_weights = ...` after `model = DDP(model)`)."""
    node = hit.node
    if not isinstance(node, ast.Attribute) or not isinstance(node.value, ast.Name):
        return None
    name, attr, line = node.value.id, node.attr, node.lineno
    if attr in _DS_ENGINE and _deepspeed_engine(s):
        # MAE-DFER / BEiT fine-tuning (sunlicai/MAE-DFER@80b651d, engine_for_finetuning.py
        # 20 and 80): `model.step()` under `if loss_scaler is None:`, which only the
        # deepspeed.initialize arm leaves None
        return (
            f"not certain: the project also builds a DeepSpeed engine, which has `{attr}`; "
            "this read is right where the model passed here is that engine"
        )
    if hit.facts.get("via") == "parameter":
        store = _attached(s, attr)
        if store is not None:
            return (
                f"not certain: the project stores `{ast.unparse(store)}` on the wrapper "
                f"({s.module_of(store).path}:{store.lineno}); if this read gets that "
                "wrapper, it finds it"
            )
        return None
    scope = s.scope_of(node)
    last = max((a.lineno for a in s.assigned(scope, name) if a.lineno < line), default=0)
    for n in ast.walk(scope):
        if not isinstance(n, ast.Assign) or not last < n.lineno < line:
            continue
        if any(
            isinstance(t, ast.Attribute)
            and t.attr == attr
            and isinstance(t.value, ast.Name)
            and t.value.id == name
            for t in n.targets
        ):
            return (
                f"not certain: line {n.lineno} stores `{name}.{attr}` on the wrapper itself "
                "before this read, which then finds it"
            )
    return None


def _attached(s: Script, attr: str) -> ast.Attribute | None:
    """A store `x.attr = ...` anywhere in the project on a name that holds the DDP wrapper
    there (yolov3 `model.hyp = hyp` in train.py after `model = DDP(model)`, read in utils'
    `compute_loss(p, targets, model)` through test.py). A store while the name held the
    plain model (`model = model.module; model.hyp = hyp; model = DDP(model)`) does not
    count: the new wrapper lacks it."""
    from ddptui.lint.lint19 import holds_wrapper_at  # here, as in _flow

    f = _flow(s)
    for m in s.modules:
        for n in ast.walk(m.tree):
            if not isinstance(n, ast.Assign):
                continue
            for tgt in n.targets:
                if (
                    isinstance(tgt, ast.Attribute)
                    and tgt.attr == attr
                    and isinstance(tgt.value, ast.Name)
                    and holds_wrapper_at(s, f, s.scope_of(n), tgt.value.id, n.lineno)
                ):
                    return tgt
    return None
