"""The project around an entry script: its root, the local modules its imports reach
(files of the project, never site-packages), each parsed once and indexed. Pure core:
`ast` and the file system only; nothing is imported or run."""

from __future__ import annotations

import ast
import contextlib
import io
import re
import sys
import tokenize
import warnings
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from ddptui.lint.dynamic import loaded_modules
from ddptui.lint.model import LintInputError
from ddptui.lint.newsyntax import type_params_blanked
from ddptui.lint.syspath import path_parts, side_effect_imports

FuncNode = ast.FunctionDef | ast.AsyncFunctionDef
MAX_BYTES: Final = 5_000_000
MAX_MODULES: Final = 300  # modules followed from one entry script (a note says when capped)
ROOT_MARKERS: Final = (".git", "pyproject.toml", "setup.py")
# Folders that hold installed or generated code, never the project's own.
_SKIP_PARTS: Final = frozenset(
    {"site-packages", "dist-packages", ".venv", "venv", "env", "node_modules", ".git", ".tox"}
)
# IPython lines of a notebook export (`!pip install x`, `%matplotlib inline`).
_MAGIC: Final = re.compile(r"^\s*[!%]")


def find_root(entry: Path, cwd: Path | None = None) -> tuple[Path, str]:
    """The project root of a script, and what decided it: the nearest ancestor with .git,
    pyproject.toml or setup.py; else the current folder when the script lies under it
    (where one runs `python -m pkg.train`); else the folder above the script's package
    (the topmost folder of __init__.py files around it); else the script's own folder."""
    start = entry.resolve().parent
    for d in (start, *start.parents):
        for marker in ROOT_MARKERS:
            if (d / marker).exists():
                return d, f"nearest {marker}"
    here = (cwd or Path.cwd()).resolve()
    if here in start.parents or here == start:
        return here, "the current folder: no .git, pyproject.toml or setup.py above the script"
    top = start
    while (top / "__init__.py").is_file() and top.parent != top:
        top = top.parent
    if top != start:
        return top, "the folder above the script's package: no .git, pyproject.toml or setup.py"
    return start, "the script's folder: no .git, pyproject.toml or setup.py above it"


def read_source(path: str) -> str:
    """The text of a Python file; LintInputError says why it cannot be audited."""
    p = Path(path)
    try:
        if p.is_dir():
            raise LintInputError(f"{path}: is a directory (give the .py files in it)")
        data = p.read_bytes()
    except OSError as exc:
        raise LintInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise LintInputError(
            f"{path}: {len(data)} bytes is too large for a training script "
            f"(limit {MAX_BYTES}); is this the right file?"
        )
    if b"\0" in data:
        raise LintInputError(f"{path}: a binary file, not Python source")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
        raise LintInputError(
            f"{path}: not UTF-8 text ({exc}); save it as UTF-8 or declare its coding"
        ) from None


def _parse(text: str, path: str) -> ast.Module:
    with warnings.catch_warnings():  # "invalid escape sequence" is not ours to report
        warnings.simplefilter("ignore")
        try:
            return ast.parse(text, filename=path)
        except SyntaxError:
            # a project written for Python 3.12 read on an older one (newsyntax.py)
            blanked = type_params_blanked(text) if sys.version_info < (3, 12) else None
            if blanked is not None:
                with contextlib.suppress(SyntaxError):  # still not Python: the first error
                    return ast.parse(blanked, filename=path)
            raise


