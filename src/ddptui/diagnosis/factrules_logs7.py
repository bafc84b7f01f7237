"""Rules over facts added in round logs7 (issue 15): a watchdog (or gloo) timeout that
only the waiting ranks' lines show (lone_waiter, inside factrules.py's not_in_collective),
and an NCCL older than the GPU the log names (nccl_predates_gpu, gpuarch.yaml).  Core
layer, stdlib only; the rules file and the other predicates are factrules.py's."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from ddptui.diagnosis.factcontext import Context, Hit, ranks_said
from ddptui.diagnosis.gpuarch import arch_of, version_tuple

# Below this the timeout itself is the cause (a test of the knob, a typo in seconds vs
# milliseconds): no rank had time to be anywhere else.
LONE_MIN_TIMEOUT_MS: Final = 10_000
WATCHDOG_IDS: Final = ("WATCHDOG", "WATCHDOG-WORK", "WATCHDOG-BARE")
# a collective's own timeout besides torch's NCCL watchdog: the waiting side, not a failure
# of the fabric or a rank (specific_failure leaves them out)
WAIT_IDS: Final = frozenset({"GLOO-OP-TIMEOUT"})
# Findings that name a failure of the fabric, the GPU or a rank itself: with one of them the
# ranks that do not report a timeout may well be the broken ones, not ranks elsewhere.
_SPECIFIC: Final = ("IB-", "NET-", "BOOT-", "NCCL-", "SHM-", "P2P-", "CUDA-", "RANK-", "GPU-", "ENV-", "GLOO-")


def specific_failure(ctx: Context) -> bool:
    """An error line of the log names a failure of the fabric, the GPU or a rank."""
    return any(
        i.startswith(_SPECIFIC) and i not in WAIT_IDS for i, sev in ctx.present.items() if sev == "error"
    )

# errors that say a peer died, a scheduler ended the job or the network failed: then the
# ranks missing from the collective are explained, not "elsewhere" (specific_failure
# covers NCCL's, the fabric's, the GPU's and a rank's own errors)
_OTHER_CAUSES: Final = (
    "GLOO-PEER-", "GLOO-CONNECT-", "GLOO-MESH", "PORT-", "PING-", "SLURM-", "K8S-", "HOST-OOM-KILL",
    "LAUNCH-", "LOGS-APP-EXCEPTION",  # logs39: a rank's own exception ended it
)


def _world(ctx: Context) -> int | None:
    worlds = {p.world_size for p in ctx.procs if p.world_size}
    return worlds.pop() if len(worlds) == 1 else None


def lone_waiter(
    ctx: Context, waiting: Sequence[int], op: str, evidence: Sequence[str]
) -> Hit | None:
    """A watchdog timeout that the log shows only from the waiting side: the ranks that
    time out are all the log holds (a one-rank paste, or a job's ranks short of its
    world), nothing names a broken fabric, GPU or rank, and the timeout is long enough
    for real work.  What such threads establish most often is a rank that was elsewhere
    (rank-0-only validation, saving, a rank-dependent branch, a slow step on one rank),
    so the finding names that and says how the log shows it: no other rank's line."""
    if not _only_waits(ctx, waiting) or op.endswith("(SeqNum 1)"):
        return None  # (the first collective also connects NCCL's communicator: a peer
        # stuck connecting looks the same from here, WATCHDOG's cause names both)
    ev = [e for e in evidence if e]
    if not ev and ctx.watchdog_unranked:
        ev = [ctx.watchdog_unranked]
    if not ev:
        return None
    who = ranks_said(waiting) if waiting else "a rank (the log does not say which)"
    verb = "waits" if len(waiting) <= 1 else "wait"
    # gpu11: other ranks of the world print lines (a file per node) but never report this
    # wait: they are the ones elsewhere, and the finding names them
    seen = sorted({p.rank for p in ctx.procs if p.rank is not None} - set(waiting)) if waiting else []
    if seen:
        said = (
            f"{who} {verb} in {op}{_timeout(ctx)}{_reading(ev[0])}; {ranks_said(seen)} never "
            f"reported it ({'its' if len(seen) == 1 else 'their'} lines stop before it), none "
            "names a network, GPU or rank failure"
        )
        return seen, ev, said, {"op": op, "waiting": who, "absent": ranks_said(seen)}
    absent = "the other ranks (none of their lines is in this log)"
    said = (
        f"{who} {verb} in {op}{_timeout(ctx)}{_reading(ev[0])}; no other rank's line is in the "
        "log, none names a network, GPU or rank failure"
    )
    return [*waiting], ev, said, {"op": op, "waiting": who, "absent": absent}


