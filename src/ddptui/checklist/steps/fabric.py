"""`fabric`: every node's and every link's bandwidth, in rounds of disjoint pairs (one
long-lived worker per node: torch is imported once per node), each suspect re-tested
once; slow nodes and slow links named against their peers and against what the
hardware should give. Bounded by `timeouts.fabric`."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ddptui.checklist.base import Step, StepContext, trouble_finding
from ddptui.checklist.fabric_analysis import confirmed, judge
from ddptui.checklist.fabric_findings import findings_and_data
from ddptui.checklist.fabric_plan import confirm_round, partners, schedule
from ddptui.checklist.fabric_run import FabricRun
from ddptui.checklist.steps.allreduce import AllreduceStep
from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.kb import kb_finding
from ddptui.diagnosis.model import NodeResult
from ddptui.probeset import helper_source
from ddptui.transport.base import ConnectFailure, NodeTarget

# Per pair: a fixed message, both directions at once (nccl-tests' sendrecv idea). Small on
# gloo (CPU, TCP): 1 MiB x 4 is ~5 ms on a healthy 10 Gb link and under a second at
# 50 Mbit/s; large on NCCL, where 1 MiB would measure latency, not the link.
GLOO_BYTES, GLOO_ITERS = 1 << 20, (2, 4)
NCCL_BYTES, NCCL_ITERS = 64 << 20, (2, 10)
INTRA_BYTES = 256 << 20
FABRIC_PORT_OFFSET = 0  # the step runs after allreduce: MASTER_PORT is free again


class FabricStep(Step):
    id = "fabric"
    title = "Fabric: slow nodes and slow links"

    async def check(
        self, ctx: StepContext, nodes: dict[str, NodeResult]
    ) -> tuple[list[Finding], dict[str, Any]]:
        budget = float(ctx.config.timeouts.fabric)
        started = time.monotonic()
        targets = ctx.reachable
        findings: list[Finding] = []
        empty: dict[str, Any] = {"pairs": [], "nodes": {}, "expected_gbs": None}
        if ctx.unreachable:
            missing = [t.name for t in ctx.targets if t.name in ctx.unreachable]
            findings.append(
                kb_finding(
                    "FABRIC-PARTIAL",
                    missing,
                    f"not tested: {', '.join(missing)}",
                    missing=", ".join(missing),
                )
            )
        if len(targets) < 2:
            for t in targets:
                self.set_node(ctx, nodes, t.name, NodeResult("skip", "one node: no pair to test"))
            return findings, empty
        backend, gpus = await AllreduceStep().backend(ctx)
        if backend == "gloo" and any(c > 0 for c in gpus.values()):
            findings.append(
                kb_finding(
                    "AR-MIXED-GPU",
                    [n for n, c in gpus.items() if c == 0],
                    "some nodes have GPUs and others none: the pair tests run on CPU (gloo)",
                    gpu_nodes=", ".join(n for n, c in gpus.items() if c > 0),
                )
            )
        op_timeout = max(5.0, min(20.0, budget / 8))
        run = FabricRun(
            names=[t.name for t in targets],
            deadline=started + budget - 8,
            op_timeout_s=op_timeout,
        )
        params = self._params(ctx, backend, gpus, budget, op_timeout)
        followers: list[asyncio.Task[None]] = []
        try:
            findings += await self._start(ctx, run, targets, params, followers)
            every = list(run.probes)
            ok = await run.until(
                lambda: all(i in run.ready or i in run.ended for i in every),
                min(float(params["init_timeout_s"]) + 15, run.left()),
            )
            if not ok or len(run.ready) < len(targets):
                findings += self._init_failure(run, float(params["init_timeout_s"]))
                self._mark(ctx, nodes, run, findings)
                return findings, empty | {"backend": backend}
            more, data = await self._rounds(run, backend, budget)
            findings += more
            self._mark(ctx, nodes, run, findings)
            data["seconds"] = round(time.monotonic() - started, 2)
            return findings, data
        finally:
            await run.stop()
            for f in followers:
                if not f.done():
                    f.cancel()
            await asyncio.gather(*followers, return_exceptions=True)

    def _params(
        self, ctx: StepContext, backend: str, gpus: dict[str, int], budget: float, op_timeout: float
    ) -> dict[str, Any]:
        nccl = backend == "nccl"
        params: dict[str, Any] = {
            "world": len(ctx.reachable),
            "master_addr": ctx.config.master.addr,
            "port": ctx.config.master.port + FABRIC_PORT_OFFSET,
            "backend": backend,
            "overlay": dict(ctx.config.env),
            "nbytes": NCCL_BYTES if nccl else GLOO_BYTES,
            "warmup": (NCCL_ITERS if nccl else GLOO_ITERS)[0],
            "iters": (NCCL_ITERS if nccl else GLOO_ITERS)[1],
            "op_timeout_s": op_timeout,
            "init_timeout_s": max(10.0, min(60.0, budget * 0.4)),
            "idle_s": budget,
            "intra": nccl and any(c > 1 for c in gpus.values()),
            "intra_bytes": INTRA_BYTES,
            "salt": ctx.salt,
        }
        if params["intra"]:
            params["worker"] = helper_source("_ar_worker.py")
        return params

    async def _start(
        self,
        ctx: StepContext,
        run: FabricRun,
        targets: list[NodeTarget],
        params: dict[str, Any],
        followers: list[asyncio.Task[None]],
    ) -> list[Finding]:
        """One worker per node, all started at once (they rendezvous with each other)."""

        async def one(i: int, t: NodeTarget) -> Finding | None:
            node_params = dict(params, rank=i, node_env=dict(ctx.config.nodes[t.rank].env))
            try:
                probe = await ctx.transports[t.name].start_probe("fabric", node_params)
            except ConnectFailure as exc:
                run.gone[i] = exc.message
                return trouble_finding(self.id, t.name, exc)
            run.probes[i] = probe
            followers.append(asyncio.ensure_future(run.follow(i, probe)))
            return None

        found = await asyncio.gather(*(one(i, t) for i, t in enumerate(targets)))
        return [f for f in found if f is not None]

    async def _rounds(
        self, run: FabricRun, backend: str, budget: float
    ) -> tuple[list[Finding], dict[str, Any]]:
        """The planned rounds, then one re-test round for the suspects; the verdict."""
        n = len(run.names)
        wait = 2 * run.op_timeout_s + 5
        rounds = schedule(n, seed=int(time.time()) // 3600)
        done = 0
        for k, pairs in enumerate(rounds):
            if run.left() < wait - 3:
                break
            await run.round(k, pairs, wait, confirm=False)
            done += 1
        first = judge(n, run.samples, run.gone)
        retest = confirm_round(
            n, first.slow_nodes, first.slow_links, first.fast_nodes(n), partners(rounds[:done])
        )
        before = len(run.samples)
        if retest and run.left() > run.op_timeout_s:
            await run.round(len(rounds), retest, wait, confirm=True)
        slow_nodes, slow_links, notes = confirmed(first, run.samples[before:], first.reference)
        final = judge(n, run.samples, run.gone)
        return findings_and_data(
            run,
            backend,
            final,
            slow_nodes,
            slow_links,
            notes,
            done=done,
            planned=len(rounds),
            budget=budget,
        )

    def _init_failure(self, run: FabricRun, timeout: float) -> list[Finding]:
        """The workers did not all join: a node whose worker died without saying why is
        node trouble; the others (and what they said) make one FABRIC-INIT."""
        behind = [i for i in run.probes if i not in run.ready]
        out: list[Finding] = []
        said = []
        for i in behind:
            if i in run.errors:
                said.append(i)
            elif i in run.ended and not run.ended[i].ok:
                out.append(trouble_finding(self.id, run.names[i], run.ended[i]))
        quiet = [i for i in behind if i not in run.ended or i in said]
        if quiet:
            phases = ", ".join(f"{run.names[i]}: {run.phase.get(i, 'start')}" for i in quiet)
            out.append(
                kb_finding(
                    "FABRIC-INIT",
                    [run.names[i] for i in quiet],
                    f"the fabric workers did not all join the group ({phases})",
                    [f"{run.names[i]}: {run.errors[i]}" for i in said],
                    timeout=f"{timeout:.0f}",
                    why=phases,
                )
            )
        return out

    def _mark(
        self,
        ctx: StepContext,
        nodes: dict[str, NodeResult],
        run: FabricRun,
        findings: list[Finding],
    ) -> None:
        from ddptui.checklist.fabric_analysis import reference

        ref = reference(run.samples)
        for i, name in enumerate(run.names):
            mine = [s.gbs for s in run.samples if i in (s.a, s.b) and s.gbs is not None]
            if mine:
                med = sorted(mine)[len(mine) // 2]
                summary = f"{med:.3f} GB/s median over {len(mine)} pair(s)" + (
                    f" (peers {ref:.3f})" if ref else ""
                )
            else:
                summary = f"no pair measured ({run.phase.get(i, 'not started')})"
            self.set_node(ctx, nodes, name, NodeResult("pass", summary))
        self.judge_nodes(ctx, nodes, findings)
