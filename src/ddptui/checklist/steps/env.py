"""`env`: the launch environment each node would really see, audited across nodes."""

from __future__ import annotations

from typing import Any

from ddptui.checklist.base import Step, StepContext
from ddptui.diagnosis.envaudit import EXPECTED_TO_DIFFER, EnvFacts, audit_env, env_diff
from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.model import NodeResult, node_status_from
from ddptui.transport.base import NodeTarget, ProbeOutput


class EnvStep(Step):
    id = "env"
    title = "Launch environment audit"

    async def check(
        self, ctx: StepContext, nodes: dict[str, NodeResult]
    ) -> tuple[list[Finding], dict[str, Any]]:
        findings: list[Finding] = []
        facts: list[EnvFacts] = []
        by_name = {t.name: t for t in ctx.targets}
        node_cfg = {t.name: n for t, n in zip(ctx.targets, ctx.config.nodes, strict=True)}

        def params(t: NodeTarget) -> dict[str, Any]:
            return {
                "overlay": dict(ctx.config.env),
                "node_env": dict(node_cfg[t.name].env),
                "salt": ctx.salt,
                "master_addr": ctx.config.master.addr,
            }

        outs = await self.probe_all(ctx, "env", params)
        for name, out in outs.items():
            env_rec = out.first("env") if isinstance(out, ProbeOutput) else None
            net_rec = out.first("net") if isinstance(out, ProbeOutput) else None
            if env_rec is None or net_rec is None or not (isinstance(out, ProbeOutput) and out.ok):
                self.node_trouble(ctx, nodes, findings, name, out)
                continue
            inventory = ctx.inventory(name)
            facts.append(
                EnvFacts(
                    name=name,
                    rank=by_name[name].rank,
                    env=env_rec["env"],
                    sources=env_rec["sources"],
                    interfaces=net_rec["interfaces"],
                    route=net_rec.get("route"),
                    shm_bytes=net_rec.get("shm_bytes"),
                    gpu_count=inventory.gpu_count if inventory is not None else None,
                )
            )
        facts.sort(key=lambda f: f.rank)
        findings += audit_env(
            facts,
            master_addr=ctx.config.master.addr,
            master_port=ctx.config.master.port,
            nproc_per_node=ctx.config.nproc_per_node,
            single_host=all(t.host == "local" for t in ctx.targets),
        )
        for f in facts:
            relevant = {
                k: v
                for k, v in sorted(f.env.items())
                if k.startswith(("NCCL_", "TORCH_", "GLOO_", "MASTER_", "CUDA_", "PET_"))
                or k
                in (
                    "WORLD_SIZE",
                    "RANK",
                    "NODE_RANK",
                    "LOCAL_RANK",
                    "GROUP_RANK",
                    "OMP_NUM_THREADS",
                    "LD_LIBRARY_PATH",
                    "LD_PRELOAD",
                    "PATH",
                )
            }
            data = {
                "launch_env": relevant,
                "sources": {k: f.sources.get(k) for k in relevant},
                "route": f.route,
                "shm_bytes": f.shm_bytes,
            }
            status = node_status_from(findings, f.name)
            mine = [x for x in findings if f.name in x.nodes]
            summary = f"{len(relevant)} launch variables audited" + (
                f"; {mine[0].summary}" if mine else ", consistent"
            )
            self.set_node(ctx, nodes, f.name, NodeResult(status, summary, data))
        return findings, {"diff": env_diff(facts, ignore=EXPECTED_TO_DIFFER)}
