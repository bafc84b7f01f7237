"""Precision and reach that blind batch K (lint15) asked for, each a general reading.

Precision (K's correct projects): an early exit that also needs a run option (`if
config.THROUGHPUT_MODE and dist.get_rank() == 0: return`, VMamba) makes the divergence a
warning; the wrapper handed to a helper that runs its forward (DPR) is no bypass; a
one-shot resume branch (`if cfg['checkpoint'] is not None: ...; cfg['checkpoint'] = None`,
Cutie) does not run again on a loop's next pass; listing methods (`named_parameters`) are
no forward; a write under `if writer is not None:` where the writer is made on rank 0 only.
Reach: the `else` of `if ddp and rank == 0:` runs on the other DDP ranks (baby-llama2);
`save_pretrained(dir)` read back by `from_pretrained(.., dir)` before a barrier (openvla);
torch.load in the `torch.cuda.is_available()` arm or through a returning loader (wespeaker,
SimpleCV); `__enter__` of a class a `with` enters (SevenNet).
"""

from __future__ import annotations

import ast
import re
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.nonetest import none_test
from ddptui.lint.script import Script
from ddptui.lint.syntax import kwarg


def mode_exit(f: Flow, guard: ast.AST, call: ast.Call, s: Script) -> str | None:
    """An early exit that also needs an option of the run (`if config.THROUGHPUT_MODE and
    dist.get_rank() == 0: ... return`, VMamba's main.py): in the ordinary run the option is
    off and every rank goes on; the ranks part only in that mode (a warning, not an
    error). The option: an attribute of a config or argument object, not a rank test."""
    if not isinstance(guard, ast.If) or guard in set(s.ancestors(call)):
        return None
    test = guard.test
    if not (isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)):
        return None
    opts = [
        v
        for v in test.values
        if isinstance(v, ast.Attribute)
        and not (isinstance(v.value, ast.Name) and v.value.id == "self")
        and not f.is_rank_test(v)
    ]
    return ast.unparse(opts[0]) if opts else None


def one_shot(st: ast.If) -> bool:
    """`if X is not None:` or `if X:` whose body clears X (`X = None`, `X = False`,
    `X = ""`): the branch runs once, on the first pass of a loop at most (Cutie's resume:
    `if cfg['checkpoint'] is not None: trainer.load_checkpoint(cfg['checkpoint']);
    cfg['checkpoint'] = None`, inside its loop over training stages)."""
    tested = none_test(st.test)
    if tested is None or tested[1]:
        return False
    text = ast.unparse(tested[0])
    return any(
        isinstance(n, ast.Assign)
        and isinstance(n.value, ast.Constant)
        and not n.value.value
        and any(ast.unparse(t) == text for t in n.targets)
        for b in st.body
        for n in ast.walk(b)
    )


def helper_runs_wrapper(s: Script, f: Flow, call: ast.Call) -> bool:
    """`loss = _do_biencoder_fwd_pass(self.biencoder, batch, ...)` (DPR): the DDP wrapper
    is handed to a project function that calls that parameter (`model(...)`,
    `model.forward(...)`): the step runs the wrapper's forward there, and what the
    unwrapped module computes beside it (the input batch) is no bypass."""
    for fn in s.callees(call):
        params = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]]
        if params and params[0] in ("self", "cls"):
            params = params[1:]
        handed = {
            params[i] for i, a in enumerate(call.args) if i < len(params) and f.is_ddp_value(a)
        } | {k.arg for k in call.keywords if k.arg in params and f.is_ddp_value(k.value)}
        if handed and any(
            isinstance(n, ast.Call)
            and (
                (isinstance(n.func, ast.Name) and n.func.id in handed)
                or (
                    isinstance(n.func, ast.Attribute)
                    and n.func.attr == "forward"
                    and isinstance(n.func.value, ast.Name)
                    and n.func.value.id in handed
                )
            )
            for n in ast.walk(fn)
        ):
            return True
    return False


