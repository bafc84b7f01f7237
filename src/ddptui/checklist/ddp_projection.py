"""DDP's scaling on this cluster for the user's model: the arithmetic (allreduce time
from busbw, overlap bounded by the backward, efficiency and what would reach 90%) and
the ddp step's projection findings. Core layer."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ddptui.checklist.base import StepContext
from ddptui.checklist.ddp_analysis import RankReport
from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.kb import kb_finding

# A step's backward is about 2/3 of its forward+backward compute: the window in which
# DDP's bucketed allreduce can hide (it starts with the first full bucket).
BACKWARD_FRACTION = 2 / 3
TARGET_EFFICIENCY = 0.9  # "what would it take": the compute / busbw for this efficiency
LOW_EFFICIENCY = 0.8  # below this, DDP-SCALING-LOW (a warning) with what to change
ACCUMULATION = 4  # the micro-batches of the no_sync() example in the advice
BYTES_PER_PARAM = {"fp32": 4, "bf16": 2}


def allreduce_seconds(nbytes: float, world: int, busbw_gbps: float) -> float:
    """Ring allreduce time as nccl-tests define busbw: bytes * 2(n-1)/n / busbw."""
    if world < 2 or nbytes <= 0:
        return 0.0
    return nbytes * 2 * (world - 1) / world / (busbw_gbps * 1e9)


def step_seconds(compute_s: float, comm_s: float, overlap: float) -> float:
    """One step: compute plus the communication the backward did not hide. At most the
    backward's share of the compute can hide communication."""
    hidden = min(max(0.0, min(1.0, overlap)) * comm_s, BACKWARD_FRACTION * compute_s)
    return compute_s + comm_s - hidden


def efficiency(compute_s: float, comm_s: float, overlap: float) -> float:
    """Scaling efficiency: the step's compute over its whole time (1.0 = perfect)."""
    total = step_seconds(compute_s, comm_s, overlap)
    return compute_s / total if total > 0 else 1.0


def _solve(rises: Callable[[float], float], target: float, lo: float, hi: float) -> float | None:
    """The smallest x in [lo, hi] with rises(x) >= target (rises is non-decreasing)."""
    if rises(hi) < target:
        return None
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if rises(mid) >= target:
            hi = mid
        else:
            lo = mid
        if hi / lo < 1.0001:
            break
    return hi


@dataclass(frozen=True)
class Projection:
    """DDP's scaling on this cluster for a model of `params` parameters."""

    params: int
    grad_dtype: str
    grad_bytes: int
    world: int
    busbw_gbps: float
    busbw_source: str
    compute_s: float
    compute_source: str
    overlap: float
    comm_s: float
    step_s: float
    efficiency: float
    accumulation_efficiency: float  # with no_sync() over ACCUMULATION micro-batches
    bf16_efficiency: float | None  # with bf16 gradients (None when already bf16)
    compute_for_target_s: float | None  # compute per step that reaches TARGET_EFFICIENCY
    busbw_for_target_gbps: float | None  # busbw that reaches it with this compute

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in vars(self).items()}


def project(
    params: int,
    grad_dtype: str,
    world: int,
    busbw_gbps: float,
    compute_s: float,
    overlap: float,
    *,
    busbw_source: str = "allreduce step",
    compute_source: str = "given",
) -> Projection:
    per_param = BYTES_PER_PARAM[grad_dtype]
    nbytes = params * per_param
    comm = allreduce_seconds(nbytes, world, busbw_gbps)
    eff = efficiency(compute_s, comm, overlap)
    accum = efficiency(compute_s * ACCUMULATION, comm, overlap)
    bf16 = None
    if grad_dtype != "bf16":
        bf16 = efficiency(compute_s, allreduce_seconds(params * 2, world, busbw_gbps), overlap)
    need_compute = (
        _solve(lambda c: efficiency(c, comm, overlap), TARGET_EFFICIENCY, 1e-9, 1e9)
        if comm > 0
        else 0.0
    )
    need_busbw = (
        _solve(
            lambda b: efficiency(compute_s, allreduce_seconds(nbytes, world, b), overlap),
            TARGET_EFFICIENCY,
            1e-6,
            1e6,
        )
        if comm > 0
        else None
    )
    return Projection(
        params=params,
        grad_dtype=grad_dtype,
        grad_bytes=nbytes,
        world=world,
        busbw_gbps=busbw_gbps,
        busbw_source=busbw_source,
        compute_s=compute_s,
        compute_source=compute_source,
        overlap=max(0.0, min(1.0, overlap)),
        comm_s=comm,
        step_s=step_seconds(compute_s, comm, overlap),
        efficiency=eff,
        accumulation_efficiency=accum,
        bf16_efficiency=bf16,
        compute_for_target_s=need_compute,
        busbw_for_target_gbps=need_busbw,
    )


def measured_overlap(fwd_bwd_s: float, local_s: float, comm_s: float) -> float:
    """The share of the gradient allreduce the backward hid: 1 - exposed / alone, where
    exposed = (step with sync) - (same step under no_sync()), alone = the same buckets
    all-reduced with nothing else running."""
    if comm_s <= 0:
        return 1.0
    return max(0.0, min(1.0, 1.0 - (fwd_bwd_s - local_s) / comm_s))


def human_params(n: float) -> str:
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:.0f}"


def human_seconds(s: float) -> str:
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


# --------------------------------------------------------------------------- findings


def _median(reports: dict[int, RankReport], key: str) -> float | None:
    values = [v for rep in reports.values() if (v := rep.timing(key)) is not None]
    return statistics.median(values) if values else None