def parse(text: str, path: str) -> ast.Module:
    try:
        return _parse(text, path)
    except SyntaxError as exc:
        where = f"{path}:{exc.lineno or 1}:{(exc.offset or 0) or 1}"
        suffix = Path(path).suffix
        if "print" in (exc.msg or "") or "exec" in (exc.msg or ""):
            hint = "Python 2 code? `ddptui lint` reads Python 3"
        elif suffix and suffix not in (".py", ".pyw"):
            hint = f"a {suffix} file is not a training script"
        else:
            hint = "check it with `python -m py_compile`"
        raise LintInputError(
            f"{where}: not valid Python ({exc.msg}); `ddptui lint` audits Python training "
            f"scripts ({hint})"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise LintInputError(f"{path}: cannot be parsed as Python: {exc}") from None


def parse_notebook_export(text: str, path: str) -> tuple[ast.Module, int]:
    """Parse `text`; where it fails only because of IPython lines (`!cmd`, `%magic`, as
    in a notebook exported to .py), parse it with those lines blanked. Returns the tree
    and how many lines were blanked (0: plain Python)."""
    try:
        return parse(text, path), 0
    except LintInputError:
        lines = text.splitlines()
        magic = [i for i, line in enumerate(lines) if _MAGIC.match(line)]
        if not magic:
            raise
        for i in magic:
            lines[i] = ""
        return parse("\n".join(lines) + "\n", path), len(magic)


@dataclass(eq=False)
class Module:
    """One parsed file of the project and its indexes."""

    path: str
    tree: ast.Module
    lines: list[str]
    aliases: dict[str, str] = field(default_factory=dict)  # imported names -> dotted
    local: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # -> (path, attr)
    dotted: dict[str, str] = field(default_factory=dict)  # `import a.b`: "a.b" -> path
    functions: dict[str, list[FuncNode]] = field(default_factory=dict)  # top level + nested
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    nodes: list[ast.AST] = field(default_factory=list)
    key: str = ""  # the resolved path
    inits: list[str] = field(default_factory=list)  # packages' __init__.py an import runs
    loaded: list[str] = field(default_factory=list)  # what its run-time loaders import
    # modules imported under a name that another import rebinds (`if cfg.x: from a import
    # f` / `else: from b import f`): either may run, so both are followed
    rebound: list[tuple[str, str | None]] = field(default_factory=list)  # (path, attr)
    # `from pkg import name` where `name` is also pkg's submodule: name -> (pkg's
    # __init__.py, name); the package's own binding of it wins (script.py's resolve)
    shadowed: dict[str, tuple[str, str]] = field(default_factory=dict)


@dataclass
class Shared:
    """Facts that depend on the parsed code only, kept for every entry script of a run."""

    owners: dict[ast.AST, ast.AST] = field(default_factory=dict)
    assignments: dict[ast.AST, dict[str, list[ast.expr]]] = field(default_factory=dict)
    names: dict[ast.Call, str] = field(default_factory=dict)
    tops: dict[ast.AST, ast.AST] = field(default_factory=dict)  # node -> its ast.Module
    walks: dict[ast.AST, list[ast.AST]] = field(default_factory=dict)
    refs: dict[ast.AST, list[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]] = field(
        default_factory=dict
    )
    attrs: dict[ast.ClassDef, dict[str, list[ast.Assign | ast.AnnAssign]]] = field(
        default_factory=dict
    )


def _walk(tree: ast.AST, parents: dict[ast.AST, ast.AST]) -> list[ast.AST]:
    """ast.walk's nodes in its order (breadth first), each node's parent noted on the same
    pass."""
    nodes: list[ast.AST] = [tree]
    i = 0
    while i < len(nodes):
        node = nodes[i]
        i += 1
        for child in ast.iter_child_nodes(node):
            parents[child] = node
            nodes.append(child)
    return nodes


class Project:
    """Modules parsed once per lint run (shared by every entry script of the run), with
    one parent map for all their nodes."""

    def __init__(self, root: Path, root_why: str) -> None:
        self.root = root.resolve()
        self.root_why = root_why
        self.parents: dict[ast.AST, ast.AST] = {}
        self.shared = Shared()
        self._mods: dict[str, Module | None] = {}
        self.notes: dict[str, str] = {}  # path -> why it is not audited
        self._extra: list[Path] = []  # sys.path folders of the file being indexed
        self._carried: list[Path] | None = None  # the entry's (sys.path is process-wide)

    # --- loading -----------------------------------------------------------------------

    def entry(self, path: str) -> tuple[Module, int]:
        """The entry script (LintInputError when it cannot be read or parsed) and the
        number of notebook lines skipped."""
        known = self._mods.get(key(path))
        if known is not None:
            return known, 0
        text = read_source(path)
        tree, skipped = parse_notebook_export(text, path)
        mod = self.index(path, tree, text)
        self._mods[key(path)] = mod
        return mod, skipped

    def module(self, path: str) -> Module | None:
        """A followed module, parsed once; None (with a note) when it cannot be."""
        k = key(path)
        if k not in self._mods:
            self._mods[k] = None
            try:
                text = read_source(path)
                tree, _ = parse_notebook_export(text, path)
            except LintInputError as exc:
                self.notes[k] = f"{exc} (an imported module: its code is not audited)"
                return None
            self._mods[k] = self.index(_display(path), tree, text)
        return self._mods[k]

    def closure(self, entry: Module) -> tuple[list[Module], bool]:
        """The local modules the entry imports, transitively (breadth first, each once:
        circular imports end there), at most MAX_MODULES; and whether the cap was hit."""
        seen = {key(entry.path)}
        order: list[Module] = []
        queue = deque([entry])
        capped = False
        while queue:
            mod = queue.popleft()
            local = (p for p, _ in mod.local.values())
            # `import core.gancraft` runs core/gancraft/__init__.py as surely as `import
            # core` runs core/__init__.py (hzxie/CityDreamer run.py: its trainers are
            # reached only so)
            dotted = mod.dotted.values()
            rebound = (p for p, _ in mod.rebound)
            for path in dict.fromkeys([*local, *mod.inits, *dotted, *mod.loaded, *rebound]):
                if key(path) in seen:
                    continue
                if len(order) >= MAX_MODULES:
                    capped = True
                    break
                seen.add(key(path))
                found = self.module(path)
                if found is not None:
                    order.append(found)
                    queue.append(found)
        return order, capped

    def index(self, path: str, tree: ast.Module, text: str) -> Module:
        mod = Module(path, tree, text.splitlines(), key=key(path))
        nodes = _walk(tree, self.parents)
        mod.nodes = self.shared.walks[tree] = nodes  # reach.walked's answer for the tree
        here = Path(path).resolve().parent
        self._extra = self._path_dirs(mod.nodes, here)
        for node in mod.nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    self._packages_run(mod, a.name.split(".")[:-1], here)
                    target = self._find(a.name, here, 0)
                    if target is not None and a.asname:
                        mod.local[a.asname] = (target, None)
                    elif target is not None and "." not in a.name:
                        mod.local[a.name] = (target, None)
                    elif target is not None:
                        mod.dotted[a.name] = target
                        self._bind_package(mod, a.name, here)
                    if a.asname:
                        mod.aliases[a.asname] = a.name
                    else:  # `import torch.nn` binds `torch`
                        root = a.name.split(".")[0]
                        mod.aliases.setdefault(root, root)
            elif isinstance(node, ast.ImportFrom):
                self._index_from(mod, node, here)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                mod.functions.setdefault(node.name, []).append(node)
            elif isinstance(node, ast.ClassDef):
                mod.classes.setdefault(node.name, node)
        mod.loaded = [
            p
            for p in [*loaded_modules(self.root, mod.nodes, self.parents), *self._named(mod, here)]
            if p != mod.key
        ]
        return mod

    def _named(self, mod: Module, here: Path) -> list[str]:
        """`importlib.import_module("recbole.trainer")`: a project module named whole by a
        literal is imported as an import statement would (RUCAIBox/RecBole's
        `get_trainer` picks its trainer class from it by name)."""
        out: list[str] = []
        for n in mod.nodes:
            if (
                isinstance(n, ast.Call)
                and (
                    n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
                )
                == "import_module"
                and len(n.args) == 1
                and isinstance(n.args[0], ast.Constant)
                and isinstance(n.args[0].value, str)
                and (target := self._find(n.args[0].value, here, 0)) is not None
            ):
                out.append(key(target))
        return out

    def _path_dirs(self, nodes: list[ast.AST], here: Path) -> list[Path]:
        """The file's own sys.path folders, then the entry's: sys.path is the process's, so
        what the entry inserts holds for every module it imports (RT-DETR's tools/train.py
        puts rtdetr_pytorch/ there; its solver's `from src.misc import dist` needs it)."""
        own = self._sys_path_dirs(nodes, here)
        if self._carried is None:
            # the entry's own folder is sys.path[0]: a module elsewhere may import a
            # sibling of the entry by bare name (caizhongang/SMPLer-X: common/base.py's `from
            # OSX import get_model` finds main/OSX.py because main/train.py runs)
            self._carried = [*own, here]
        return list(dict.fromkeys([*own, *self._carried]))

    def _sys_path_dirs(self, nodes: list[ast.AST], here: Path) -> list[Path]:
        """Project folders the file puts on sys.path before importing from them:
        `sys.path.append(os.path.join(now_dir, "train"))` then `import utils`
        (RVC-Project's train_nsf_sim_cache_sid_load_pretrain.py), `sys.path.insert(0,
        "../lib")`. The path's literal parts are tried from the file's folder and the root."""
        out: list[Path] = []
        found = [(here, p) for p in path_parts(nodes)] + side_effect_imports(nodes, here)
        for base, parts in found:
            if len(out) >= 8:
                break
            for d in self._sys_path_candidates(base, parts):
                if d.is_dir() and self._inside(d) and d.resolve() not in out:
                    out.append(d.resolve())
        return out

    def _sys_path_candidates(self, here: Path, parts: list[str]) -> list[Path]:
        """The folder from the file's folder and from the root, then (a script run from
        above its clone: `sys.path.insert(0, "subtools/pytorch")` in asv-subtools, whose
        clone is named subtools) the path less its leading folders, from the root."""
        whole = Path(*parts)
        found = [d for d in (here / whole, self.root / whole) if d.is_dir()]
        tails = (self.root / Path(*whole.parts[i:]) for i in range(1, len(whole.parts)))
        return found or [d for d in tails if d.is_dir()][:1]

    def _bind_package(self, mod: Module, dotted: str, here: Path) -> None:
        """`import onmt.utils` binds the package `onmt` too (`onmt.Trainer`)."""
        root = dotted.split(".", maxsplit=1)[0]
        top = self._find(root, here, 0)
        if top is not None and top.endswith("__init__.py"):
            mod.local.setdefault(root, (top, None))

    def _packages_run(self, mod: Module, parts: list[str], here: Path) -> None:
        """`import a.b.c` / `from a.b import c` runs `a/__init__.py` and `a/b/__init__.py`
        first: what they import (a registry filled on import) is the project's code too."""
        for i in range(1, len(parts) + 1):
            init = self._find(".".join(parts[:i]), here, 0)
            if init is not None and init.endswith("__init__.py") and init not in mod.inits:
                mod.inits.append(init)

    def _index_from(self, mod: Module, node: ast.ImportFrom, here: Path) -> None:
        name = node.module or ""
        if node.level == 0:
            self._packages_run(mod, name.split("."), here)
        target = self._find(name, here, node.level)
        for a in node.names:
            bound = a.asname or a.name
            if a.name == "*":  # `from utils.misc import *`: followed, names looked up there
                if target is not None:
                    mod.local[f"*{target}"] = (target, None)
                continue
            sub = self._find(f"{name}.{a.name}" if name else a.name, here, node.level)
            before = mod.local.get(bound)
            if before is not None and before[0] not in (sub, target):
                mod.rebound.append(before)
            if sub is not None:  # `from pkg import submodule`
                mod.local[bound] = (sub, None)
                if target is not None and target.endswith("__init__.py"):
                    mod.shadowed[bound] = (target, a.name)
            elif target is not None:
                mod.local[bound] = (target, a.name)
            if node.level == 0:
                mod.aliases[bound] = f"{name}.{a.name}"

    def _find(self, dotted: str, here: Path, level: int) -> str | None:
        """The project file a module name stands for, seen from a file in folder `here`:
        relative imports from `here`, absolute ones from `here`, the root and root/src
        (as Python finds them when the script runs); never outside the root."""
        parts = [p for p in dotted.split(".") if p]
        if level:
            base = here
            for _ in range(level - 1):
                base = base.parent
            bases = [base]
        else:
            bases = list(
                dict.fromkeys(
                    [here, self.root, self.root / "src", *self._extra, *_home(here, parts)]
                )
            )
        for base in bases:
            if not parts and level:
                cand = [base / "__init__.py"]
            elif not parts:
                continue
            else:
                stem = base.joinpath(*parts)
                cand = [stem.with_suffix(".py"), stem / "__init__.py"]
            for c in cand:
                if c.is_file() and self._inside(c):
                    return str(c.resolve())
        return None

    def _inside(self, path: Path) -> bool:
        try:
            rel = path.resolve().relative_to(self.root)
        except ValueError:
            return False
        return not (set(rel.parts) & _SKIP_PARTS)


def _home(here: Path, parts: list[str]) -> list[Path]:
    """`from segm.utils import distributed` in `OnlineRetraining/segm/train.py`: the script
    sits in the package it imports by name, installed from the package's parent folder
    (`pip install -e .`; hustvl/WeakTr 5bdceb8), so the import resolves from there."""
    return [
        anc.parent
        for anc in [here, *here.parents][:6]
        if parts and anc.name == parts[0] and (anc / "__init__.py").is_file()
    ][:1]


def _display(path: str) -> str:
    """A followed module's path as findings name it: relative to the current folder
    when it lies under it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return path


def key(path: str) -> str:
    return str(Path(path).resolve())
