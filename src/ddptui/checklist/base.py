"""What a checklist step is, and what it gets to work with. Core layer."""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ddptui.checklist.facts import InventoryFacts, Route
from ddptui.config import ClusterConfig
from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.logstore import LogStore
from ddptui.diagnosis.model import NodeResult, StepResult, step_status
from ddptui.diagnosis.ranking import Topology
from ddptui.transport.base import ConnectFailure, NodeTarget, ProbeOutput, Transport

NodeCallback = Callable[[str, str, NodeResult], None]  # (step id, node name, result)


@dataclass
class StepContext:
    """Everything a step may use: the config, the nodes and their transports,
    what earlier steps found. Steps never touch asyncssh or the UI."""

    config: ClusterConfig
    targets: list[NodeTarget]
    transports: dict[str, Transport]
    salt: str
    results: dict[str, StepResult] = field(default_factory=dict)
    on_node: NodeCallback | None = None
    logs: LogStore = field(default_factory=LogStore)  # every streamed line, with its id
    unreachable: set[str] = field(default_factory=set)

    @property
    def reachable(self) -> list[NodeTarget]:
        return [t for t in self.targets if t.name not in self.unreachable]

    @property
    def master(self) -> NodeTarget:
        return self.targets[0]

    def inventory(self, node: str) -> InventoryFacts | None:
        """The node's inventory facts, typed; None when the inventory step has not
        run there (or could not)."""
        result = self.results.get("inventory")
        if result is None or node not in result.nodes or not result.nodes[node].data:
            return None
        return InventoryFacts.from_data(result.nodes[node].data)

    def topology(self) -> Topology:
        """Which configured nodes are one host (from the inventory's boot id and network
        namespace, else the config): ranking uses it to judge loopback findings."""
        rows = []
        for t in self.targets:
            inv = self.inventory(t.name)
            boot, netns = (inv.boot_id, inv.netns) if inv is not None else (None, None)
            rows.append((t.name, t.host, t.port, boot, netns))
        return Topology.from_nodes(rows)

    def route(self, node: str) -> Route | None:
        """How the node reaches MASTER_ADDR (the ping step), when known."""
        return Route.from_data(self.node_data("ping", node))

    def node_data(self, step: str, node: str) -> dict[str, Any]:
        result = self.results.get(step)
        if result is None or node not in result.nodes:
            return {}
        return result.nodes[node].data