def projection_for(ctx: StepContext, done: dict[int, RankReport], world: int) -> Projection | None:
    """The user's model on this cluster: busbw from the allreduce step (else this step's
    own bucket allreduce), compute per step from ddp.compute_s (else the probe model's,
    scaled to the parameter count), overlap as measured here."""
    cfg = ctx.config.ddp
    if world < 2:
        return None
    fwd_bwd, local = _median(done, "fwd_bwd_s"), _median(done, "fwd_bwd_local_s")
    comm, compute = _median(done, "comm_s"), _median(done, "compute_s")
    if None in (fwd_bwd, local, comm, compute) or not comm or not compute:
        return None
    assert fwd_bwd is not None and local is not None
    overlap = measured_overlap(fwd_bwd, local, comm)
    busbw, source = _allreduce_busbw(ctx)
    if busbw is None:
        bucket_bytes = sum(next(iter(done.values())).ints("bucket_bytes"))
        busbw = bucket_bytes / comm / 1e9 * 2 * (world - 1) / world
        source = f"this step's own {bucket_bytes / 1e6:.2f} MB of buckets (a low estimate)"
    probe_params = next(iter(done.values())).model.get("params")
    if cfg.compute_s is not None:
        compute_s, compute_source = cfg.compute_s, "ddp.compute_s"
    elif isinstance(probe_params, int) and probe_params > 0:
        compute_s = compute * cfg.model_params / probe_params
        compute_source = (
            f"the probe model's {human_seconds(compute)} for {human_params(probe_params)} params, "
            "scaled to yours"
        )
    else:
        return None
    return project(
        cfg.model_params,
        cfg.grad_dtype,
        world,
        busbw,
        compute_s,
        overlap,
        busbw_source=source,
        compute_source=compute_source,
    )


def _allreduce_busbw(ctx: StepContext) -> tuple[float | None, str]:
    """The slowest rank's busbw at the allreduce step's largest size (a ring runs at the
    pace of its slowest link)."""
    result = ctx.results.get("allreduce")
    rows = result.data.get("bandwidth") if result is not None else None
    values = [
        float(r["busbw_gbps"])
        for r in rows or []
        if isinstance(r, dict) and isinstance(r.get("busbw_gbps"), (int, float))
    ]
    values = [v for v in values if v > 0]
    if not values:
        return None, ""
    return min(values), "the allreduce step (slowest rank)"


def timing_line(done: dict[int, RankReport]) -> str:
    """The probe's own step, median over ranks: what the overlap was measured from."""
    got = {k: _median(done, k) for k in ("fwd_bwd_s", "fwd_bwd_local_s", "compute_s", "comm_s")}
    shown = {k: human_seconds(v) if v is not None else "n/a" for k, v in got.items()}
    return (
        f"probe step (median of ranks): forward+backward {shown['fwd_bwd_s']} with DDP, "
        f"{shown['fwd_bwd_local_s']} under no_sync(), {shown['compute_s']} without DDP or any "
        f"collective; its buckets all-reduced alone {shown['comm_s']}"
    )


def projection_findings(ctx: StepContext, p: Projection, measured: str) -> list[Finding]:
    names = [t.name for t in ctx.targets]
    facts = {
        "params": human_params(p.params),
        "dtype": p.grad_dtype,
        "grad_mb": f"{p.grad_bytes / 1e6:.0f}",
        "world": p.world,
        "busbw": f"{p.busbw_gbps:.2f}",
        "efficiency": f"{p.efficiency:.0%}",
        "comm": human_seconds(p.comm_s),
        "compute": human_seconds(p.compute_s),
        "overlap": f"{p.overlap:.0%}",
        "accum": f"{p.accumulation_efficiency:.0%}",
        "bf16": f"{p.bf16_efficiency:.0%}"
        if p.bf16_efficiency is not None
        else "n/a (already bf16)",
        "need_busbw": f"{p.busbw_for_target_gbps:.2f}" if p.busbw_for_target_gbps else "n/a",
        "need_compute": human_seconds(p.compute_for_target_s or 0.0),
    }
    evidence = [
        f"gradients per step: {facts['grad_mb']} MB ({p.grad_dtype}); allreduce "
        f"{facts['comm']} at {facts['busbw']} GB/s busbw ({p.busbw_source})",
        f"compute per step: {facts['compute']} ({p.compute_source})",
        f"overlap measured here: {facts['overlap']} of the allreduce hidden by the backward",
        measured,
        f"step: {human_seconds(p.step_s)}, efficiency {facts['efficiency']}; with no_sync() "
        f"over 4 micro-batches {facts['accum']}; with bf16 gradients {facts['bf16']}",
        f"for 90%: compute >= {facts['need_compute']} per step, or busbw >= "
        f"{facts['need_busbw']} GB/s",
    ]
    summary = (
        f"projection for {facts['params']} params at {facts['busbw']} GB/s busbw on {p.world} "
        f"ranks: {facts['efficiency']} efficiency (90% needs >= {facts['need_compute']} of "
        "compute per step)"
    )
    out = [kb_finding("DDP-SCALING", names, summary, evidence, facts=facts)]
    if p.efficiency < LOW_EFFICIENCY:
        out.append(
            kb_finding(
                "DDP-SCALING-LOW",
                names,
                f"{facts['params']} params on {p.world} ranks would spend "
                f"{1 - p.efficiency:.0%} of each step waiting for the gradient allreduce",
                evidence,
                facts=facts,
            )
        )
    return out
