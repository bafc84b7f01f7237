"""`ping`: MASTER_ADDR resolves to the same non-loopback address everywhere, and answers."""

from __future__ import annotations

from typing import Any

from ddptui.checklist.base import Step, StepContext
from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.kb import kb_finding
from ddptui.diagnosis.model import NodeResult
from ddptui.diagnosis.netmatch import is_loopback


class PingStep(Step):
    id = "ping"
    title = "MASTER_ADDR resolution and reachability"

    async def check(
        self, ctx: StepContext, nodes: dict[str, NodeResult]
    ) -> tuple[list[Finding], dict[str, Any]]:
        master = ctx.config.master
        findings: list[Finding] = []
        ssh_ports = sorted({ctx.master.port or 22})
        params = {"master_addr": master.addr, "tcp_ports": [*ssh_ports, master.port]}
        facts = await self.gather_facts(ctx, nodes, findings, "ping", lambda t: params, _summary)
        findings += judge(ctx, facts)
        self.judge_nodes(ctx, nodes, findings)
        return findings, {}


def _summary(d: dict[str, Any]) -> str:
    if not d.get("resolved"):
        return f"{d['master_addr']} does not resolve ({d.get('gai_error')})"
    addr = d["resolved"][0]
    route = d.get("route") or {}
    via = f" via {route.get('dev')}" if route.get("dev") else ""
    icmp = d.get("icmp") or {}
    if icmp.get("ok"):
        rtt = icmp.get("rtt_ms")
        answer = f"answers ping ({rtt:.2f} ms)" if rtt is not None else "answers ping"
    elif any(p["result"] in ("connected", "refused") for p in d.get("tcp", [])):
        answer = "no ICMP reply, but answers on TCP"
    else:
        answer = "does not answer"
    name = "" if addr == d["master_addr"] else f" -> {addr}"
    return f"{d['master_addr']}{name}{via}: {answer}"


def judge(ctx: StepContext, facts: dict[str, dict[str, Any]]) -> list[Finding]:
    """Cross-node rules: resolution, loopback, agreement, the master really is rank 0, reachability."""
    addr = ctx.config.master.addr
    out: list[Finding] = []
    unresolved = [n for n, d in facts.items() if not d.get("resolved")]
    if unresolved:
        out.append(
            kb_finding(
                "PING-GAI",
                unresolved,
                f"MASTER_ADDR {addr} does not resolve on {', '.join(unresolved)}",
                [f"{n}: {facts[n].get('gai_error')}" for n in unresolved],
                host=addr,
                msg=facts[unresolved[0]].get("gai_error"),
            )
        )
    loop = [n for n, d in facts.items() if d.get("resolved") and is_loopback(d["resolved"][0])]
    all_local = all(t.host == "local" for t in ctx.targets)  # one machine: loopback is right
    if loop and len(ctx.targets) > 1 and not all_local:
        out.append(
            kb_finding(
                "PING-LOOPBACK",
                loop,
                f"MASTER_ADDR {addr} resolves to loopback on {', '.join(loop)}",
                [
                    f"{n}: {addr} -> {facts[n]['resolved'][0]}"
                    + (
                        f" (/etc/hosts: {'; '.join(facts[n]['hosts_lines'])})"
                        if facts[n].get("hosts_lines")
                        else ""
                    )
                    for n in loop
                ],
            )
        )
    if all_local:
        loop = []
    good = {n: d["resolved"][0] for n, d in facts.items() if d.get("resolved") and n not in loop}
    if len(set(good.values())) > 1:
        master_view = good.get(ctx.master.name)
        odd = [n for n, a in good.items() if a != master_view] if master_view else list(good)
        out.append(
            kb_finding(
                "PING-MISMATCH",
                odd,
                f"MASTER_ADDR {addr} resolves to different addresses on different nodes",
                [f"{n}: {a}" for n, a in good.items()],
            )
        )
    m = facts.get(ctx.master.name)
    if m and m.get("resolved") and not loop:
        target = m["resolved"][0]
        if target not in m.get("local_addrs", []):
            out.append(
                kb_finding(
                    "PING-NOT-MASTER",
                    [ctx.master.name],
                    f"MASTER_ADDR {addr} ({target}) is not an address of the rank-0 node "
                    f"{ctx.master.name}",
                    [f"{ctx.master.name}: local addresses {', '.join(m.get('local_addrs', []))}"],
                    node=ctx.master.name,
                    addrs=", ".join(a for a in m.get("local_addrs", []) if not is_loopback(a)),
                )
            )
    dead: list[str] = []
    filtered: list[str] = []
    for n, d in facts.items():
        if not d.get("resolved") or n in loop:
            continue
        icmp = d.get("icmp") or {}
        if icmp.get("ok"):
            continue
        tcp_ok = any(p["result"] in ("connected", "refused") for p in d.get("tcp", []))
        (filtered if tcp_ok else dead).append(n)
    if dead:
        out.append(
            kb_finding(
                "PING-UNREACHABLE",
                dead,
                f"the master {addr} does not answer from {', '.join(dead)} (no ICMP, no TCP)",
                [
                    f"{n}: route {(facts[n].get('route') or {}).get('dev')}, ping: "
                    f"{(facts[n].get('icmp') or {}).get('detail')}; tcp: "
                    + ", ".join(f"{p['port']} {p['result']}" for p in facts[n].get("tcp", []))
                    for n in dead
                ],
            )
        )
    if filtered:
        out.append(
            kb_finding(
                "PING-ICMP-FILTERED",
                filtered,
                f"the master {addr} ignores ping from {', '.join(filtered)} but answers on TCP",
                [
                    f"{n}: "
                    + ", ".join(f"{p['port']} {p['result']}" for p in facts[n].get("tcp", []))
                    for n in filtered
                ],
            )
        )
    return out
