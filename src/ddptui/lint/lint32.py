"""Round 32 (blind batch Y): checkpoints whose keys and the model they are loaded into
disagree about the `module.` prefix (yeyupiaoling/MASR):

- the wrapper's checkpoint read back into a plain model elsewhere (eeb9154
  masr/trainer.py: `save_model` writes the DDP wrapper's `model.state_dict()` to
  `model.pt`; resuming loads it back into the wrapper, but `evaluate` and `export` load
  the same `model.pt` into a freshly built, unwrapped model);
- the plain model's checkpoint loaded into the wrapper (390056f: the saves write
  `model.module`, resuming loads `model.pt` into the wrapper; e9438ee: a pretrained
  state_dict filtered by the wrapper's own keys and loaded with `strict=False` after
  wrapping, so nothing loads and nothing complains)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.nonetest import none_test
from ddptui.lint.script import Script
from ddptui.lint.syntax import kwarg, last

# a checkpoint's file name as a literal: `'model.pt'`, `"best.pth"` (an f-string's
# pieces are not whole names, so they never tie two paths together)
_CKPT_NAME: Final = re.compile(r"^[\w.\-]*\w\.(pt|pth|pkl|bin|ckpt|tar|safetensors)$")


def file_names(s: Script, expr: ast.expr, depth: int = 0) -> set[str]:
    """The checkpoint file names spelled out in a path expression, through the names it
    is built from (`path = os.path.join(d, 'model.pt')`)."""
    out: set[str] = set()
    for n in ast.walk(expr):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            base = n.value.replace("\\", "/").rsplit("/", 1)[-1]
            if _CKPT_NAME.match(base):
                out.add(base)
        elif isinstance(n, ast.Name) and depth < 2:
            for o in s.origins(n, params=False):
                if o is not n and not isinstance(o, ast.Name):
                    out |= file_names(s, o, depth + 1)
    return out


def _loaded_paths(s: Script, value: ast.expr) -> list[ast.expr]:
    """The paths `torch.load(...)` reads to make a loaded value (directly or through a
    name in the same function)."""
    out: list[ast.expr] = []
    for o in [value, *s.origins(value, params=False)]:
        for n in ast.walk(o):
            qn = s.call_name(n) if isinstance(n, ast.Call) else ""
            if (
                isinstance(n, ast.Call)
                and qn.startswith("torch.")
                and last(qn) == "load"
                and n.args
            ):
                out.append(n.args[0])
    return out


def plain_reload(s: Script, f: Flow, save: ast.Call) -> bool:
    """Some `m.load_state_dict(torch.load(p))` into a model that is never the DDP
    wrapper (nor its `.module`) reads a file the save writes, named by the same literal:
    evaluation or export rebuilt the plain model, and the `module.` keys miss it."""
    if len(save.args) < 2:
        return False
    written = file_names(s, save.args[1])
    if not written:
        return False
    for c in s.calls:
        if not (
            isinstance(c.func, ast.Attribute)
            and c.func.attr == "load_state_dict"
            and c.args
            and not f.is_ddp_value(c.func.value)
            and not (isinstance(c.func.value, ast.Attribute) and c.func.value.attr == "module")
            and not any(
                isinstance(n, ast.Constant) and isinstance(n.value, str) and "module" in n.value
                for n in ast.walk(s.scope_of(c))
            )
        ):
            continue
        if any(written & file_names(s, p) for p in _loaded_paths(s, c.args[0])):
            return True
    return False


# --- the plain model's weights loaded into the wrapper -----------------------------------


def _module_of(s: Script, expr: ast.expr) -> bool:
    """`m.module` (itself or where the name got its value)."""
    return any(
        isinstance(o, ast.Attribute) and o.attr == "module" for o in [expr, *s.origins(expr)]
    )


def _saved_receivers(s: Script, save: ast.Call) -> list[ast.expr]:
    """The `X` of the `X.state_dict()` calls that make up a save's first argument
    (directly or through names in the same function)."""
    out: list[ast.expr] = []
    for o in [save.args[0], *s.origins(save.args[0], params=False)]:
        for n in ast.walk(o):
            if (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr == "state_dict"
            ):
                out.append(n.func.value)
    return out


def _plain_weights(s: Script, recv: ast.expr) -> bool:
    """`m.module.state_dict()`, or a helper's parameter some caller hands `m.module`."""
    if _module_of(s, recv):
        return True
    scope = s.scope_of(recv)
    return (
        isinstance(recv, ast.Name)
        and isinstance(scope, ast.FunctionDef)
        and any(_module_of(s, a) for a in s.param_args(scope, recv.id))
    )


def _saves(s: Script, f: Flow) -> tuple[set[str], set[str], bool]:
    """The file names written with the plain model's weights, those written with the
    wrapper's, and whether any save writes the wrapper's."""
    plain: set[str] = set()
    wrapped: set[str] = set()
    any_wrapped = False
    for c in s.calls:
        if not c.args or not s.call_name(c).startswith("torch.") or last(s.call_name(c)) != "save":
            continue
        names = file_names(s, c.args[1]) if len(c.args) > 1 else set()
        for recv in _saved_receivers(s, c):
            if _plain_weights(s, recv):
                plain |= names
                plain.add("")  # the project's convention: plain weights
            elif f.is_ddp_value(recv) and not other_branch_takes_module(s, recv):
                wrapped |= names
                any_wrapped = True
    return plain, wrapped, any_wrapped



