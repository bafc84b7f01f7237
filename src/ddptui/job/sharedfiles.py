"""`ddptui job` on shared filesystems: the logs (`--log GLOB`, the remembered output of a
job that is gone) and the flight recorder dumps a gone job left are looked at on every
node first (logread's survey), and each file is read once, by one node that sees it;
copies of one file read anyway (two nodes' ranks writing to one shared file) are merged
before anything is counted.  A log's lines belong to the rank its prefixes name and to
the node that rank ran on, never to the node that happened to read it.  Pure core, but
`survey_reads` which asks the nodes (through ddptui's transports)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any

from ddptui.job.model import LogFile, NodeView
from ddptui.logs.sharedfs import SharedFile, Sighting, plan

# torch names a rank's dump PREFIX + rank (TORCH_FR_DUMP_TEMP_FILE, default
# ~/.cache/torch/comm_lib_trace_rank_); a folder such as ~/.cache/fr_trace holds one per rank.
DEFAULT_FR_PREFIXES = ("~/.cache/torch/comm_lib_trace_rank_", "~/.cache/fr_trace/")
MAX_DUMPS = 4096  # dump files looked at per node (a folder with thousands: bounded)
_RANK_SUFFIX = re.compile(r"(\d+)(?:\.(?:json|pickle|pkl))?$")


def dump_rank(path: str, prefixes: Sequence[str]) -> int | None:
    """The rank a dump's file name gives (PREFIX + rank), None when it is no dump."""
    name = PurePosixPath(path).name
    for prefix in prefixes:
        base = "" if prefix.endswith("/") else PurePosixPath(prefix).name
        if not name.startswith(base):
            continue
        # A folder (~/.cache/fr_trace/): any name ending in the rank; else PREFIX + rank.
        m = _RANK_SUFFIX.search(name) if not base else _RANK_SUFFIX.fullmatch(name[len(base) :])
        if m is not None:
            return int(m[1])
    return None


@dataclass
class ReadPlan:
    """Which node reads which log and dump; notes for the report."""

    log_paths: dict[str, list[str]] = field(default_factory=dict)
    fallback_paths: dict[str, list[str]] = field(default_factory=dict)
    fr_paths: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    owners: dict[str, str] = field(default_factory=dict)  # remembered output path -> its node
    surveyed: set[str] = field(default_factory=set)  # nodes that answered the survey


def assign(
    sightings: Sequence[Sighting],
    order: Sequence[str],
    fallback: Mapping[str, Sequence[str]],
    fr_prefixes: Sequence[str],
) -> ReadPlan:
    """Each file to one node that sees it; per rank, its newest dump only."""
    out = ReadPlan()
    files = plan(sightings, order).files
    remembered = {(n, p) for n, ps in fallback.items() for p in ps}
    best: dict[int, SharedFile] = {}
    for f in files:
        s = f.on(f.reader)
        rank = dump_rank(s.path, fr_prefixes)
        if rank is not None:
            if rank not in best or best[rank].on(best[rank].reader).mtime_ns < s.mtime_ns:
                best[rank] = f
            continue
        mine = [x for x in f.sightings if (x.node, x.path) in remembered]
        for x in mine:
            out.owners[x.path] = x.node
        if mine:
            out.fallback_paths.setdefault(f.reader, []).append(s.path)
        else:
            out.log_paths.setdefault(f.reader, []).append(s.path)
        if f.shared:
            out.notes.append(f"{s.path}: shared ({f.where()})")
    older = sum(1 for f in files if dump_rank(f.on(f.reader).path, fr_prefixes) is not None) - len(best)
    for rank, f in sorted(best.items()):
        s = f.on(f.reader)
        out.fr_paths.setdefault(f.reader, []).append({"path": s.path, "rank": rank})
        if f.shared:
            out.notes.append(f"flight recorder dump of rank {rank}: {s.path} ({f.where()})")
    if older > 0:
        out.notes.append(f"{older} older flight recorder dump(s) of the same ranks not read")
    return out


async def survey_reads(
    transports: Mapping[str, Any],
    order: Sequence[str],
    log_globs: Mapping[str, list[str]],
    fallback: Mapping[str, list[str]],
    fr_prefixes: Mapping[str, list[str]],
    timeout: float,
) -> ReadPlan:
    """Ask every node what it would read (logs, remembered output, dumps), then plan."""
    from ddptui.logs.remote import survey_all

    globs = {
        n: [
            *log_globs.get(n, []),
            *fallback.get(n, []),
            *(p + "*" for p in fr_prefixes.get(n, [])),
        ]
        for n in order
    }
    found = await survey_all(
        transports, {n: g for n, g in globs.items() if g}, timeout, max_files=MAX_DUMPS
    )
    prefixes = sorted({p for ps in fr_prefixes.values() for p in ps})
    out = assign(found.sightings, order, fallback, prefixes)
    out.problems = [p for p in found.problems + found.odd_problems(order) if "no file matches" not in p]
    out.surveyed = {n for n in globs if globs[n] and n not in found.unreachable}
    return out


def _key(log: LogFile) -> Sighting | None:
    fid = log.fid
    if not fid:
        return None
    return Sighting.from_record(log.node, {**fid, "path": log.path})


def merge_views(views: Sequence[NodeView], owners: Mapping[str, str] | None = None) -> tuple[NodeView, ...]:
    """One LogFile per file however many nodes read it (kept in the first writer's view,
    else the first reader's), knowing which nodes see it and whose ranks write to it;
    flight recorder dumps: a live rank's own dump first, then one left-behind dump per
    rank."""
    owners = owners or {}
    sightings: list[Sighting] = []
    by_sighting: dict[int, LogFile] = {}
    for v in views:
        for log in v.logs:
            s = _key(log)
            if s is not None:
                sightings.append(s)
                by_sighting[id(s)] = log
    groups = {}
    from ddptui.logs.sharedfs import group

    for f in group(sightings):
        logs = [by_sighting[id(s)] for s in f.sightings]
        writers = sorted({n for lg in logs for n in lg.writers} | {owners[lg.path] for lg in logs if lg.path in owners})
        local = not f.network and not f.shared
        keep = next((lg for lg in logs if lg.node in writers), logs[0])
        merged = replace(
            keep,
            seen_on=tuple(f.nodes),
            writers=tuple(writers) if writers or not local else (keep.node,),
        )
        for lg in logs:
            groups[id(lg)] = merged if lg is keep else None
    live_ranks = {
        r.get("rank") for v in views for r in v.fr if r.get("found") and not r.get("postmortem")
    }
    seen_dumps: set[int] = set()
    out = []
    for v in views:
        logs = [g for lg in v.logs if (g := groups.get(id(lg), lg)) is not None]
        fr = []
        for rec in v.fr:
            if rec.get("postmortem"):
                rank = rec.get("rank")
                if not isinstance(rank, int) or rank in live_ranks or rank in seen_dumps:
                    continue
                seen_dumps.add(rank)
            fr.append(rec)
        out.append(replace(v, logs=tuple(logs), fr=tuple(fr)))
    return tuple(out)


def rank_nodes(views: Sequence[NodeView]) -> dict[int, str]:
    """{global rank: the node it runs on} from the live processes."""
    return {r.rank: v.node for v in views for r in v.ranks if r.rank is not None}


def node_of_host(views: Sequence[NodeView], host: str | None) -> str | None:
    if not host:
        return None
    short = host.split(".", 1)[0]
    for v in views:
        if v.hostname and (v.hostname == host or v.hostname.split(".", 1)[0] == short):
            return v.node
    return None
