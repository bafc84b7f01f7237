"""`port`: MASTER_PORT free on the master and reachable from every node; all-pairs TCP."""

from __future__ import annotations

import asyncio
from typing import Any

from ddptui.checklist.base import Step, StepContext, trouble_finding
from ddptui.diagnosis.model import Finding, NodeResult, finding, node_status_from
from ddptui.transport.base import ConnectFailure, NodeTarget, ProbeRun

CONNECT_TIMEOUT_S = 3.0
LISTEN_WAIT_S = 10.0

EDGE_CAUSES = {
    "timeout": (
        "TIMEOUT",
        "Connections time out: a firewall DROPs them (iptables/nftables on the target, a cloud "
        "security group, a switch ACL). torch would wait its full timeout (900 s for "
        "rendezvous) before failing.",
    ),
    "refused": (
        "REFUSED",
        "Connections are refused although a listener is up: a firewall REJECTs them with a TCP "
        "reset.",
    ),
    "noroute": (
        "NOROUTE",
        "No route to host: the address is on a network this node cannot reach, or a firewall "
        "answers with icmp-host-prohibited (firewalld's default REJECT).",
    ),
    "error": ("ERROR", "The connection failed with an unexpected socket error."),
}


class PortStep(Step):
    id = "port"
    title = "MASTER_PORT and all-pairs TCP"

    async def check(
        self, ctx: StepContext, nodes: dict[str, NodeResult]
    ) -> tuple[list[Finding], dict[str, Any]]:
        findings: list[Finding] = []
        per_node: dict[str, dict[str, Any]] = {t.name: {} for t in ctx.reachable}
        master_results = await self._master_port(ctx, findings, per_node)
        matrix = await self._matrix(ctx, findings, per_node)
        for t in ctx.reachable:
            if t.name in nodes:
                continue
            data = per_node[t.name]
            status = node_status_from(findings, t.name)
            self.set_node(ctx, nodes, t.name, NodeResult(status, _summary(ctx, data), data))
        return findings, {"master_port": master_results, "matrix": matrix}

    # -------------------------------------------------------------- MASTER_PORT

    async def _master_port(
        self, ctx: StepContext, findings: list[Finding], per_node: dict[str, dict[str, Any]]
    ) -> dict[str, str]:
        master, port = ctx.master, ctx.config.master.port
        if master.name in ctx.unreachable:
            return {}
        transport = ctx.transports[master.name]
        try:
            listener = await transport.start_probe(
                "port", {"mode": "listen", "addr": "0.0.0.0", "port": port}
            )
        except ConnectFailure as exc:
            findings.append(trouble_finding(self.id, master.name, exc))
            return {}
        try:
            first = await _first_of(listener, ("listening", "bind_failed"))
            if first is None:
                findings.append(trouble_finding(self.id, master.name, await listener.stop()))
                return {}
            if first["kind"] == "bind_failed":
                per_node[master.name]["bind"] = first
                findings.append(_bind_finding(master, port, first))
                return {}
            per_node[master.name]["bind"] = {"ok": True, "port": port}
            targets = [{"id": master.name, "addr": ctx.config.master.addr, "port": port}]
            outs = await self._connect_all(ctx, {t.name: targets for t in ctx.reachable})
        finally:
            await listener.stop()
        results: dict[str, str] = {}
        failed: dict[str, list[str]] = {}
        for name, recs in outs.items():
            if isinstance(recs, str):
                per_node[name]["master_port_error"] = recs
                continue
            for rec in recs:
                results[name] = rec["result"]
                per_node[name]["master_port"] = rec
                if rec["result"] != "connected":
                    failed.setdefault(rec["result"], []).append(name)
        addr = ctx.config.master.addr
        for result, names in failed.items():
            code, cause = EDGE_CAUSES.get(result, EDGE_CAUSES["error"])
            findings.append(
                finding(
                    f"PORT-{code}",
                    "error",
                    names,
                    f"MASTER_PORT {port} on {addr} is not reachable from {', '.join(names)} "
                    f"({_word(result)})",
                    cause + " ddptui had a listener up on the master during this test, so the "
                    "port itself was free.",
                    f"Open TCP {port} on {master.name} for the other nodes (e.g. `iptables -I INPUT "
                    f"-p tcp --dport {port} -j ACCEPT`, or your cloud security group), and allow all "
                    "TCP between the nodes: NCCL and gloo use ephemeral ports too.",
                    [
                        f"{n} -> {master.name}:{port}: {per_node[n]['master_port'].get('error')}"
                        for n in names
                    ],
                )
            )
        return results

    # -------------------------------------------------------------- all pairs

    async def _matrix(
        self, ctx: StepContext, findings: list[Finding], per_node: dict[str, dict[str, Any]]
    ) -> dict[str, dict[str, str]]:
        reachable = ctx.reachable
        if len(reachable) < 2:
            return {}
        listeners: dict[str, ProbeRun] = {}
        endpoints: dict[str, dict[str, Any]] = {}
        try:

            async def start(t: NodeTarget) -> None:
                try:
                    run = await ctx.transports[t.name].start_probe(
                        "port",
                        {
                            "mode": "listen",
                            "addr": "auto",
                            "port": 0,
                            "master_addr": ctx.config.master.addr,
                        },
                    )
                except ConnectFailure as exc:
                    per_node[t.name]["listen_error"] = exc.message
                    return
                listeners[t.name] = run
                rec = await _first_of(run, ("listening", "bind_failed"))
                if rec is not None and rec["kind"] == "listening":
                    endpoints[t.name] = rec
                    per_node[t.name]["listen"] = f"{rec['addr']}:{rec['port']}"
                else:
                    per_node[t.name]["listen_error"] = (rec or {}).get("error", "no listener")

            await asyncio.gather(*(start(t) for t in reachable))
            plan = {
                t.name: [
                    {"id": dst, "addr": ep["addr"], "port": ep["port"]}
                    for dst, ep in endpoints.items()
                    if dst != t.name
                ]
                for t in reachable
            }
            outs = await self._connect_all(ctx, plan)
        finally:
            await asyncio.gather(*(r.stop() for r in listeners.values()), return_exceptions=True)
        matrix: dict[str, dict[str, str]] = {}
        bad: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
        for src, recs in outs.items():
            if isinstance(recs, str):
                continue
            for rec in recs:
                matrix.setdefault(src, {})[rec["id"]] = rec["result"]
                if rec["result"] != "connected":
                    bad.setdefault(rec["result"], []).append((src, rec["id"], rec))
        for result, edges in bad.items():
            code, cause = EDGE_CAUSES.get(result, EDGE_CAUSES["error"])
            culprits = _culprits(edges, matrix)
            names = ", ".join(f"{s} -> {d}:{r['port']}" for s, d, r in edges[:6])
            more = f" and {len(edges) - 6} more" if len(edges) > 6 else ""
            findings.append(
                finding(
                    f"PORT-PAIR-{code}",
                    "error",
                    culprits,
                    f"node-to-node TCP fails ({_word(result)}): {names}{more}",
                    cause + " NCCL and gloo connect every rank to every other rank on ephemeral "
                    "ports, so one blocked pair stalls the whole job at init.",
                    f"Allow all TCP between the cluster nodes on {', '.join(culprits)} (e.g. "
                    "`iptables -I INPUT -s <cluster subnet> -j ACCEPT`), or narrow NCCL's ports "
                    "(`net.ipv4.ip_local_port_range`) and open that range.",
                    [
                        f"{s} -> {d} ({r['addr']}:{r['port']}): {r.get('error') or r['result']}"
                        for s, d, r in edges
                    ],
                )
            )
        for name, row in matrix.items():
            per_node[name]["matrix"] = row
        return matrix

    async def _connect_all(
        self, ctx: StepContext, plan: dict[str, list[dict[str, Any]]]
    ) -> dict[str, list[dict[str, Any]] | str]:
        """Each node connects to its targets; {node: connect records | why it could not}."""
        outs = await self.probe_all(
            ctx,
            "port",
            lambda t: {
                "mode": "connect",
                "targets": plan.get(t.name, []),
                "timeout": CONNECT_TIMEOUT_S,
            },
        )
        result: dict[str, list[dict[str, Any]] | str] = {}
        for name, out in outs.items():
            if isinstance(out, ConnectFailure) or not out.ok:
                result[name] = (
                    out.message if isinstance(out, ConnectFailure) else out.problem() or "no output"
                )
            else:
                result[name] = out.all("connect")
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
    if rec.get("errno") == 98:
        states = rec.get("states") or {}
        if not owners and "LISTEN" not in states:
            return finding(
                "PORT-INUSE",
                "error",
                [master.name],
                f"MASTER_PORT {port} on {master.name} cannot be bound, though nothing listens "
                "on it",
                "Connections of an earlier run linger on the port (state: "
                + ", ".join(f"{k} x{v}" for k, v in states.items())
                + ") and the program that owned them did not set SO_REUSEADDR; the kernel "
                "keeps them for up to 60 s.",
                "Wait a minute and run again, or use another `master.port`.",
                [f"{master.name}: bind 0.0.0.0:{port}: {rec.get('error')}"],
            )
        kill = (
            f"`kill {owners[0]['pid']}` on {master.name}"
            if owners
            else (f"find it with `ss -ltnp 'sport = :{port}'` on {master.name} and stop it")
        )
        return finding(
            "PORT-INUSE",
            "error",
            [master.name],
            f"MASTER_PORT {port} is already in use on {master.name}"
            + (f" by {who}" if who else ""),
            "Another process (a stale or concurrent torchrun, a previous job) holds the port: "
            "torch fails with EADDRINUSE on the master, and the other nodes connect to the "
            "foreign listener and hang forever.",
            f"Stop the process holding it ({kill}) or pick another port (`master.port` and "
            "MASTER_PORT).",
            [f"{master.name}: bind 0.0.0.0:{port}: {rec.get('error')}"]
            + [
                f"{master.name}: listener {o.get('comm')} pid {o.get('pid')} uid {o.get('uid')}"
                for o in owners
            ],
        )
    return finding(
        "PORT-BIND",
        "error",
        [master.name],
        f"cannot listen on MASTER_PORT {port} on {master.name}: {rec.get('error')}",
        "The master cannot bind the port (ports below 1024 need root; an address not on the "
        "node cannot be bound).",
        "Choose a port >= 1024 that is free on the master.",
        [f"{master.name}: bind 0.0.0.0:{port}: {rec.get('error')}"],
    )


def _culprits(
    edges: list[tuple[str, str, dict[str, Any]]], matrix: dict[str, dict[str, str]]
) -> list[str]:
    """Nodes to blame: those whose every inbound (or outbound) edge failed; else all ends."""
    failed = {(s, d) for s, d, _ in edges}
    nodes = sorted({s for s, _, _ in edges} | {d for _, d, _ in edges})
    blamed = []
    for n in nodes:
        inbound = [(s, d) for s, row in matrix.items() for d in row if d == n]
        outbound = [(n, d) for d in matrix.get(n, {})]
        if (inbound and all(e in failed for e in inbound)) or (
            outbound and all(e in failed for e in outbound)
        ):
            blamed.append(n)
    return blamed or nodes


def _word(result: str) -> str:
    return {
        "timeout": "timed out: filtered",
        "refused": "refused",
        "noroute": "no route to host",
    }.get(result, result)


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
