"""`port`: MASTER_PORT free on the master and reachable from every node; all-pairs TCP,
paced (checklist/pairs.py), each failed edge retried once and told apart from neighbour
(ARP) trouble (checklist/port_edges.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any, Final

from ddptui.checklist import pairs
from ddptui.checklist.base import Step, StepContext, trouble_finding
from ddptui.checklist.port_edges import (
    Edge,
    NeighFacts,
    capacity_finding,
    master_findings,
    neighbour_findings,
    pair_findings,
    retried_finding,
)
from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.kb import kb_finding
from ddptui.diagnosis.model import NodeResult, node_status_from
from ddptui.transport.base import ConnectFailure, NodeTarget, ProbeRun

CONNECT_TIMEOUT_S: Final = 3.0
LISTEN_WAIT_S: Final = 10.0
SLOT_S: Final = 0.05  # between rounds of the paced matrix
# The probes start on every node at one wall-clock instant (clocks in sync, as NTP keeps
# them), so rounds line up: this long after the plan is made, to cover the SSH fan-out.
START_LEAD_S: Final = 0.3
START_LEAD_PER_NODE_S: Final = 0.01
START_LEAD_MAX_S: Final = 3.0
MAX_INFLIGHT: Final = 64  # open connects per node (slow, filtered ones included)

ConnectOut = tuple[list[dict[str, Any]], NeighFacts] | str


class PortStep(Step):
    id = "port"
    title = "MASTER_PORT and all-pairs TCP"

    async def check(
        self, ctx: StepContext, nodes: dict[str, NodeResult]
    ) -> tuple[list[Finding], dict[str, Any]]:
        """All listeners at once (MASTER_PORT on the master, an ephemeral port on every
        node), then one paced connect pass per node: MASTER_PORT first, then its peers."""
        findings: list[Finding] = []
        per_node: dict[str, dict[str, Any]] = {t.name: {} for t in ctx.reachable}
        listeners: list[ProbeRun] = []
        try:
            master_ok, endpoints = await asyncio.gather(
                self._master_listener(ctx, findings, per_node, listeners),
                self._peer_listeners(ctx, per_node, listeners),
            )
            plan, targets = self._targets(ctx, endpoints, master_ok)
            outs = await self._connect_all(ctx, targets) if any(targets.values()) else {}
        finally:
            await asyncio.gather(*(r.stop() for r in listeners), return_exceptions=True)
        master_results, matrix = self._judge(ctx, outs, findings, per_node)
        for t in ctx.reachable:
            if t.name in nodes:
                continue
            data = per_node[t.name]
            status = node_status_from(findings, t.name)
            self.set_node(ctx, nodes, t.name, NodeResult(status, _summary(ctx, data), data))
        schedule = {
            "rounds": plan.rounds,
            "per_round": plan.width,
            "waves": plan.waves,
            "slot_s": SLOT_S,
            "offsets": len(plan.offsets),
            "full_mesh": len(plan.offsets) == plan.n - 1,
        }
        return findings, {"master_port": master_results, "matrix": matrix, "schedule": schedule}

    async def _master_listener(
        self,
        ctx: StepContext,
        findings: list[Finding],
        per_node: dict[str, dict[str, Any]],
        listeners: list[ProbeRun],
    ) -> bool:
        """Bind MASTER_PORT on the master (a finding if it cannot); True when it listens."""
        master, port = ctx.master, ctx.config.master.port
        if master.name in ctx.unreachable:
            return False
        try:
            run = await ctx.transports[master.name].start_probe(
                "port", {"mode": "listen", "addr": "0.0.0.0", "port": port}
            )
        except ConnectFailure as exc:
            findings.append(trouble_finding(self.id, master.name, exc))
            return False
        listeners.append(run)
        first = await _first_of(run, ("listening", "bind_failed"))
        if first is None:
            findings.append(trouble_finding(self.id, master.name, await run.stop()))
            return False
        if first["kind"] == "bind_failed":
            per_node[master.name]["bind"] = first
            findings.append(_bind_finding(master, port, first))
            return False
        per_node[master.name]["bind"] = {"ok": True, "port": port}
        return True

    async def _peer_listeners(
        self,
        ctx: StepContext,
        per_node: dict[str, dict[str, Any]],
        listeners: list[ProbeRun],
    ) -> dict[str, dict[str, Any]]:
        """An ephemeral listener on every node, on the address it would advertise."""
        endpoints: dict[str, dict[str, Any]] = {}
        if len(ctx.reachable) < 2:
            return endpoints

        async def start(t: NodeTarget) -> None:
            params = {"mode": "listen", "addr": "auto", "port": 0}
            try:
                run = await ctx.transports[t.name].start_probe(
                    "port", params | {"master_addr": ctx.config.master.addr}
                )
            except ConnectFailure as exc:
                per_node[t.name]["listen_error"] = exc.message
                return
            listeners.append(run)
            rec = await _first_of(run, ("listening", "bind_failed"))
            if rec is not None and rec["kind"] == "listening":
                endpoints[t.name] = rec
                per_node[t.name]["listen"] = f"{rec['addr']}:{rec['port']}"
            else:
                per_node[t.name]["listen_error"] = (rec or {}).get("error", "no listener")

        await asyncio.gather(*(start(t) for t in ctx.reachable))
        return endpoints

    def _targets(
        self, ctx: StepContext, endpoints: Mapping[str, Mapping[str, Any]], master_ok: bool
    ) -> tuple[pairs.Plan, dict[str, list[dict[str, Any]]]]:
        """Each node's connects with their round: MASTER_PORT in round 0, then its peers
        in the paced plan's rounds (shifted by one)."""
        names = [t.name for t in ctx.reachable]
        plan = pairs.plan(max(1, len(names)), seed=int(time.time()))
        master = {
            "id": ctx.master.name,
            "addr": ctx.config.master.addr,
            "port": ctx.config.master.port,
            "round": 0,
            "what": "master",
        }
        targets: dict[str, list[dict[str, Any]]] = {}
        for i, src in enumerate(names):
            targets[src] = [master] if master_ok else []
            targets[src] += [
                {
                    "id": names[j],
                    "addr": endpoints[names[j]]["addr"],
                    "port": endpoints[names[j]]["port"],
                    "round": r + 1,
                    "what": "pair",
                }
                for r, j in plan.node_targets(i)
                if names[j] in endpoints
            ]
        return plan, targets

    def _judge(
        self,
        ctx: StepContext,
        outs: Mapping[str, ConnectOut],
        findings: list[Finding],
        per_node: dict[str, dict[str, Any]],
    ) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
        """Findings from the connect records: neighbour trouble first, then firewalls."""
        master = ctx.master.name
        master_results: dict[str, str] = {}
        matrix: dict[str, dict[str, str]] = {}
        failed: list[Edge] = []
        retried: list[Edge] = []
        facts: dict[str, NeighFacts] = {}
        for src, out in outs.items():
            if isinstance(out, str):
                per_node[src]["connect_error"] = out
                continue
            recs, facts[src] = out
            for rec in recs:
                if rec.get("what") == "master":
                    master_results[src] = rec["result"]
                    per_node[src]["master_port"] = rec
                else:
                    matrix.setdefault(src, {})[rec["id"]] = rec["result"]
                edge = Edge(src, rec["id"], rec)
                if rec["result"] != "connected":
                    failed.append(edge)
                elif rec.get("attempts") == 2:
                    retried.append(edge)
        lost, resolved = neighbour_findings(failed, facts, len(ctx.targets))
        findings += lost
        to_master = [e for e in resolved if e.rec.get("what") == "master"]
        port = ctx.config.master.port
        findings += master_findings(to_master, master, ctx.config.master.addr, port)
        findings += pair_findings([e for e in resolved if e not in to_master], matrix)
        extra = [capacity_finding(facts, len(ctx.targets)), retried_finding(retried)]
        findings += [f for f in extra if f is not None]
        for name, row in matrix.items():
            per_node[name]["matrix"] = row
        return master_results, matrix

    async def _connect_all(
        self, ctx: StepContext, targets: dict[str, list[dict[str, Any]]]
    ) -> dict[str, ConnectOut]:
        """Each node connects to its targets; {node: (connect records, neighbour facts) |
        why it could not}.  Round r starts r * SLOT_S after one instant on every node."""
        n = len(ctx.reachable)
        lead = min(START_LEAD_MAX_S, START_LEAD_S + START_LEAD_PER_NODE_S * n)
        start_at = time.time() + lead
        outs = await self.probe_all(
            ctx,
            "port",
            lambda t: {
                "mode": "connect",
                "targets": targets.get(t.name, []),
                "timeout": CONNECT_TIMEOUT_S,
                "slot": SLOT_S,
                "start_at": start_at,
                "max_inflight": MAX_INFLIGHT,
                "retry": True,
            },
        )
        result: dict[str, ConnectOut] = {}
        for name, out in outs.items():
            if isinstance(out, ConnectFailure) or not out.ok:
                result[name] = (
                    out.message if isinstance(out, ConnectFailure) else out.problem() or "no output"
                )
            else:
                result[name] = (out.all("connect"), NeighFacts.from_record(out.first("neigh")))
        return result


