"""Readings added in round logs36 (issue 15: logs nobody has seen, the corpus's misses).

nccl1_in_use: the log runs NCCL 1.x, the single-node library NVIDIA replaced with NCCL 2
in 2017.  NCCL 1 has no network transport at all (it joins the GPUs of one machine over
PCIe/NVLink only), so a job that spans nodes cannot work with it, and it predates every
GPU and driver since Pascal's first year: on current hardware its init fails in generic
ways (a device buffer it cannot allocate, an "unhandled cuda error").  Three of its own
words say it is the one loaded: nccl-tests' header "# NCCL Tests compiled with NCCL 1.0",
NCCL 1's "NCCL version 1.3.4 compiled with CUDA 8.0" (showVersion in src/core.cu), and
its WARN macro's bare "WARN src/core.cu:225 ..." (src/debug.h prints the file and line
after "WARN", where NCCL 2 prints "host:pid:tid [dev] file:line NCCL WARN").  The finding
needs a failure in the log: a one-node NCCL 1 run that worked is left alone
(NVIDIA/nccl#33: "NCCL doesn't run across multiple nodes ... implemented in NCCL2";
NVIDIA/nccl-tests#5: "settled by updating nccl1.0 to nccl" 2).

Core layer, stdlib only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddptui.diagnosis.factcontext import Context, Hit

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules


def nccl1_in_use(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """A line only NCCL 1.x (or a program built against it) prints (hints.nccl1)."""
    line = ctx.hints.get("nccl1")
    if line is None:
        return None
    said = "the log runs NCCL 1.x, which joins the GPUs of one machine only"
    return [], [line], said, {}