def _only_waits(ctx: Context, waiting: Sequence[int]) -> bool:
    """The log shows a collective's timeout, long enough for real work, and nothing that
    explains the ranks missing from it; the waiting ranks are not the whole world."""
    if not ctx.lone or not any(ctx.present.get(i) == "error" for i in (*WATCHDOG_IDS, *WAIT_IDS)):
        return False
    if ctx.timeout_ms is not None and ctx.timeout_ms < LONE_MIN_TIMEOUT_MS:
        return False
    if any(i.startswith(_OTHER_CAUSES) for i, sev in ctx.present.items() if sev == "error"):
        return False
    world = _world(ctx)
    if world is not None and set(range(world)) <= set(waiting):
        return False  # every rank of the world waits in it: none was elsewhere
    # ranks from 0 up all wait: maybe the whole world, nothing says
    if world is None and len(waiting) >= 2 and 0 in waiting:
        return False
    # logs11: a whole launcher console (torchrun's failure summary) in which rank 0 alone
    # waits and no other rank or world is stated anywhere: a one-rank job, as far as the
    # log shows; it cannot say that other ranks were elsewhere
    others = {p.rank for p in ctx.procs if p.rank is not None} | set(ctx.named_ranks)
    return not (
        world is None and list(waiting) == [0] and others <= {0} and "torchrun_summary" in ctx.hints
    )


def lone_gloo_or_unranked(ctx: Context) -> Hit | None:
    """lone_waiter for what ctx.collective does not hold: gloo's own send/recv timeouts
    (per rank) and watchdog lines that name no rank."""
    ranks = sorted(ctx.gloo_waits)
    op = "a gloo send/recv" if ranks else "a collective"
    return lone_waiter(ctx, ranks, op, [ctx.gloo_waits[r] for r in ranks[:3]])


_WORK: Final = re.compile(r"SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+), NumelIn=(?P<n>\d+)")


def _reading(line: str) -> str:
    """What the watchdog's own line says of where the job was: a one-element ALLREDUCE
    early in the run is a barrier() or a flag before training (a rank still loading,
    tokenising or preparing data); late in the run, a rank-dependent branch or a step
    (evaluation, saving) one rank ran alone."""
    m = _WORK.search(line)
    if m is None:
        return ""
    seq, small = int(m["seq"]), m["op"] == "ALLREDUCE" and m["n"] == "1"
    if seq <= 10:
        what = "a barrier()-sized collective" if small else "a collective"
        return f", {what} early in the run (usually a rank still loading or preparing data)"
    return ", well into the run (usually a step one rank ran alone, or a rank-dependent branch)"


def _timeout(ctx: Context) -> str:
    if ctx.timeout_ms is None:
        return ""
    minutes = ctx.timeout_ms / 60_000
    return f" past its {minutes:g}-minute timeout" if minutes >= 1 else f" past its {ctx.timeout_ms / 1000:g} s timeout"


def nccl_predates_gpu(rules: object, rule: object, ctx: Context) -> Hit | None:
    """The log names a GPU (gpuarch.yaml's models) and a rank runs an NCCL release older
    than the first one that supports that GPU's architecture (from NVIDIA/nccl's own
    history, gpuarch.yaml)."""
    for model, gpu_line in ctx.gpus.items():
        arch = arch_of(model)
        if arch is None:
            continue
        old = [
            p for p in ctx.procs
            if p.nccl_version and (v := version_tuple(p.nccl_version)) and v < arch.nccl_since
        ]
        if not old:
            continue
        version = str(old[0].nccl_version)
        ranks = sorted({p.rank for p in old if p.rank is not None})
        said = f"NCCL {version} on {model} ({arch.arch}), supported from NCCL {arch.since}"
        ev = [old[0].evidence.get("version", ""), gpu_line]
        fill = {
            "version": version, "gpu": model, "arch": arch.arch, "since": arch.since,
            "source": arch.source,
        }
        return ranks, [e for e in ev if e], said, fill
    return None
