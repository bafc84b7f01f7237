"""Precision of three findings on correct real projects (blind batch J, lint13).

- A GPU index 0 in code that only rank 0 runs (VITS' `evaluate`, called under `if rank
  == 0:`, moves its batch with `.cuda(0)`): global rank 0 is local rank 0 on the first
  node, so GPU 0 is its own GPU (DDP-HARDCODED-DEVICE stays silent).
- The global rank as a GPU index in a project that nowhere reads a local rank, a node
  rank or a node count (XMem: `local_rank = torch.distributed.get_rank()`, then
  `set_device(local_rank)`, launched by torchrun on one node): it works on the one node
  the project is written for, so the finding is a warning, not an error. A project that
  reads LOCAL_RANK or NODE_RANK and still passes the global rank keeps the error.
- A model attribute read through the DDP wrapper whose name the project defines nowhere
  (Latte's unfinished resume branch calls `model.load_state(...)`, an Accelerator method
  no model class has): ddptui cannot tell that the model has it either, so the finding is
  a warning. Names the project defines (`self.head = ...`, `def encode`) keep the error.
"""

from __future__ import annotations

import ast
import re
import weakref
from typing import Final

from ddptui.diagnosis.finding import Severity
from ddptui.lint.flow import Flow
from ddptui.lint.lint22 import calibrated
from ddptui.lint.model import Hit
from ddptui.lint.script import Script
from ddptui.lint.syntax import const

# what a project that runs on several nodes reads: env keys, launcher flags, config keys
_MULTI_NODE: Final = re.compile(
    r"^-*(LOCAL_RANK|NODE_RANK|GROUP_RANK|LOCAL_WORLD_SIZE|SLURM_LOCALID|SLURM_NODEID"
    r"|OMPI_COMM_WORLD_LOCAL_RANK|MV2_COMM_WORLD_LOCAL_RANK|PMI_LOCAL_RANK|nnodes|num_nodes"
    r"|n_nodes|node_rank|local_rank|local_world_size|gpus_per_node|nproc_per_node)$",
    re.I,
)

# per script, its facts computed once (a Script compares by identity; the entry goes
# with the Script)
_memo: weakref.WeakKeyDictionary[Script, dict[str, object]] = weakref.WeakKeyDictionary()


def _cached(kind: str, s: Script) -> object | None:
    return _memo.get(s, {}).get(kind)


def rank0_gpu0(s: Script, f: Flow, node: ast.AST) -> bool:
    """`x.cuda(0)`, `torch.device("cuda:0")`, `.to("cuda:0")` in code only some ranks run
    (every call of its function sits under a rank test: `if rank == 0: evaluate(...)`)."""
    args = [*getattr(node, "args", ()), *(k.value for k in getattr(node, "keywords", ()))]
    if isinstance(node, ast.Assign):
        args = [node.value]
    zero = any(const(a) in (0, "cuda:0") and not isinstance(const(a), bool) for a in args)
    return zero and f.guarded(node)


def project_defines(s: Script, attr: str) -> bool:
    """`attr` is a function, method or class of the project, or an attribute it assigns
    (`self.attr = ...`, `attr = ...` in a class body, `setattr(x, "attr", ...)`)."""
    names = _cached("defined", s)
    if not isinstance(names, frozenset):
        found: set[str] = set()
        for m in s.modules:
            for n in ast.walk(m.tree):
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    found.add(n.name)
                elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                    found.add(n.attr)
                elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    found.add(n.id)
                elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                    found.add(n.target.id)
                elif (
                    isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Name)
                    and n.func.id == "setattr"
                    and len(n.args) > 1
                    and isinstance(const(n.args[1]), str)
                ):
                    found.add(str(const(n.args[1])))
        names = frozenset(found)
        _memo.setdefault(s, {})["defined"] = names
    return attr in names


def multi_node_aware(s: Script) -> bool:
    """The project reads a local rank or a node count somewhere (an env key, a launcher
    flag, a config key, an `args.local_rank` attribute)."""
    known = _cached("multi", s)
    if not isinstance(known, bool):
        known = any(_multi_node_word(n) for m in s.modules for n in ast.walk(m.tree))
        _memo.setdefault(s, {})["multi"] = known
    return known


def _multi_node_word(n: ast.AST) -> bool:
    if isinstance(n, ast.Constant) and isinstance(n.value, str):
        return bool(_MULTI_NODE.match(n.value))
    # `args.local_rank`, `cfg.nnodes`; not `self.local_rank`, which holds what the
    # class was given (XMem's trainer keeps the global rank under that name)
    return (
        isinstance(n, ast.Attribute)
        and not (isinstance(n.value, ast.Name) and n.value.id == "self")
        and bool(_MULTI_NODE.match(n.attr))
    )


def demoted(s: Script, hit: Hit) -> tuple[Severity | None, str]:
    """The severity a hit gets in this project (None: the rule's or the knowledge base's)
    and the summary it is shown with."""
    if hit.severity is not None:
        return hit.severity, hit.summary
    if hit.id == "DDP-WRAPPER-ATTR":
        attr = hit.facts.get("attr")
        if isinstance(attr, str) and not project_defines(s, attr):
            return "warning", (
                f"{hit.summary} (the project defines no `{attr}` either: if the model "
                "has it, unwrap it)"
            )
    seen = str(hit.facts.get("seen", ""))
    if hit.id == "DDP-HARDCODED-DEVICE" and "the global rank" in seen and not multi_node_aware(s):
        return "warning", (
            f"{hit.summary} (the project reads no local rank or node count: right on one node only)"
        )
    named = re.search(r"the global rank `(?:[\w.]*\.)?(\w*local\w*)`", seen)
    if hit.id == "DDP-HARDCODED-DEVICE" and named and _equates(s, named.group(1)):
        # Cutie: `local_rank = torch.distributed.get_rank()` in its trainer, and the
        # launcher's LOCAL_RANK read into that same name: the project takes its global rank
        # for the local one, the design of a one-node run
        return "warning", (
            f"{hit.summary} (the project names the global rank `{named.group(1)}`: written "
            "for one node, where the two are equal)"
        )
    return calibrated(s, hit) or (None, hit.summary)


def _equates(s: Script, name: str) -> bool:
    """Every local rank or node count the project reads goes into `name` itself
    (`local_rank = int(os.environ['LOCAL_RANK'])`, later `local_rank = dist.get_rank()`):
    it holds no local rank apart from the global one (`_local_rank`, a module's private
    copy, is the same name; Cutie passes it as the sampler's rank). A read into another name
    (`node_gpu = int(os.environ['LOCAL_RANK'])`) keeps the mix-up an error."""
    for m in s.modules:
        for n in ast.walk(m.tree):
            if not isinstance(n, ast.Assign):
                continue
            if any(_multi_node_word(w) for w in ast.walk(n.value)) and not all(
                isinstance(t, ast.Name) and t.id.lstrip("_") == name.lstrip("_") for t in n.targets
            ):
                return False
    return True
