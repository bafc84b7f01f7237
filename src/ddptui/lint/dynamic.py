"""Project modules a plug-in loader imports by a name built at run time:
`importlib.import_module("%s.agents.%s.%s" % (repo, path[0], path[1]))` (ParlAI's
`load_agent_module`, which brings in the agent and the generator agent that wraps the model
in DDP), `importlib.import_module("ocpmodels.%s.%s" % (key[1:], name))` over the files of
`os.path.join(root, "trainers")` (Open Catalyst's `setup_imports`, which brings in every
trainer). Nothing names those modules in an import statement, so the project's folders the
loader's literal parts name are followed instead: the folders named by a segment of the
template (`agents`) or by a folder-like string of the same function (`"trainers"`), under
the package the template starts with (`ocpmodels`) or anywhere in the top three levels of
the project. Bounded: at most MAX_FILES files per loader, never outside the project."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Final

from ddptui.lint.namevalues import name_values

MAX_FILES: Final = 150
_WORD: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
_SKIP: Final = frozenset({"site-packages", "dist-packages", ".venv", "venv", "node_modules",
                          ".git", ".tox", "tests", "test", "__pycache__"})  # fmt: skip


def _is_loader(call: ast.Call) -> bool:
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    if name not in ("import_module", "__import__") or not call.args:
        return False
    arg = call.args[0]
    return not (isinstance(arg, ast.Constant) and isinstance(arg.value, str))


def _template(arg: ast.expr) -> list[str]:
    """The literal parts of the name's template, in order ("" for a hole)."""
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Mod):
        return _template(arg.left)
    if (
        isinstance(arg, ast.Call)
        and isinstance(arg.func, ast.Attribute)
        and arg.func.attr == "format"
    ):
        return _template(arg.func.value)
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return re.split(r"%s|\{[^}]*\}", arg.value)
    if isinstance(arg, ast.JoinedStr):
        return [
            v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else ""
            for v in arg.values
        ]
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Add):
        return _template(arg.left) + _template(arg.right)
    return [""]


def _segments(parts: list[str]) -> tuple[str | None, set[str]]:
    """The package the template starts with (None when it starts with a hole) and the
    words between its dots."""
    lead: str | None = None
    text = "\x00".join(parts)
    words = re.split(r"[.\x00]", text)
    if words and _WORD.match(words[0]) and not text.startswith("\x00"):
        lead = words[0]
    return lead, {w for w in words[1:] if _WORD.match(w)}


def _folder_words(scope: ast.AST) -> set[str]:
    """Folder-like literals of the loader's function: `os.path.join(root, "trainers")`."""
    out: set[str] = set()
    for n in ast.walk(scope):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "join":
            out |= {
                a.value
                for a in n.args
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and _WORD.match(a.value)
            }
    return out


def _dirs(base: Path, names: set[str], depth: int) -> list[Path]:
    found: list[Path] = []
    frontier = [base]
    for _ in range(depth):
        nxt: list[Path] = []
        for d in frontier:
            try:
                subs = sorted(p for p in d.iterdir() if p.is_dir() and p.name not in _SKIP)
            except OSError:
                continue
            found += [p for p in subs if p.name in names]
            nxt += [p for p in subs if p.name not in names and not p.name.startswith(".")]
        frontier = nxt
    return found


def _files(dirs: list[Path]) -> list[str]:
    out: list[str] = []
    for d in dirs:
        for p in sorted(d.rglob("*.py")):
            if len(out) >= MAX_FILES:
                return out
            if not (set(p.parts) & _SKIP) and p.is_file():
                out.append(str(p.resolve()))
    return out


def loaded_modules(root: Path, nodes: list[ast.AST], parents: dict[ast.AST, ast.AST]) -> list[str]:
    """The project files the file's run-time loaders may import (see the module's text)."""
    out: list[str] = []
    for call in (n for n in nodes if isinstance(n, ast.Call) and _is_loader(n)):
        scope: ast.AST = call
        while scope in parents and not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            scope = parents[scope]
        for value in name_values(call.args[0], list(ast.walk(scope))):
            lead, words = _segments(_template(value))
            words |= _folder_words(scope)
            base = root / lead if lead else root
            if lead and not base.is_dir():
                continue
            parts = _template(value)
            named = _named_files(root, parts)
            if named:
                out += named  # `downstream.{name}.expert`: the files it can name, no more
            elif not words and lead:
                out += _files([base])
            else:
                out += _files(_dirs(base, words, 1 if lead else 3))
    return list(dict.fromkeys(out))[: 2 * MAX_FILES]


def _named_files(root: Path, parts: list[str]) -> list[str]:
    """The project files a template with a hole and a literal module name after it can
    name: `f"downstream.{args.downstream}.expert"` is `downstream/*/expert.py` (s3prl's
    runner picks its task's expert module so, and its DownstreamExpert builds the task's
    DataLoaders). Only a template led by a package, with its holes whole dotted segments
    and ending in a word; an empty list otherwise (the folder readings then apply)."""
    segs = ["\x00" if s and not s.strip("\x00") else s for s in "\x00".join(parts).split(".")]
    if (
        len(segs) < 3
        or not all(s == "\x00" or _WORD.match(s) for s in segs)
        or not _WORD.match(segs[0])
        or not _WORD.match(segs[-1])
        or "\x00" not in segs
    ):
        return []
    pattern = "/".join("*" if s == "\x00" else s for s in segs)
    out: list[str] = []
    for p in sorted([*root.glob(f"{pattern}.py"), *root.glob(f"{pattern}/__init__.py")]):
        if len(out) >= MAX_FILES:
            break
        if not (set(p.relative_to(root).parts) & _SKIP) and p.is_file():
            out.append(str(p.resolve()))
    return out
