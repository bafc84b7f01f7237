"""`ssh`: every node reachable and authenticated; host keys verified."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ddptui.checklist.base import Step, StepContext
from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.kb import kb_finding
from ddptui.diagnosis.model import NodeResult
from ddptui.transport.base import ConnectFailure, NodeTarget

# kind -> (finding id, summary tail); the text is in kb/checklist.yaml.
CATALOG: dict[str, tuple[str, str]] = {
    "auth": ("SSH-AUTH", "authentication refused"),
    "hostkey-unknown": ("SSH-HOSTKEY-UNKNOWN", "host key not known"),
    "hostkey-changed": ("SSH-HOSTKEY-CHANGED", "host key CHANGED"),
    "timeout": ("SSH-TIMEOUT", "no answer (timed out)"),
    "refused": ("SSH-REFUSED", "connection refused"),
    "noroute": ("SSH-NOROUTE", "no route to host"),
    "dns": ("SSH-DNS", "name does not resolve"),
    "disconnect": ("SSH-DISCONNECT", "connection closed by the node"),
    "other": ("SSH-ERROR", "SSH connection failed"),
    "slurm": ("SLURM-NODE-UNREACHABLE", "not reachable through Slurm (srun)"),
}


class SSHStep(Step):
    id = "ssh"
    title = "SSH reachability"
    needs_ssh = False

    async def check(
        self, ctx: StepContext, nodes: dict[str, NodeResult]
    ) -> tuple[list[Finding], dict[str, Any]]:
        findings: list[Finding] = []

        async def one(t: NodeTarget) -> None:
            started = time.monotonic()
            try:
                summary = await ctx.transports[t.name].connect()
            except ConnectFailure as exc:
                ctx.unreachable.add(t.name)
                fid, short = CATALOG[exc.kind]
                fill = _fill(t)
                findings.append(
                    kb_finding(
                        fid,
                        [t.name],
                        f"{t.name}: {short}",
                        [f"{t.name}: {exc.evidence or exc.message}"],
                        host=fill["host"],
                        user=fill["user"],
                        port=fill["port"],
                        login=fill["login"],
                    )
                )
                self.set_node(
                    ctx,
                    nodes,
                    t.name,
                    NodeResult(
                        "fail",
                        f"{short}: {exc.message}",
                        {"error": exc.kind},
                        time.monotonic() - started,
                    ),
                )
                return
            self.set_node(
                ctx,
                nodes,
                t.name,
                NodeResult(
                    "pass",
                    summary,
                    {"transport": ctx.transports[t.name].kind},
                    time.monotonic() - started,
                ),
            )

        await asyncio.gather(*(one(t) for t in ctx.targets))
        order = {t.name: i for i, t in enumerate(ctx.targets)}
        findings.sort(key=lambda f: order.get(f.nodes[0], 0))
        return findings, {}


def _fill(t: NodeTarget) -> dict[str, str]:
    port = str(t.port or 22)
    login = f"{t.user}@{t.host}" if t.user else t.host
    if t.port and t.port != 22:
        login = f"-p {t.port} {login}"
    return {"host": t.host, "user": t.user or "(your user)", "port": port, "login": login}
