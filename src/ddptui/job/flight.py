"""Torch flight recorder dumps, read without torch and without running them.

A dump is a pickle written by the job; a pickle from a node can run any code when
loaded with plain `pickle`. PlainUnpickler refuses every global (`find_class`), so only
plain data (dict, list, tuple, str, bytes, int, float, bool, None) can come out of it;
anything else is an UnsafeDump, never executed. JSON dumps are read as JSON. Pure core."""

from __future__ import annotations

import io
import json
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_DUMP_BYTES = 64 * 1024 * 1024


class UnsafeDump(ValueError):
    """The file is not plain data (it names a class or function), or not a dump at all."""


class PlainUnpickler(pickle.Unpickler):
    """An unpickler that loads plain data only: every class or function lookup fails."""

    def find_class(self, module: str, name: str) -> Any:
        raise UnsafeDump(f"refused to load {module}.{name}: a dump holds plain data only")


def load_dump(data: bytes) -> dict[str, Any]:
    """A flight recorder dump (pickle or JSON) as a dict; UnsafeDump when it is not plain
    data or not a dump."""
    if len(data) > MAX_DUMP_BYTES:
        raise UnsafeDump(f"{len(data)} bytes is more than a dump holds")
    head = data.lstrip()[:1]
    if head in (b"{", b"["):
        try:
            doc = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UnsafeDump(f"not valid JSON: {exc}") from None
    else:
        try:
            doc = PlainUnpickler(io.BytesIO(data)).load()
        except UnsafeDump:
            raise
        except (
            pickle.UnpicklingError,
            EOFError,
            ValueError,
            TypeError,
            IndexError,
            KeyError,
        ) as exc:
            raise UnsafeDump(f"not a readable pickle: {type(exc).__name__}: {exc}") from None
    if not isinstance(doc, dict) or "entries" not in doc:
        raise UnsafeDump("not a flight recorder dump (no 'entries')")
    return doc


@dataclass(frozen=True)
class FrEntry:
    pg: str
    seq: int
    op: str
    state: str
    input_sizes: str
    input_dtypes: str
    frames: tuple[str, ...]  # "file.py:12 in func", innermost first
    user_where: str | None  # the first frame outside torch
    created_s: float | None = None  # wall clock, from time_created_ns
    timeout_s: float | None = None

    @property
    def signature(self) -> tuple[str, str, str]:
        return (self.op, self.input_sizes, self.input_dtypes)


@dataclass(frozen=True)
class RankDump:
    rank: int
    version: str
    entries: tuple[FrEntry, ...]
    pg_status: dict[str, dict[str, int]]
    pg_ranks: dict[str, str]
    dumped_at: float | None = None  # when the file was written (its mtime), epoch seconds


def _frame(f: Mapping[str, Any]) -> str:
    name = str(f.get("filename") or "?").rsplit("/", 1)[-1]
    return f"{name}:{f.get('line')} in {f.get('name')}"


def parse_dump(rank: int, doc: Mapping[str, Any], dumped_at: float | None = None) -> RankDump:
    entries = []
    for e in doc.get("entries") or ():
        if not isinstance(e, Mapping):
            continue
        if e.get("is_p2p"):
            continue  # p2p sequence numbers are separate; collectives decide where ranks part
        frames = tuple(_frame(f) for f in e.get("frames") or () if isinstance(f, Mapping))
        user = next(
            (
                _frame(f)
                for f in e.get("frames") or ()
                if isinstance(f, Mapping)
                and "site-packages" not in str(f.get("filename"))
                and "/torch/" not in str(f.get("filename"))
            ),
            None,
        )
        entries.append(
            FrEntry(
                pg=str(e.get("pg_id", (e.get("process_group") or ["?"])[0])),
                seq=int(e.get("collective_seq_id") or 0),
                op=str(e.get("profiling_name") or "?").removeprefix("nccl:"),
                state=str(e.get("state") or "?"),
                input_sizes=json.dumps(e.get("input_sizes")),
                input_dtypes=json.dumps(e.get("input_dtypes")),
                frames=frames,
                user_where=user,
                created_s=_num(e.get("time_created_ns"), 1e-9),
                timeout_s=_num(e.get("timeout_ms"), 1e-3),
            )
        )
    status = {
        str(pg): {k: int(v) for k, v in s.items() if isinstance(v, int)}
        for pg, s in (doc.get("pg_status") or {}).items()
        if isinstance(s, Mapping)
    }
    ranks = {
        str(pg): str(c.get("ranks"))
        for pg, c in (doc.get("pg_config") or {}).items()
        if isinstance(c, Mapping)
    }
    return RankDump(rank, str(doc.get("version") or "?"), tuple(entries), status, ranks, dumped_at)


def _num(value: object, scale: float) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) * scale


@dataclass(frozen=True)
class FrStop:
    """Where a process group stopped, from one or more ranks' dumps."""

    pg: str
    seq: int  # the first collective not completed everywhere
    last_completed: int
    op: str
    sizes: str
    state: str
    where: str | None
    frames: tuple[str, ...]
    ranks: tuple[int, ...]  # ranks that enqueued it
    missing: tuple[int, ...]  # ranks whose dump has no entry for it
    diverged: tuple[str, ...]  # "rank 1: all_gather [[4]] [\"Float\"]" where ranks differ
    age_s: float | None = None  # how long it had been in flight when the dump was written
    timeout_s: float | None = None

    @property
    def timed_out(self) -> bool | None:
        """In flight past its timeout when dumped; None when the dump does not tell."""
        if self.age_s is None or self.timeout_s is None:
            return None
        return self.age_s >= self.timeout_s


def analyse(dumps: Sequence[RankDump]) -> list[FrStop]:
    """Per process group: the first collective some rank did not complete, who enqueued
    it, who did not, and whether the ranks agree on what it is."""
    stops = []
    pgs = sorted({e.pg for d in dumps for e in d.entries})
    for pg in pgs:
        per_rank = {d.rank: {e.seq: e for e in d.entries if e.pg == pg} for d in dumps}
        seqs = sorted({s for m in per_rank.values() for s in m})
        done = [d.pg_status.get(pg, {}).get("last_completed_collective", -1) for d in dumps]
        for seq in seqs:
            here = {r: m[seq] for r, m in per_rank.items() if seq in m}
            newest = {r: max(m) if m else -1 for r, m in per_rank.items()}
            missing = tuple(
                sorted(r for r in per_rank if seq not in per_rank[r] and newest[r] < seq)
            )
            sigs = {e.signature for e in here.values()}
            unfinished = [e for e in here.values() if e.state != "completed"]
            if not unfinished and not missing and len(sigs) == 1:
                continue
            first = (unfinished or list(here.values()))[0]
            owner = next((d for d in dumps if d.rank in here and here[d.rank] is first), None)
            age = (
                owner.dumped_at - first.created_s
                if owner is not None and owner.dumped_at and first.created_s
                else None
            )
            diverged = (
                tuple(
                    f"rank {r}: {e.op} {e.input_sizes} {e.input_dtypes}"
                    for r, e in sorted(here.items())
                )
                if len(sigs) > 1
                else ()
            )
            stops.append(
                FrStop(
                    pg,
                    seq,
                    min(done) if done else -1,
                    first.op,
                    first.input_sizes,
                    first.state,
                    first.user_where,
                    first.frames,
                    tuple(sorted(here)),
                    missing,
                    diverged,
                    round(age, 1) if age is not None else None,
                    first.timeout_s,
                )
            )
            break
    return stops
