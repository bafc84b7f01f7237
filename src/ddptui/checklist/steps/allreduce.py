"""`allreduce`: torchrun on every node under NCCL_DEBUG=INFO, result verified, bandwidth
measured, logs classified; bounded by a deadline in seconds."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ddptui.checklist.allreduce_analysis import ArRun, analyze
from ddptui.checklist.base import Step, StepContext, trouble_finding
from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.kb import kb_finding
from ddptui.diagnosis.model import NodeResult
from ddptui.probeset import helper_source
from ddptui.transport.base import ConnectFailure, NodeTarget, ProbeRun

# Forced on every rank, whatever the launch env says (stated in the report).
FORCED_ENV = {
    "NCCL_DEBUG": "INFO",
    "NCCL_DEBUG_SUBSYS": "INIT,BOOTSTRAP,ENV,NET",
    "TORCH_CPP_LOG_LEVEL": "INFO",
    "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
}
UNSET_ENV = ("NCCL_DEBUG_FILE",)  # NCCL would write its log there instead of stdout
# The sweep, as nccl-tests runs it (all_reduce_perf -b 1M -e 1G -f 4 -w 5 -n 20); the
# worker drops GPU sizes that do not fit in free memory, and runs the sweep on a group
# made without TORCH_DISTRIBUTED_DEBUG=DETAIL's per-collective check (init and the
# verified allreduce keep it).
GPU_SIZES = tuple(1 << e for e in range(20, 31, 2))  # 1 MiB .. 1 GiB, x4
GPU_ITERS = ((5, 20),) * len(GPU_SIZES)  # (warm-up, timed) per size
CPU_SIZES = (256 << 10, 1 << 20, 4 << 20, 16 << 20)  # gloo over TCP: up to 16 MiB
CPU_ITERS = ((5, 20), (5, 20), (3, 20), (3, 20))  # at most; the worker fits them in 1 s per size
SWEEP_SHARE = 0.6  # of the deadline, from a worker's start: the sweep grows no size after it
EARLY_STOP_GRACE_S = 4.0  # after a node's torchrun failed: time for the others' last words


class AllreduceStep(Step):
    id = "allreduce"
    title = "torchrun allreduce (NCCL/gloo)"

    async def check(
        self, ctx: StepContext, nodes: dict[str, NodeResult]
    ) -> tuple[list[Finding], dict[str, Any]]:
        absent = self.not_all_nodes(ctx, "AR-NOT-ALL-NODES", "the allreduce")
        if absent is not None:
            return [absent], {}
        backend, gpus = await self.backend(ctx)
        findings: list[Finding] = []
        if backend == "gloo" and any(n > 0 for n in gpus.values()):
            with_gpu = [n for n, c in gpus.items() if c > 0]
            findings.append(
                kb_finding(
                    "AR-MIXED-GPU",
                    [n for n, c in gpus.items() if c == 0],
                    "some nodes have GPUs and others none: the allreduce runs on CPU (gloo)",
                    gpu_nodes=", ".join(with_gpu),
                )
            )
        deadline = ctx.config.timeouts.allreduce
        run = ArRun(
            backend=backend,
            deadline_s=deadline,
            forced=dict(FORCED_ENV),
            unset=list(UNSET_ENV),
            started=time.monotonic(),
        )
        await self._launch_and_follow(ctx, run)
        more, data, per_node = analyze(ctx, run)
        findings += more
        for t in ctx.targets:
            status, summary, node_data = per_node[t.name]
            self.set_node(ctx, nodes, t.name, NodeResult(status, summary, node_data))
        return findings, data

    def not_all_nodes(self, ctx: StepContext, fid: str, what: str) -> Finding | None:
        """A collective needs every node: the finding naming those the ssh step lost."""
        missing = [t.name for t in ctx.targets if t.name in ctx.unreachable]
        if not missing:
            return None
        return kb_finding(
            fid, missing, f"{what} needs every node; {', '.join(missing)} not reachable"
        )

    async def backend(self, ctx: StepContext) -> tuple[str, dict[str, int]]:
        """("nccl" when every node has a GPU, else "gloo"), and each node's GPU count."""
        gpus = await self._gpu_counts(ctx)
        return ("nccl" if gpus and all(n > 0 for n in gpus.values()) else "gloo"), gpus

    async def _gpu_counts(self, ctx: StepContext) -> dict[str, int]:
        counts: dict[str, int] = {}
        for t in ctx.targets:
            inventory = ctx.inventory(t.name)
            if inventory is not None and inventory.gpu_count is not None:
                counts[t.name] = inventory.gpu_count
        if len(counts) == len(ctx.targets):
            return counts
        outs = await self.probe_all(ctx, "inventory", lambda t: {})
        for name, out in outs.items():
            rec = out.first("inventory") if not isinstance(out, ConnectFailure) else None
            counts[name] = len(rec.get("gpus") or []) if rec else 0
        return counts

    def _params(self, ctx: StepContext, t: NodeTarget, run: ArRun) -> dict[str, Any]:
        cfg = ctx.config
        node_cfg = cfg.nodes[t.rank]
        # torch's own waits end well inside the deadline, so torch names the failure itself.
        inner = max(5, int(run.deadline_s * 0.5))
        return {
            "nnodes": len(ctx.targets),
            "node_rank": t.rank,
            "master_addr": cfg.master.addr,
            "master_port": cfg.master.port,
            "nproc": cfg.nproc_per_node,
            "backend": run.backend,
            "overlay": dict(cfg.env),
            "node_env": dict(node_cfg.env),
            "forced": run.forced,
            "unset": run.unset,
            "salt": ctx.salt,
            "rdzv_timeout_s": inner,
            "pg_timeout_s": inner,
            "max_s": run.deadline_s + 30,
            "worker": helper_source("_ar_worker.py"),
            "sizes": list(GPU_SIZES if run.backend == "nccl" else CPU_SIZES),
            "iters": [list(p) for p in (GPU_ITERS if run.backend == "nccl" else CPU_ITERS)],
            # A slow fabric is measured at the sizes that fit, never timed out as a hang.
            "sweep_s": round(run.deadline_s * SWEEP_SHARE, 1),
        }

    async def _launch_and_follow(self, ctx: StepContext, run: ArRun) -> None:
        runs: dict[str, ProbeRun] = {}
        failed = asyncio.Event()

        async def follow(t: NodeTarget) -> None:
            try:
                probe = await ctx.transports[t.name].start_probe(
                    "allreduce", self._params(ctx, t, run)
                )
            except ConnectFailure as exc:
                run.trouble[t.name] = trouble_finding(self.id, t.name, exc)
                failed.set()
                return
            runs[t.name] = probe
            while True:
                rec = await probe.next_record()
                if rec is None:
                    break
                run.take(t.name, rec, time.monotonic(), ctx.logs)
                if rec["kind"] == "exit" and rec.get("code") not in (0, None):
                    failed.set()
            out = await probe.wait()
            run.outputs[t.name] = out
            if not out.ok and t.name not in run.exits and not run.stopping:
                run.trouble[t.name] = trouble_finding(self.id, t.name, out)
                failed.set()

        tasks = [asyncio.ensure_future(follow(t)) for t in ctx.targets]
        everything: asyncio.Future[Any] = asyncio.gather(*tasks)
        early: asyncio.Future[Any] = asyncio.ensure_future(failed.wait())
        try:
            done, _ = await asyncio.wait(
                {everything, early}, timeout=run.deadline_s, return_when=asyncio.FIRST_COMPLETED
            )
            if early in done and everything not in done:
                # One node failed: let the others print what they saw, then stop them all
                # instead of waiting for their own (much longer) timeouts.
                await asyncio.wait({everything}, timeout=EARLY_STOP_GRACE_S)
                run.stopped_early = not everything.done()
            elif not done:
                run.timed_out = True
        finally:
            early.cancel()
            if not everything.done():
                run.stopping = True  # what we stop is not a node fault
                await asyncio.gather(*(r.stop() for r in runs.values()), return_exceptions=True)
                await asyncio.wait({everything}, timeout=10)
            if not everything.done():
                everything.cancel()
            elif not everything.cancelled():
                bug = everything.exception()
                if bug is not None:
                    raise bug  # a bug in ddptui: exit 3, not a silent pass
            run.finished = time.monotonic()
