"""py-spy dumps: parsed, classified (waiting in a collective, at a sync point, elsewhere)
and grouped across ranks, so the odd rank out can be named. Pure core.

Reading NCCL stacks: collectives are asynchronous, so a rank whose allreduce cannot
complete waits at the next synchronisation point (`torch.cuda.synchronize`, `.item()`,
the next collective), not inside `all_reduce`; with gloo the wait is inside the call."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

_PROCESS = re.compile(r"^Process (?P<pid>\d+): (?P<cmd>.*)$")
_THREAD = re.compile(
    r'^Thread (?P<tid>0x[0-9A-Fa-f]+|\d+) \((?P<status>[^)]*)\)(?:: "(?P<name>.*)")?'
)
# "    func (file.py:123)", "    0x7fc6 (libcuda.so)", "    cudaDeviceSynchronize (libcudart.so.13)"
_FRAME = re.compile(r"^\s+(?P<func>.+?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)\s*$")

COLLECTIVES = frozenset(
    {
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_object",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "all_to_all",
        "all_to_all_single",
        "broadcast",
        "broadcast_object_list",
        "reduce",
        "gather",
        "gather_object",
        "scatter",
        "scatter_object_list",
        "barrier",
        "monitored_barrier",
        "send",
        "recv",
        "batch_isend_irecv",
        "wait",
        "init_process_group",
        "new_group",
        "destroy_process_group",
    }
)
# Library code: never the user's "where". py-spy prints paths relative to sys.path.
_LIB_PREFIXES = (
    "torch/",
    "torchvision/",
    "torchaudio/",
    "numpy/",
    "transformers/",
    "accelerate/",
    "deepspeed/",
    "lightning/",
    "pytorch_lightning/",
    "triton/",
    "<frozen",
)
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))

Kind = Literal["collective", "sync", "backward", "other", "none"]


@dataclass(frozen=True)
class Frame:
    func: str
    file: str
    line: int | None
    native: bool = False  # a C/C++ frame (py-spy --native): no .py file

    @property
    def is_library(self) -> bool:
        f = self.file
        if self.native or "site-packages/" in f or "dist-packages/" in f:
            return True
        if f.startswith(_LIB_PREFIXES) or "/lib/python3" in f:
            return True
        if "/" not in f:  # a bare module: the stdlib's threading.py, or the user's script
            return f.removesuffix(".py") in _STDLIB
        return f.split("/", 1)[0] in _STDLIB  # multiprocessing/..., concurrent/futures/...

    def at(self) -> str:
        """file.py:123 (the file's base name, as people say it)."""
        base = self.file.rsplit("/", 1)[-1]
        return f"{base}:{self.line}" if self.line is not None else base


@dataclass(frozen=True)
class ThreadStack:
    tid: str
    name: str
    status: str  # py-spy's "active", "idle", "active+gil", ...
    frames: tuple[Frame, ...]  # innermost first, as py-spy prints them

    @property
    def python_frames(self) -> tuple[Frame, ...]:
        return tuple(f for f in self.frames if not f.native)


@dataclass(frozen=True)
class Dump:
    """One py-spy dump of one process."""

    pid: int | None
    command: str
    threads: tuple[ThreadStack, ...]

    @property
    def main(self) -> ThreadStack | None:
        """The thread that runs the training loop: MainThread, else the first one."""
        for t in self.threads:
            if t.name == "MainThread":
                return t
        return self.threads[0] if self.threads else None


def parse_dump(text: str) -> Dump:
    """py-spy `dump` text (with or without --native) as data; unknown lines are skipped."""
    pid: int | None = None
    command = ""
    threads: list[ThreadStack] = []
    current: tuple[str, str, str] | None = None
    frames: list[Frame] = []

    def close() -> None:
        if current is not None:
            threads.append(ThreadStack(current[0], current[1], current[2], tuple(frames)))

    for raw in text.splitlines():
        if m := _PROCESS.match(raw):
            pid, command = int(m["pid"]), m["cmd"]
            continue
        if m := _THREAD.match(raw):
            close()
            current, frames = (m["tid"], m["name"] or "", m["status"]), []
            continue
        if current is not None and (m := _FRAME.match(raw)):
            file = m["file"]
            line = int(m["line"]) if m["line"] else None
            native = line is None and not file.endswith(".py")
            frames.append(Frame(m["func"], file, line, native))
    close()
    return Dump(pid, command, tuple(threads))


@dataclass(frozen=True)
class Place:
    """Where one rank's main thread is, as people say it."""

    kind: Kind
    op: str | None  # the collective or sync call ("all_reduce", "synchronize", "backward")
    user: Frame | None  # the innermost frame of the user's own code
    top: Frame | None  # the innermost Python frame

    @property
    def where(self) -> str | None:
        """ "file.py:123 in func" (CONTRACT's `where`): the user's own frame."""
        f = self.user or self.top
        return f"{f.at()} in {f.func}" if f else None

    def describe(self, one: bool = False) -> str:
        """What ranks at this place do, in words ("wait in `all_reduce` at `x.py:3`");
        one=True for a single rank's verb."""
        text = self._describe()
        if one:
            for many, single in (("wait ", "waits "), ("are in", "is in"), ("show no", "shows no")):
                if text.startswith(many):
                    return single + text[len(many) :]
        return text

    def _describe(self) -> str:
        at = f" at `{self.user.at()}`" if self.user else ""
        if self.kind == "collective":
            return f"wait in `{self.op}`{at}"
        if self.kind == "sync":
            return f"wait at a sync point (`{self.op}`){at}"
        if self.kind == "backward":
            return f"are in `backward`{at} (DDP's gradient allreduce runs there)"
        if self.kind == "none":
            return "show no Python frame"
        func = self.user.func if self.user else (self.top.func if self.top else "?")
        return f"are in `{func}`{at}"


def place_of(stack: ThreadStack | None) -> Place:
    if stack is None or not stack.python_frames:
        return Place("none", None, None, None)
    py = stack.python_frames
    user = next((f for f in py if not f.is_library), None)
    for f in py:
        if "torch/distributed/" in f.file and f.func.rsplit(".", 1)[-1] in COLLECTIVES:
            return Place("collective", f.func.rsplit(".", 1)[-1], user, py[0])
        if f.func == "synchronize" and f.file.startswith("torch/cuda/"):
            return Place("sync", "synchronize", user, py[0])
        if f.func in ("backward", "_engine_run_backward") and f.file.startswith("torch/"):
            return Place("backward", "backward", user, py[0])
        if f is user:
            break
    return Place("other", None, user, py[0])


def stack_key(stack: ThreadStack | None) -> tuple[tuple[str, str, int | None], ...]:
    """Identity of a stack for grouping: its Python frames (native ones vary run to run)."""
    if stack is None:
        return ()
    return tuple((f.func, f.file, f.line) for f in stack.python_frames)


@dataclass(frozen=True)
class StackGroup:
    ranks: tuple[int, ...]
    place: Place
    key: tuple[tuple[str, str, int | None], ...]
    odd: bool = False


def group_ranks(
    places: Mapping[int, tuple[Place, tuple[tuple[str, str, int | None], ...]]],
) -> list[StackGroup]:
    """Ranks with identical stacks together; the odd groups are flagged: the ranks not
    waiting in a collective while others are, else the minority."""
    by_key: dict[tuple[tuple[str, str, int | None], ...], list[int]] = {}
    place_of_key: dict[tuple[tuple[str, str, int | None], ...], Place] = {}
    for rank in sorted(places):
        place, key = places[rank]
        by_key.setdefault(key, []).append(rank)
        place_of_key[key] = place
    groups = [StackGroup(tuple(r), place_of_key[k], k) for k, r in by_key.items()]
    groups.sort(key=lambda g: (-len(g.ranks), g.ranks))
    if len(groups) < 2:
        return groups
    waiting = [g for g in groups if g.place.kind in ("collective", "sync")]
    if waiting and len(waiting) < len(groups):
        odd = {id(g) for g in groups if g.place.kind not in ("collective", "sync")}
    else:
        biggest = len(groups[0].ranks)
        odd = {id(g) for g in groups if len(g.ranks) < biggest}
    return [StackGroup(g.ranks, g.place, g.key, id(g) in odd) for g in groups]


def rank_ranges(ranks: Iterable[int]) -> str:
    """[0, 1, 3, 4, 5] -> "0-1, 3-5"."""
    values = sorted(set(ranks))
    parts: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        parts.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ", ".join(parts)


def ranks_phrase(ranks: Sequence[int], nodes: Mapping[int, str]) -> str:
    """ "rank 2 (node2)" or "ranks 0-1, 3 (node0, node1)"."""
    where = sorted({nodes[r] for r in ranks if r in nodes})
    on = f" ({', '.join(where)})" if 0 < len(where) <= 4 else f" (on {len(where)} nodes)"
    on = on if where else ""
    if len(ranks) == 1:
        return f"rank {ranks[0]}{on}"
    return f"ranks {rank_ranges(ranks)}{on}"


def describe_groups(groups: Sequence[StackGroup], nodes: Mapping[int, str]) -> str:
    """ "rank 2 (node2) is in `evaluate` at `train.py:88`; ranks 0-1, 3-7 wait in
    `all_reduce` at `train.py:51`": odd groups first."""
    parts = []
    for g in sorted(groups, key=lambda g: (not g.odd, -len(g.ranks))):
        text = g.place.describe(one=len(g.ranks) == 1)
        parts.append(f"{ranks_phrase(g.ranks, nodes)} {text}")
    return "; ".join(parts)
