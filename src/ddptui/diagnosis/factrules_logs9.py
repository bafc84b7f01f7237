"""Rules over facts added in round logs9 (issue 15): a collective timeout that the log
states and that is far below torch's default (timeout_short).  Core layer, stdlib only;
the rules file and the other predicates are factrules.py's."""

from __future__ import annotations

from typing import Final

from ddptui.diagnosis.factcontext import Context, Hit
from ddptui.diagnosis.factrules_logs7 import LONE_MIN_TIMEOUT_MS

# torch's defaults: 30 minutes for a process group (constants.default_pg_timeout), 10
# minutes for NCCL's in recent releases (default_pg_nccl_timeout); HF's ddp_timeout and
# DeepSpeed follow the 30 minutes.  A stated timeout under this was set by someone (a
# script's timeout=timedelta(seconds=60), horovod's 30 s Gloo timeout), and legitimate work
# on one rank (validation, a checkpoint, a first step that compiles) outlasts it.
SHORT_TIMEOUT_MS: Final = 300_000
_LINE_IDS: Final = ("WATCHDOG", "WATCHDOG-WORK", "WATCHDOG-BARE", "GLOO-OP-TIMEOUT")


def timeout_short(rules: object, rule: object, ctx: Context) -> Hit | None:
    """A watchdog or gloo timeout whose stated limit is at least 10 s (under that, the
    knob itself is the cause: logs7's lone_waiter leaves it to WATCHDOG) and under 5
    minutes: a timeout someone set far below torch's default, which a rank's legitimate
    work alone (validation, saving, a compiling first step) outlasts.  A warning beside
    the lead: the log cannot say whether the other ranks were slow or stuck."""
    tmo = ctx.timeout_ms
    if tmo is None or not LONE_MIN_TIMEOUT_MS <= tmo < SHORT_TIMEOUT_MS:
        return None
    if not any(ctx.present.get(i) == "error" for i in _LINE_IDS):
        return None
    ev = [ctx.watchdog_lines[r] for r in sorted(ctx.watchdog_lines)[:2]]
    ev += [ctx.gloo_waits[r] for r in sorted(ctx.gloo_waits)[:2]]
    if not ev and ctx.watchdog_unranked:
        ev = [ctx.watchdog_unranked]
    ranks = sorted({*ctx.watchdog_lines, *ctx.gloo_waits})
    said = f"the collectives here time out after {tmo / 1000:g} s, set far below torch's default (10 to 30 minutes)"
    return ranks, ev, said, {"seconds": f"{tmo / 1000:g}"}


def barrier_device_guess(rules: object, rule: object, ctx: Context) -> Hit | None:
    """NCCL's "invalid usage" raised from torch's barrier() (the traceback's
    `default_pg.barrier(opts=opts)`), and no line of NCCL's saying two ranks share a GPU:
    barrier() with no device_ids and a process group that knows no device guesses the GPU
    from the rank (rank % GPUs), so with non-consecutive or remapped GPUs (gpus=[1,2,3],
    CUDA_VISIBLE_DEVICES per rank) NCCL is set up on a GPU other than the rank's own."""
    barrier, usage = ctx.hints.get("barrier"), ctx.hints.get("invalid_usage")
    if barrier is None or usage is None:
        return None
    if any(i.startswith(("ENV-DUPGPU", "ENV-ORDINAL")) for i in ctx.present):
        return None  # NCCL named the GPU two ranks share: that finding says it
    said = "NCCL's invalid usage was raised inside barrier(), which picks the GPU from the rank when no device is bound"
    return [], [usage, barrier], said, {}