class Step(ABC):
    """One checklist item. Subclasses set id/title and implement `check`."""

    id: ClassVar[str]
    title: ClassVar[str]
    needs_ssh: ClassVar[bool] = True

    async def run(self, ctx: StepContext) -> StepResult:
        started = time.monotonic()
        nodes: dict[str, NodeResult] = {}
        for t in ctx.targets:
            if self.needs_ssh and t.name in ctx.unreachable:
                nodes[t.name] = NodeResult("skip", "not reachable over SSH (see the ssh step)")
                self._report(ctx, t.name, nodes[t.name])
        findings, data = await self.check(ctx, nodes)
        for t in ctx.targets:
            if t.name not in nodes:
                nodes[t.name] = NodeResult("skip", "not checked")
        ordered = {t.name: nodes[t.name] for t in ctx.targets}
        return StepResult(
            id=self.id,
            title=self.title,
            status=step_status(ordered, tuple(findings)),
            duration_s=time.monotonic() - started,
            nodes=ordered,
            findings=tuple(findings),
            data=data,
        )

    @abstractmethod
    async def check(
        self, ctx: StepContext, nodes: dict[str, NodeResult]
    ) -> tuple[list[Finding], dict[str, Any]]:
        """Fill `nodes` (reporting each as it lands) and return (findings, step-level data)."""

    def _report(self, ctx: StepContext, node: str, result: NodeResult) -> None:
        if ctx.on_node is not None:
            ctx.on_node(self.id, node, result)

    def set_node(
        self, ctx: StepContext, nodes: dict[str, NodeResult], node: str, result: NodeResult
    ) -> None:
        nodes[node] = result
        self._report(ctx, node, result)

    def judge_nodes(
        self, ctx: StepContext, nodes: dict[str, NodeResult], findings: list[Finding]
    ) -> None:
        """After the cross-node rules: re-state the nodes that the findings name."""
        from ddptui.diagnosis.model import node_status_from

        for name, result in list(nodes.items()):
            if result.status in ("skip", "error"):
                continue
            status = node_status_from(findings, name)
            if status == result.status or (result.status == "fail" and status == "pass"):
                continue
            ids = ", ".join(
                dict.fromkeys(f.id for f in findings if name in f.nodes and f.severity != "info")
            )
            self.set_node(
                ctx,
                nodes,
                name,
                NodeResult(status, f"{result.summary} [{ids}]", result.data, result.duration_s),
            )

    def node_trouble(
        self,
        ctx: StepContext,
        nodes: dict[str, NodeResult],
        findings: list[Finding],
        node: str,
        out: ProbeOutput | ConnectFailure,
    ) -> None:
        """A node whose probe hung, vanished or answered garbage: a finding, and a fail."""
        trouble = trouble_finding(self.id, node, out)
        findings.append(trouble)
        self.set_node(ctx, nodes, node, NodeResult("fail", trouble.summary))

    async def gather_facts(
        self,
        ctx: StepContext,
        nodes: dict[str, NodeResult],
        findings: list[Finding],
        probe: str,
        params: Callable[[NodeTarget], dict[str, Any]],
        summarize: Callable[[dict[str, Any]], str],
        enrich: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, dict[str, Any]]:
        """Run `probe` everywhere; each node's record of that kind becomes its facts,
        reported live as it lands. Returns {node: facts} for the nodes that answered."""
        facts: dict[str, dict[str, Any]] = {}

        def landed(t: NodeTarget, out: ProbeOutput) -> None:
            rec = out.first(probe)
            if rec is None or not out.ok:
                self.node_trouble(ctx, nodes, findings, t.name, out)
                return
            data = {k: v for k, v in rec.items() if k not in ("v", "kind")}
            if enrich is not None:
                enrich(data)
            facts[t.name] = data
            self.set_node(
                ctx, nodes, t.name, NodeResult("pass", summarize(data), data, out.duration_s)
            )

        outs = await self.probe_all(ctx, probe, params, on_output=landed)
        for name, out in outs.items():
            if not isinstance(out, ProbeOutput):
                self.node_trouble(ctx, nodes, findings, name, out)
        return facts

    async def probe_all(
        self,
        ctx: StepContext,
        probe: str,
        params: Callable[[NodeTarget], dict[str, Any]],
        on_output: Callable[[NodeTarget, ProbeOutput], Awaitable[None] | None] | None = None,
        timeout: float | None = None,
    ) -> dict[str, ProbeOutput | ConnectFailure]:
        """Run `probe` on every reachable node at once, each bounded by the step timeout."""
        limit = timeout or ctx.config.timeouts.step

        async def one(t: NodeTarget) -> tuple[str, ProbeOutput | ConnectFailure]:
            try:
                out: ProbeOutput | ConnectFailure = await ctx.transports[t.name].run_probe(
                    probe, params(t), timeout=limit
                )
            except ConnectFailure as exc:
                out = exc
            if on_output is not None and isinstance(out, ProbeOutput):
                maybe = on_output(t, out)
                if maybe is not None:
                    await maybe
            return t.name, out

        pairs = await asyncio.gather(*(one(t) for t in ctx.reachable))
        return dict(pairs)


def probe_trouble(out: ProbeOutput | ConnectFailure) -> str | None:
    """Why a probe result cannot be judged (node vanished, timed out, garbage), or None."""
    if isinstance(out, ConnectFailure):
        return out.message
    problem = out.problem()
    if problem is None and not out.records:
        if out.garbage:
            return f"the node answered with unreadable output: {out.garbage[0][:120]!r}"
        return "the probe printed nothing"
    return problem


def trouble_finding(step: str, node: str, out: ProbeOutput | ConnectFailure) -> Finding:
    """A node that vanished, hung or answered garbage is a finding, never a crash."""
    from ddptui.diagnosis.kb import kb_finding

    problem = probe_trouble(out) or "unknown problem"
    evidence = []
    if isinstance(out, ProbeOutput):
        evidence = [ln for ln in out.stderr.strip().splitlines()[-5:] if ln]
        evidence += list(out.garbage[:3])
    if (isinstance(out, ProbeOutput) and out.lost) or (
        isinstance(out, ConnectFailure) and out.kind == "lost"
    ):
        return kb_finding(
            "NODE-LOST",
            [node],
            f"{node}: connection lost during the {step} step",
            evidence,
            node=node,
        )
    if isinstance(out, ProbeOutput):
        if out.timed_out:
            return kb_finding(
                "NODE-TIMEOUT", [node], f"{node}: the {step} probe hung", evidence, node=node
            )
        if out.exit_status == 127:
            return kb_finding(
                "NODE-NO-PYTHON", [node], f"{node}: the configured python was not found", evidence
            )
    return kb_finding(
        "NODE-PROBE-FAILED",
        [node],
        f"{node}: the {step} check could not run",
        evidence,
        step=step,
        problem=problem,
        node=node,
    )