def wrapped_before(s: Script, f: Flow, node: ast.Call, depth: int = 0) -> bool:
    """The DDP wrap runs before `node`: earlier in its function, or (one helper deep)
    before every call of the helper that holds it."""
    scope = s.scope_of(node)
    if any(s.scope_of(d) is scope and d.lineno < node.lineno for d in f.ddp_calls):
        return True
    if depth >= 1 or not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    sites = s.call_sites(scope)
    return bool(sites) and all(wrapped_before(s, f, c, depth + 1) for c in sites)


def state_dict_loads(s: Script) -> Iterator[tuple[ast.Call, ast.expr]]:
    """Every `x.load_state_dict(arg, ...)` of the reached code, with its receiver `x`."""
    for c in s.calls:
        if isinstance(c.func, ast.Attribute) and c.func.attr == "load_state_dict" and c.args:
            yield c, c.func.value


def unwrapped_into_wrapper(s: Script, f: Flow) -> Iterator[Hit]:
    """`model.load_state_dict(...)` into the DDP wrapper, after wrapping, where the
    project saves the plain model's weights (`model.module.state_dict()`): the keys
    lack `module.`, so the load raises, or with `strict=False` loads nothing."""
    if not f.torch_ddp_calls:
        return
    plain, wrapped, any_wrapped = _saves(s, f)
    if not plain:
        return
    for c, model in state_dict_loads(s):
        if not (
            f.is_ddp_value(model)
            and not _module_of(s, model)
            and not other_branch_takes_module(s, c)
            and not any(
                isinstance(n, ast.Constant) and isinstance(n.value, str) and "module" in n.value
                for n in ast.walk(s.scope_of(c))
            )
            and wrapped_before(s, f, c)
            and not _callers_skip(s, c)
        ):
            continue
        read = {n for p in _loaded_paths(s, c.args[0]) for n in file_names(s, p)}
        if read & wrapped or (read and not read & plain) or (not read and any_wrapped):
            continue
        loose = const_false(kwarg(c, "strict", 1))
        yield Hit.at(
            "DDP-LOAD-INTO-WRAPPER",
            c,
            (
                f"`{ast.unparse(model)}` is the DDP wrapper here, and the project saves "
                "the plain model's weights (`.module.state_dict()`): no key has the `module.` "
                + ("prefix, and `strict=False` loads nothing without a word" if loose else "prefix")
            ),
            model=ast.unparse(model),
            also=tuple((r, "plain weights saved at") for r in _plain_saves(s, f, read)),
        )


def _plain_saves(s: Script, f: Flow, read: set[str]) -> list[ast.expr]:
    """The `.module.state_dict()` receivers of the saves this load reads back: the other
    place to mend (bshall/acoustic-model 4b99938 acoustic/utils.py:60, whose fix
    "Fixed resuming from saved checkpoint" changed the save, not the load)."""
    out: list[ast.expr] = []
    for c in s.calls:
        if not c.args or not s.call_name(c).startswith("torch.") or last(s.call_name(c)) != "save":
            continue
        names = file_names(s, c.args[1]) if len(c.args) > 1 else set()
        if read and not names & read:
            continue
        out += [r for r in _saved_receivers(s, c) if _plain_weights(s, r) and r not in out]
    return out[:3]


def _callers_skip(s: Script, node: ast.AST) -> bool:
    """`node` runs only when a parameter is given (`if resume_model is not None:`), and
    every caller in the project passes it `None` (MASR `self.evaluate(resume_model=None)`
    from the training loop: the load is for the stand-alone evaluation)."""
    fn = s.scope_of(node)
    if not isinstance(fn, ast.FunctionDef) or not s.call_sites(fn):
        return False
    child: ast.AST = node
    for a in s.ancestors(node):
        if a is fn:
            return False
        tested = none_test(a.test) if isinstance(a, ast.If) else None
        if (
            isinstance(a, ast.If)
            and tested is not None
            and isinstance(tested[0], ast.Name)
            and (child in a.body) != tested[1]
        ):
            args = s.param_args(fn, tested[0].id)
            if len(args) >= len(s.call_sites(fn)) and all(
                isinstance(v, ast.Constant) and v.value is None for v in args
            ):
                return True
        child = a
    return False


def const_false(expr: ast.expr | None) -> bool:
    return isinstance(expr, ast.Constant) and expr.value is False


def other_branch_takes_module(s: Script, node: ast.AST) -> bool:
    """On the plain branch of `m.module.state_dict() if ddp else m.state_dict()` (or of
    an `if`/`else` of statements): the other branch takes `.module`."""
    child = node
    for a in s.ancestors(node):
        if isinstance(a, ast.IfExp | ast.If):
            body = [a.body] if isinstance(a, ast.IfExp) else a.body
            other = a.orelse if any(child is b for b in body) else a.body
            others = other if isinstance(other, list) else [other]
            if any(
                isinstance(n, ast.Attribute) and n.attr == "module"
                for o in others
                for n in ast.walk(o)
            ):
                return True
        if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef):
            return False
        child = a
    return False


RULES = (unwrapped_into_wrapper,)