def cuda_arm_unmapped(s: Script, load: ast.Call) -> bool:
    """`if torch.cuda.is_available(): ckpt = torch.load(path) else: ckpt = torch.load(path,
    map_location='cpu')` (wespeaker's load_checkpoint before 68c0d31): the author maps the
    file only where no GPU exists, so it holds GPU tensors, and the unmapped arm is the one
    every DDP process takes: each loads them onto the GPU they were saved from."""
    child: ast.AST = load
    for a in s.ancestors(load):
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.Module):
            return False
        if isinstance(a, ast.If) and child is not a.test:
            test, negated = a.test, False
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                test, negated = test.operand, True
            if isinstance(test, ast.Call) and s.call_name(test).endswith("cuda.is_available"):
                in_body = any(child is st for st in a.body)
                other = a.orelse if in_body else a.body
                return in_body != negated and any(
                    isinstance(n, ast.Call)
                    and s.call_name(n) == "torch.load"
                    and kwarg(n, "map_location") is not None
                    for st in other
                    for n in ast.walk(st)
                )
        child = a
    return False


def returned_checkpoint(s: Script, load: ast.Call) -> bool:
    """`ckpt = torch.load(filepath); return ckpt` in a loader (SimpleCV's CheckPoint.load
    before fbf9903) whose caller reads keys of it (`ckpt[CheckPoint.MODEL]`,
    `ckpt["optimizer"]`): a training checkpoint, read one call up."""
    scope = s.scope_of(load)
    if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    parent = s.parents.get(load)
    held = (
        parent.targets[0].id
        if isinstance(parent, ast.Assign)
        and len(parent.targets) == 1
        and isinstance(parent.targets[0], ast.Name)
        else None
    )
    if not any(
        isinstance(n, ast.Return)
        and n.value is not None
        and (n.value is load or (isinstance(n.value, ast.Name) and n.value.id == held))
        for n in ast.walk(scope)
    ):
        return False
    for site in s.call_sites(scope):
        up = s.parents.get(site)
        if not (
            isinstance(up, ast.Assign)
            and len(up.targets) == 1
            and isinstance(up.targets[0], ast.Name)
        ):
            continue
        name = up.targets[0].id
        if any(
            isinstance(n, ast.Subscript)
            and isinstance(n.value, ast.Name)
            and n.value.id == name
            and _key(n.slice)
            for n in ast.walk(s.scope_of(site))
        ):
            return True
    return False


def _key(sl: ast.expr) -> bool:
    """A string key or a named constant (`CheckPoint.MODEL`)."""
    if isinstance(sl, ast.Constant):
        return isinstance(sl.value, str)
    return isinstance(sl, ast.Attribute) and sl.attr.isupper()


def rank_conjoined_else(s: Script, f: Flow, node: ast.AST) -> bool:
    """In the `else` of `if ddp and get_rank() == 0:` (baby-llama2-chinese before PR #56):
    the ranks other than 0 of the DDP run take that arm too, so it is no single-process
    branch: the wrapper's `state_dict()` saved there keeps the `module.` prefix."""
    child = node
    for a in s.ancestors(node):
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.Module):
            return False
        if isinstance(a, ast.If) and any(child is st for st in a.orelse):
            test = a.test
            return (
                isinstance(test, ast.BoolOp)
                and isinstance(test.op, ast.And)
                and any(f.is_rank_test(v) for v in test.values)
                and not all(f.is_rank_test(v) for v in test.values)
            )
        child = a
    return False


def pretrained_kind(call: ast.Call) -> str | None:
    """'psave' for `x.save_pretrained(dir)`, 'pload' for `X.from_pretrained(..., dir)`
    (Hugging Face, PEFT): a folder written and read back."""
    if isinstance(call.func, ast.Attribute) and call.args:
        return {"save_pretrained": "psave", "from_pretrained": "pload"}.get(call.func.attr)
    return None


