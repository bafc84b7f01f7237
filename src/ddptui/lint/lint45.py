"""Round 45 (blind batch AF1): the wrapper's checkpoints saved and resumed consistently,
while the project's own stand-alone scripts read them into the plain model.

IFRNet (ltkong218/IFRNet@8fe06d6, train_vimeo90k.py): training saves
`ddp_model.state_dict()` (every key `module.`-prefixed) and resumes with
`ddp_model.load_state_dict(torch.load(args.resume_path))` after wrapping: the pair agrees,
so DDP-SAVE-WRAPPER stayed silent. But demo_2x.py and benchmarks/*.py, which the training
script never imports, build the same `Model` class unwrapped and
`model.load_state_dict(torch.load('./checkpoints/IFRNet/IFRNet_Vimeo90K.pth'))`: the
project's convention for its weights is the plain model's keys (fix 77a7d4c: save
`ddp_model.module.state_dict()`, load the resume into `model` before wrapping). The tie is
the class: the reader imports the one the training wraps, from the same module, and does
nothing about a `module.` prefix."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.script import Script
from ddptui.lint.syntax import last

_MAX_FILES: Final = 200  # stand-alone scripts looked at beside the entry, at most
_MAX_BYTES: Final = 200_000
_SKIP_DIRS: Final = frozenset({"tests", "test", "build", "dist", "docs", "site-packages"})


def _imported_classes(tree: ast.AST, name: str) -> set[str]:
    """`module.Name` for every `from module import Name` binding `name` in the file (an
    entry may pick one of several variants in branches: all of them)."""
    return {
        f"{n.module}.{a.name}"
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module and not n.level
        for a in n.names
        if (a.asname or a.name) == name
    }


def _built_class(expr: ast.expr) -> str | None:
    """`Model` of `Model(...)`, `Model(...).to(dev).eval()`, `Model(...).cuda()`."""
    while isinstance(expr, ast.Call):
        if isinstance(expr.func, ast.Name):
            return expr.func.id
        if not isinstance(expr.func, ast.Attribute):
            return None
        expr = expr.func.value
    return None


def wrapped_classes(s: Script, f: Flow) -> set[str]:
    """The imported classes (dotted) whose instances the training wraps in DDP."""
    out: set[str] = set()
    for d in f.torch_ddp_calls:
        if not d.args:
            continue
        for o in [d.args[0], *s.origins(d.args[0], params=False)]:
            cls = _built_class(o) if isinstance(o, ast.Call) else None
            if cls:
                out |= _imported_classes(s.module_of(d).tree, cls)
    return out


def _plain_load(tree: ast.Module, classes: set[str]) -> int | None:
    """The line where a stand-alone script loads a `torch.load(...)` of a literal path into
    a plain instance of one of `classes`, with no word of a `module.` prefix nor a wrapper
    anywhere in it."""
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and "module" in n.value:
            return None
        if isinstance(n, ast.Name | ast.Attribute) and (
            getattr(n, "id", "") or getattr(n, "attr", "")
        ) in {"DataParallel", "DistributedDataParallel", "DDP", "module"}:
            return None
    built: dict[str, str] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            cls = _built_class(n.value)
            if cls and _imported_classes(tree, cls) & classes:
                built[n.targets[0].id] = cls
    for n in ast.walk(tree):
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "load_state_dict"
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id in built
            and n.args
            and isinstance(n.args[0], ast.Call)
            and last(ast.unparse(n.args[0].func)) == "load"
            and n.args[0].args
            and isinstance(n.args[0].args[0], ast.Constant)
            and isinstance(n.args[0].args[0].value, str)
        ):
            return n.lineno
    return None


def _scripts(s: Script) -> Iterator[Path]:
    """The .py files of the entry's folder and its sub-folders that the audit did not
    follow (demos, benchmarks, evaluation scripts run on their own)."""
    followed = {os.path.realpath(m.path) for m in s.modules}
    home = Path(s.path).resolve().parent
    count = 0
    for dirpath, dirnames, filenames in os.walk(home):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if name.endswith(".py") and os.path.realpath(p) not in followed:
                count += 1
                if count > _MAX_FILES:
                    return
                yield p


def plain_reader(s: Script, f: Flow) -> str | None:
    """`path:line` of a stand-alone script of the project that loads a checkpoint file into
    a plain instance of the class the training wraps; None when there is none."""
    classes = wrapped_classes(s, f)
    for p in _scripts(s) if classes else ():
        try:
            if p.stat().st_size > _MAX_BYTES:
                continue
            text = p.read_text(encoding="utf-8", errors="replace")
            if "load_state_dict" not in text:
                continue
            line = _plain_load(ast.parse(text), classes)
        except (OSError, SyntaxError, ValueError, RecursionError):
            continue
        if line is not None:
            return f"{os.path.relpath(p, Path(s.path).resolve().parent)}:{line}"
    return None


def resume_into_wrapper(reader: str, loads: list[ast.Call]) -> Iterator[Hit]:
    """The resume loads into the wrapper (consistent with the wrapper's saves), where the
    project's own `reader` script reads its weights into the plain model: once the saves
    write `.module.state_dict()`, this load belongs on the plain model before wrapping."""
    for c in loads:
        yield Hit.at(
            "DDP-LOAD-INTO-WRAPPER",
            c,
            (
                f"`{ast.unparse(c.func)}` loads into the DDP wrapper, yet the project's own "
                f"{reader} loads its checkpoints into the plain model: save the plain "
                "weights and load them here into the model before wrapping"
            ),
            model=ast.unparse(c.func.value) if isinstance(c.func, ast.Attribute) else "",
        )
