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
from ddptui.lint.script import Script, const, kwarg, last

_FLAG: Final = "--local_rank"
# what else tells a process its local rank: the launcher's environment, or a local rank
# computed by the code or a library
_OTHER_SOURCES: Final = frozenset(
    {
        "LOCAL_RANK",
        "SLURM_LOCALID",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID",
        "--local-rank",
        "use_env",
    }
)
_TEXT_ONLY: Final = frozenset({"print", "format", "str", "info", "debug", "warning", "log"})


def local_rank_flag_only(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.distributed:
        return
    flags = [
        c
        for c in s.calls
        if last(s.call_name(c)) == "add_argument"
        and s.module_of(c) is s.entry
        and [const(a) for a in c.args] == [_FLAG]
        and const(kwarg(c, "default")) == 0
    ]
    if not flags or _other_source(s):
        return
    if not _used_as_device(s):
        return
    flag = flags[0]
    yield Hit.at(
        "DDP-HARDCODED-DEVICE",
        flag,
        (
            "the local rank comes only from the `--local_rank` flag (default 0), and nothing "
            "reads LOCAL_RANK: torchrun passes no such flag, so every process of a node "
            "takes GPU 0"
        ),
        severity="warning",
        seen=(
            "the local rank read only from a `--local_rank` flag that defaults to 0 (torchrun "
            "passes no flag, it sets LOCAL_RANK; PyTorch 2's torch.distributed.launch passes "
            "`--local-rank`)"
        ),
    )


def _other_source(s: Script) -> bool:
    return any(
        isinstance(n, ast.Constant) and n.value in _OTHER_SOURCES
        for m in s.modules
        for n in m.nodes
    )


def _used_as_device(s: Script) -> bool:
    """`.local_rank` (of the parsed arguments) handed to a call (a GPU pick, a DDP
    wrap, a set-up helper), not only printed."""
    for c in s.calls:
        if last(s.call_name(c)) in _TEXT_ONLY:
            continue
        if any(
            isinstance(n, ast.Attribute) and n.attr == "local_rank"
            for a in [*c.args, *(k.value for k in c.keywords)]
            for n in ast.walk(a)
        ):
            return True
    return False


RULES = (local_rank_flag_only,)
