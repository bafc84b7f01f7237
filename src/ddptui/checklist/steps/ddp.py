"""`ddp`: a small real DistributedDataParallel model trained for a few steps on every
rank (the allreduce step's torchrun launcher, another worker), proven across ranks:
parameters bit-identical, gradients all-reduced, buffers broadcast, SyncBatchNorm
synchronised, sampler shards disjoint and complete; then the scaling projection for
the user's model from the measured bus bandwidth. Bounded by `timeouts.ddp`."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from ddptui.checklist.allreduce_analysis import ArRun, _root_finding
from ddptui.checklist.base import StepContext
from ddptui.checklist.ddp_analysis import RankReport, cross_rank_findings, short
from ddptui.checklist.ddp_projection import projection_findings, projection_for, timing_line
from ddptui.checklist.steps.allreduce import AllreduceStep
from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.kb import kb_finding
from ddptui.diagnosis.model import NodeResult, Status, node_status_from
from ddptui.probeset import helper_source
from ddptui.transport.base import NodeTarget

# What the worker trains: small enough for a laptop's CPU in a second, buckets small
# enough that DDP splits the gradients into several (as on a real model).
WORKER_SETTINGS = {
    "samples_per_rank": 256,
    "batch": 32,
    "epochs": 2,
    "width": 256,
    "bucket_cap_mb": 0.1,
    "timing_iters": 6,
    "threads": 1,
}
FORCED_ENV = {"NCCL_DEBUG": "WARN"}  # NCCL's warnings, not its INFO chatter
UNSET_ENV = ("NCCL_DEBUG_FILE",)
TEST_SEED_VAR = "DDPTUI_DDP_TEST_SEED_RANK"  # test only: see probes/_ddp_worker.py


@dataclass
class DdpRun(ArRun):
    """The allreduce run's bookkeeping plus each rank's ddp records."""

    ddp: dict[int, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def _worker(self, node: str, rec: dict[str, Any], now: float) -> None:
        super()._worker(node, rec, now)
        rank, kind = rec.get("rank"), rec.get("kind")
        if isinstance(rank, int) and kind in ("ddp_model", "ddp_result", "error"):
            self.ddp.setdefault(rank, {})[str(kind)] = rec

    def reports(self) -> dict[int, RankReport]:
        out = {}
        for rank, st in self.ranks.items():
            recs = self.ddp.get(rank, {})
            err = recs.get("error", {}).get("error")
            out[rank] = RankReport(
                rank,
                st.node,
                recs.get("ddp_model", {}),
                recs.get("ddp_result", {}),
                str(err) if err is not None else None,
            )
        return out


class DdpStep(AllreduceStep):
    id = "ddp"
    title = "DDP training steps"

    async def check(
        self, ctx: StepContext, nodes: dict[str, NodeResult]
    ) -> tuple[list[Finding], dict[str, Any]]:
        absent = self.not_all_nodes(ctx, "DDP-NOT-ALL-NODES", "DDP")
        if absent is not None:
            return [absent], {}
        backend, _ = await self.backend(ctx)
        run = DdpRun(
            backend=backend,
            deadline_s=ctx.config.timeouts.ddp,
            forced={**FORCED_ENV, "DDPTUI_DDP": json.dumps(WORKER_SETTINGS)},
            unset=list(UNSET_ENV),
            started=time.monotonic(),
        )
        await self._launch_and_follow(ctx, run)
        findings, data = judge(ctx, run)
        for t in ctx.targets:
            status, summary, node_data = node_result(run, t.name, findings)
            self.set_node(ctx, nodes, t.name, NodeResult(status, summary, node_data))
        return findings, data

    def _params(self, ctx: StepContext, t: NodeTarget, run: ArRun) -> dict[str, Any]:
        params = super()._params(ctx, t, run)
        params.update(worker=helper_source("_ddp_worker.py"), sizes=[], iters=0)
        return params


def judge(ctx: StepContext, run: DdpRun) -> tuple[list[Finding], dict[str, Any]]:
    """(findings, step data) from everything the ranks sent."""
    reports = run.reports()
    world = sum(int(run.launch[n].get("nproc", 0)) for n in run.launch) or len(ctx.targets)
    done = {r: rep for r, rep in reports.items() if rep.result}
    all_ok = (
        len(done) == world
        and not run.timed_out
        and all(run.exits.get(t.name, {}).get("code") == 0 for t in ctx.targets)
    )
    findings: list[Finding] = list(run.trouble.values())
    planted = sorted({rep.model.get("planted") for rep in reports.values()} - {None}, key=str)
    if planted:
        findings.append(
            kb_finding(
                "DDP-TEST-PLANTED",
                [t.name for t in ctx.targets],
                f"{TEST_SEED_VAR}={planted[0]} is set: a divergence was planted on purpose",
                var=TEST_SEED_VAR,
            )
        )
    projection = None
    if not all_ok:
        findings += failure_findings(ctx, run, reports)
    else:
        findings += cross_rank_findings(done)
        if not any(f.severity == "error" for f in findings):
            findings.append(verified_finding(ctx, done))
        projection = projection_for(ctx, done, world)
        if projection is not None:
            findings += projection_findings(ctx, projection, timing_line(done))
    data = {
        "backend": run.backend,
        "world_size": world,
        "deadline_s": run.deadline_s,
        "seconds": round(run.finished - run.started, 2),
        "timed_out": run.timed_out,
        "stopped_early": run.stopped_early,
        "worker": dict(WORKER_SETTINGS),
        "ranks": {str(r): rank_data(rep) for r, rep in sorted(reports.items())},
        "projection": projection.to_dict() if projection else None,
    }
    return findings, data


def last(values: list[int]) -> int | None:
    return values[-1] if values else None


def rank_data(rep: RankReport) -> dict[str, Any]:
    res, hook = rep.result, rep.hook
    return {
        "node": rep.node,
        "params": rep.model.get("params"),
        "sync_bn": rep.model.get("sync_bn"),
        "params_sha": res.get("params_sha"),
        "grads_sha": res.get("grads_sha"),
        "buffers_sha": res.get("buffers_sha"),
        "buckets_per_step": last(rep.ints("buckets_per_step")),
        "bytes_per_step": last(rep.ints("bytes_per_step")),
        "samples": {e: len(v) for e, v in rep.epochs().items()},
        "samples_total": res.get("samples_total"),
        "loss_first": res.get("loss_first"),
        "loss_last": res.get("loss_last"),
        "timing": res.get("timing"),
        "bucket_bytes": hook.get("bucket_bytes"),
        "error": rep.error,
    }


def verified_finding(ctx: StepContext, done: dict[int, RankReport]) -> Finding:
    first = next(iter(done.values()))
    total = first.result.get("samples_total")
    buckets = (first.ints("buckets_per_step") or [0])[-1]
    nbytes = (first.ints("bytes_per_step") or [0])[-1]
    sync_bn = str(first.model.get("sync_bn") or "SyncBatchNorm")
    summary = (
        f"ranks saw disjoint shards covering all {total} samples; params identical "
        f"(sha {short(first.text('result', 'params_sha'))}) on {len(done)} ranks; "
        f"{buckets} buckets, {nbytes / 1e6:.2f} MB all-reduced per step"
    )
    evidence = [
        f"rank {r} on {rep.node}: {sum(len(v) for v in rep.epochs().values())} samples over "
        f"{len(rep.epochs())} epochs, loss {rep.result.get('loss_first', 0):.3f} -> "
        f"{rep.result.get('loss_last', 0):.3f}"
        for r, rep in sorted(done.items())
    ]
    evidence.append(f"BatchNorm statistics equal on every rank after each forward, with {sync_bn}")
    evidence.append("a buffer each rank overwrote was rank 0's in every forward (broadcast)")
    return kb_finding("DDP-VERIFIED", [t.name for t in ctx.targets], summary, evidence)


def failure_findings(
    ctx: StepContext, run: DdpRun, reports: dict[int, RankReport]
) -> list[Finding]:
    from ddptui.diagnosis.signatures import root_cause

    out: list[Finding] = []
    matches = sorted(run.matches, key=lambda item: item[0])
    root = root_cause(matches)
    if root is not None:
        out.append(_root_finding(run, matches, root))
    errors = {r: rep for r, rep in reports.items() if rep.error}
    phases = [
        f"rank {st.rank} on {st.node}: {st.phase}"
        for st in sorted(run.ranks.values(), key=lambda s: s.rank)
    ]
    if errors:
        first = min(errors)
        out.append(
            kb_finding(
                "DDP-FAILED",
                sorted({rep.node for rep in errors.values()}),
                f"rank {first} on {errors[first].node} raised: {errors[first].error}",
                [f"rank {r} on {rep.node}: {rep.error}" for r, rep in sorted(errors.items())],
                rank=first if len(errors) == 1 else None,
                error=errors[first].error,
            )
        )
    if run.timed_out or (run.stopped_early and not errors and root is None):
        names = [t.name for t in ctx.targets]
        stuck = sorted(
            {st.node for st in run.ranks.values() if st.phase != "done"}
            | {n for n in names if not any(st.node == n for st in run.ranks.values())},
            key=names.index,
        )
        out.append(
            kb_finding(
                "DDP-HANG",
                stuck or names,
                f"DDP stopped at the deadline ({run.deadline_s:.0f} s): "
                f"{', '.join(stuck or names)} never finished"
                if run.timed_out
                else f"DDP stopped when another node failed: {', '.join(stuck or names)}",
                phases or ["no rank reported: torchrun never started the workers"],
                severity="error" if run.timed_out else "info",
                deadline=f"{run.deadline_s:.0f}",
            )
        )
    if not any(f.severity == "error" for f in out) and not run.trouble:
        codes = {n: e.get("code") for n, e in run.exits.items() if e.get("code") != 0}
        failed = sorted(codes) or [t.name for t in ctx.targets]
        out.append(
            kb_finding(
                "DDP-FAILED",
                failed,
                "torchrun failed on "
                + (", ".join(f"{n} (exit {c})" for n, c in codes.items()) or "no node")
                + "; not every rank finished",
                [f"{n}: {ln}" for n in failed for ln in run.tail(n, 4)] + phases,
                error="see the log lines",
            )
        )
    return out


def node_result(
    run: DdpRun, node: str, findings: list[Finding]
) -> tuple[Status, str, dict[str, Any]]:
    reports = [rep for rep in run.reports().values() if rep.node == node]
    status: Status = node_status_from(findings, node)
    data = {
        "exit_code": run.exits.get(node, {}).get("code"),
        "ranks": {str(rep.rank): rank_data(rep) for rep in sorted(reports, key=lambda r: r.rank)},
        "log_tail": run.tail(node),
    }
    finished = [rep for rep in reports if rep.result]
    if not reports:
        code = run.exits.get(node, {}).get("code")
        return (
            status if status != "pass" else "warn",
            (f"no rank started (torchrun exit {code})" if code is not None else "no rank started"),
            data,
        )
    if len(finished) < len(reports):
        phases = ", ".join(f"r{rep.rank}:{run.ranks[rep.rank].phase}" for rep in reports)
        return status if status != "pass" else "warn", f"ranks stopped at {phases}", data
    rep = finished[0]
    total = rep.result.get("samples_total")
    seen = sum(len(v) for v in rep.epochs().values()) // max(1, len(rep.epochs()))
    ranks = ", ".join(str(r.rank) for r in finished)
    summary = (
        f"rank {ranks}: {seen} of {total} samples per epoch, params sha "
        f"{short(rep.text('result', 'params_sha'))}, "
        f"{(rep.ints('buckets_per_step') or [0])[-1]} buckets "
        f"{(rep.ints('bytes_per_step') or [0])[-1] / 1e6:.2f} MB/step"
    )
    return status, summary, data