async def _first_of(run: ProbeRun, kinds: tuple[str, ...]) -> dict[str, Any] | None:
    try:
        while True:
            rec = await run.next_record(timeout=LISTEN_WAIT_S)
            if rec is None or rec.get("kind") in kinds:
                return rec
    except asyncio.TimeoutError:
        return None


def _bind_finding(master: NodeTarget, port: int, rec: dict[str, Any]) -> Finding:
    owners = rec.get("owners") or []
    who = ", ".join(f"{o.get('comm')} (pid {o.get('pid')})" for o in owners)
    evidence = [f"{master.name}: bind 0.0.0.0:{port}: {rec.get('error')}"]
    if rec.get("errno") == 98:
        states = rec.get("states") or {}
        if not owners and "LISTEN" not in states:
            return kb_finding(
                "PORT-MASTER-LINGER",
                [master.name],
                f"MASTER_PORT {port} on {master.name} cannot be bound, though nothing listens "
                "on it",
                evidence,
                states=", ".join(f"{k} x{v}" for k, v in states.items()),
            )
        stop = (
            f"`kill {owners[0]['pid']}` on {master.name}"
            if owners
            else f"find it with `ss -ltnp 'sport = :{port}'` on {master.name} and stop it"
        )
        return kb_finding(
            "PORT-MASTER-INUSE",
            [master.name],
            f"MASTER_PORT {port} is already in use on {master.name}"
            + (f" by {who}" if who else ""),
            evidence
            + [
                f"{master.name}: listener {o.get('comm')} pid {o.get('pid')} uid {o.get('uid')}"
                for o in owners
            ],
            stop=stop,
        )
    return kb_finding(
        "PORT-BIND",
        [master.name],
        f"cannot listen on MASTER_PORT {port} on {master.name}: {rec.get('error')}",
        evidence,
    )


def _summary(ctx: StepContext, d: dict[str, Any]) -> str:
    parts = []
    mp = d.get("master_port")
    if mp:
        parts.append(f"MASTER_PORT {mp['result']} ({mp['ms']:.0f} ms)")
    bind = d.get("bind")
    if bind and not bind.get("ok"):
        parts.append(f"cannot bind {ctx.config.master.port}: {bind.get('error')}")
    elif bind:
        parts.append(f"bound {ctx.config.master.port}")
    row = d.get("matrix") or {}
    if row:
        ok = sum(1 for r in row.values() if r == "connected")
        parts.append(f"peers {ok}/{len(row)} reachable")
    if d.get("listen_error"):
        parts.append(f"listener: {d['listen_error']}")
    return ", ".join(parts) or "no result"