def reloads(s: Script, written: list[ast.Call], load: ast.Call) -> ast.Call | None:
    """The `save_pretrained(save_dir)` among `written` whose folder `load` reads back: the
    same expression, or a value the saved path was given (`save_dir = adapter_dir if
    cfg.use_lora else run_dir`, then `PeftModel.from_pretrained(base, adapter_dir)`:
    openvla's finetune.py before 339e601). A hub name or another folder is no reload."""
    read = {ast.unparse(a) for a in load.args}
    read_from = {id(o) for a in load.args for o in _built(s, a)}
    for save in reversed(written):
        path = save.args[0]
        if ast.unparse(path) in read or read_from & {id(o) for o in _built(s, path)}:
            return save
    return None


def _built(s: Script, path: ast.expr) -> list[ast.expr]:
    """Where a local name's path was built (`cfg.adapter_tmp_dir / exp_id`,
    `os.path.join(out, "adapter")`): never a bare parameter or attribute, which many
    unrelated paths share (`args`)."""
    if not isinstance(path, ast.Name):
        return []
    return [o for o in s.origins(path) if isinstance(o, ast.BinOp | ast.Call | ast.JoinedStr)]


def dunder_used(s: Script, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """`__enter__` / `__exit__` of a project class that some `with` statement enters
    (`with Logger(...) as log:`, `with Logger():` of a singleton): Python calls them,
    no line of the project does (SevenNet's Logger before 9849bb0 reopened its log file
    in `__enter__` on every rank)."""
    if fn.name not in ("__enter__", "__exit__", "__aenter__", "__aexit__"):
        return False
    cls = s.class_of(fn)
    if cls is None:
        return False
    for n in s.nodes:
        if isinstance(n, ast.With | ast.AsyncWith):
            for item in n.items:
                e = item.context_expr
                if isinstance(e, ast.Call) and s.class_named(e.func) is cls:
                    return True
    return False


_MODULE_API: Final = re.compile(
    r"(^|_)(parameters|buffers|modules|children|state_dict)$|^(train|eval|to|cuda|cpu|half"
    r"|float|zero_grad|requires_grad_|apply|register_\w+)$"
)


def module_api(call: ast.Call) -> bool:
    """`model.module.named_parameters()`, `get_lora_parameters()`, `.train()`: a method
    that lists or sets up the module, no forward (OpenTSLM's optimizer groups read the
    unwrapped model's parameters; the loss comes elsewhere)."""
    return isinstance(call.func, ast.Attribute) and bool(_MODULE_API.search(call.func.attr))


def none_guarded(s: Script, f: Flow, node: ast.AST) -> bool:
    """Under `if log_writer is not None:` (or `if log_writer:`) where every value the name
    gets other than None is made under a rank test (`if global_rank == 0: log_writer =
    SummaryWriter(...) else: log_writer = None`, then passed down: MAR's and FractalGen's
    evaluate() removes its sample folder there): only that rank gets past it."""
    child = node
    for a in s.ancestors(node):
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.Module):
            return False
        if isinstance(a, ast.If) and any(child is st for st in a.body):
            name = _not_none_name(a.test)
            if name is not None and _rank_only_values(s, f, a, name):
                return True
        child = a
    return False


def _not_none_name(test: ast.expr) -> str | None:
    tested = none_test(test)
    if tested is None or tested[1] or not isinstance(tested[0], ast.Name):
        return None
    return tested[0].id


def _rank_only_values(s: Script, f: Flow, at: ast.AST, name: str) -> bool:
    scope = s.scope_of(at)
    values = s.assigned(scope, name)
    if not values and isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        values = []
        for arg in s.param_args(scope, name):
            if isinstance(arg, ast.Name):
                values += s.assigned(s.scope_of(arg), arg.id) or [arg]
            else:
                values.append(arg)
    real = [v for v in values if not (isinstance(v, ast.Constant) and v.value is None)]
    return bool(real) and all(f.local_guard(v) is not None for v in real)
