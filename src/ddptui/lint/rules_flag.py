"""The local rank taken only from a command-line flag: `--local_rank` (default 0) is what
the old `torch.distributed.launch` passed; torchrun passes none (it sets LOCAL_RANK), and
`torch.distributed.launch` of PyTorch 2 passes `--local-rank`. A script that reads the
local rank from nowhere else puts every process of a node on GPU 0 (OpenPCDet's
torchrun fix)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow
from ddptui.lint.model import Hit
from ddptui.lint.script import Script
from ddptui.lint.syntax import const, kwarg, last

_FLAG: Final = "--local_rank"
# what else tells a process its local rank under torchrun: its environment, or the new
# flag spelling. (SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK exist under srun and mpirun
# only: fairseq read SLURM_LOCALID and still put every torchrun process on GPU 0, #4302)
_OTHER_SOURCES: Final = frozenset({"LOCAL_RANK", "--local-rank", "use_env"})
_TEXT_ONLY: Final = frozenset({"print", "format", "str", "info", "debug", "warning", "log"})


def local_rank_flag_only(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.distributed:
        return
    # the entry's own parser first, then a parser of the project's (`params.py`); a
    # default of -1 is the same GPU 0 once clamped (`max(args.local_rank, 0)`, Chinese-CLIP
    # 94b2a30) or given to set_device, which ignores a negative index
    flags = sorted(
        (
            c
            for c in s.calls
            if last(s.call_name(c)) == "add_argument"
            and [const(a) for a in c.args] == [_FLAG]
            and (
                const(kwarg(c, "default")) == 0
                or (const(kwarg(c, "default")) == -1 and not _sentinel_tested(s))
            )
        ),
        key=lambda c: s.module_of(c) is not s.entry,
    )
    at: ast.AST | None = flags[0] if flags else None
    attr = "local_rank"
    if at is None:  # a config dataclass's field the flag is an alias of (fairseq's)
        at, attr = next(_flag_fields(s), (None, attr))
    use = _used_as_device(s, attr) if at is not None and not _other_source(s) else None
    if at is None or use is None:
        return
    default = const(kwarg(at, "default")) if isinstance(at, ast.Call) else 0
    # a parser of another module (Chinese-CLIP's params.py): said where the entry takes
    # its GPU from the flag, where the fix reads LOCAL_RANK; the flag as a second place
    # (a config field the flag is an alias of stays where it is declared: fairseq's fix)
    moved = (
        isinstance(at, ast.Call) and s.module_of(at) is not s.entry and s.module_of(use) is s.entry
    )
    yield Hit.at(
        "DDP-HARDCODED-DEVICE",
        use if moved else at,
        (
            f"the local rank comes only from the `--local_rank` flag (default {default}), and "
            "nothing reads LOCAL_RANK: torchrun passes no such flag, so every process of a "
            "node takes GPU 0"
        ),
        severity="warning",
        also=((at, "the flag is declared at"),) if moved else (),
        seen=(
            f"the local rank read only from a `--local_rank` flag that defaults to {default} (torchrun "
            "passes no flag, it sets LOCAL_RANK; PyTorch 2's torch.distributed.launch passes "
            "`--local-rank`)"
        ),
    )


def _sentinel_tested(s: Script, attr: str = "local_rank") -> bool:
    """`args.local_rank == -1` / `!= -1` / `in [-1, 0]`: -1 means "not distributed" (older
    Hugging Face examples), a mode of its own rather than GPU 0."""
    for n in s.nodes:
        if not isinstance(n, ast.Compare):
            continue
        parts = [n.left, *n.comparators]
        if any(isinstance(p, ast.Attribute) and p.attr == attr for p in parts) and any(
            isinstance(x, ast.UnaryOp) and isinstance(x.op, ast.USub)
            for p in parts
            for x in ast.walk(p)
        ):
            return True
    return False


def _other_source(s: Script) -> bool:
    return any(
        isinstance(n, ast.Constant) and n.value in _OTHER_SOURCES
        for m in s.modules
        for n in m.nodes
    )


def _flag_fields(s: Script) -> Iterator[tuple[ast.expr, str]]:
    """`device_id: int = field(default=0, metadata={"argparse_alias": "--local_rank"})`:
    (its default, the field's name)."""
    for m in s.modules:
        for n in m.nodes:
            if not (
                isinstance(n, ast.AnnAssign)
                and isinstance(n.target, ast.Name)
                and isinstance(n.value, ast.Call)
                and last(s.call_name(n.value)) == "field"
            ):
                continue
            default, meta = kwarg(n.value, "default"), kwarg(n.value, "metadata")
            if (
                default is not None
                and const(default) == 0
                and isinstance(meta, ast.Dict)
                and any(const(v) == _FLAG for v in meta.values)
            ):
                yield default, n.target.id


def _used_as_device(s: Script, attr: str = "local_rank") -> ast.Call | None:
    """The first call `.local_rank` (of the parsed arguments, or the config field the
    flag fills) is handed to (a GPU pick, a DDP wrap, a set-up helper), not only printed;
    the entry's own first."""
    found = [
        c
        for c in s.calls
        if last(s.call_name(c)) not in _TEXT_ONLY
        and any(
            isinstance(n, ast.Attribute) and n.attr == attr
            for a in [*c.args, *(k.value for k in c.keywords)]
            for n in ast.walk(a)
        )
    ]
    entry = [c for c in found if s.module_of(c) is s.entry]
    return (entry or found)[0] if found else None


RULES = (local_rank_flag_only,)
