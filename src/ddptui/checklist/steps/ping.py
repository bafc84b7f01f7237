"""`ping`: MASTER_ADDR resolves to the same non-loopback address everywhere, and answers."""

from __future__ import annotations

import ipaddress
from typing import Any

from ddptui.checklist.base import Step, StepContext
from ddptui.diagnosis.model import Finding, NodeResult, finding


def is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr.split("%", maxsplit=1)[0]).is_loopback
    except ValueError:
        return False


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
            finding(
                "PING-GAI",
                "error",
                unresolved,
                f"MASTER_ADDR {addr} does not resolve on {', '.join(unresolved)}",
                "The name is not in DNS or /etc/hosts on these nodes; torch fails with "
                "'network addresses of (..) cannot be retrieved (gai error ..)'.",
                "Use the master's IP for `master.addr` (and MASTER_ADDR), or add it to /etc/hosts on "
                "every node.",
                [f"{n}: {facts[n].get('gai_error')}" for n in unresolved],
            )
        )
    loop = [n for n, d in facts.items() if d.get("resolved") and is_loopback(d["resolved"][0])]
    all_local = all(t.host == "local" for t in ctx.targets)  # one machine: loopback is right
    if loop and len(ctx.targets) > 1 and not all_local:
        out.append(
            finding(
                "PING-LOOPBACK",
                "error",
                loop,
                f"MASTER_ADDR {addr} resolves to loopback on {', '.join(loop)}",
                "These nodes map the master's name to 127.0.0.1/127.0.1.1 (Debian's /etc/hosts "
                "maps the own hostname to 127.0.1.1): their processes would connect to themselves "
                "instead of the master.",
                "Use the master's routable IP for MASTER_ADDR, or fix /etc/hosts on those nodes so "
                "the name maps to that IP.",
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
            finding(
                "PING-MISMATCH",
                "error",
                odd,
                f"MASTER_ADDR {addr} resolves to different addresses on different nodes",
                "Nodes disagree on where the master is (stale /etc/hosts, split DNS): some would "
                "connect to the wrong machine.",
                "Use an IP literal for MASTER_ADDR, or make DNS / /etc/hosts agree on every node.",
                [f"{n}: {a}" for n, a in good.items()],
            )
        )
    m = facts.get(ctx.master.name)
    if m and m.get("resolved") and not loop:
        target = m["resolved"][0]
        if target not in m.get("local_addrs", []):
            out.append(
                finding(
                    "PING-NOT-MASTER",
                    "error",
                    [ctx.master.name],
                    f"MASTER_ADDR {addr} ({target}) is not an address of the rank-0 node "
                    f"{ctx.master.name}",
                    "torchrun starts the rendezvous store on NODE_RANK 0 (the first node in the "
                    "config); MASTER_ADDR must be one of that node's addresses or every other rank "
                    "connects to a machine where no store runs.",
                    f"Set `master.addr` to one of {ctx.master.name}'s addresses "
                    f"({', '.join(a for a in m.get('local_addrs', []) if not is_loopback(a))}) or "
                    "put the master node first in `nodes:`.",
                    [f"{ctx.master.name}: local addresses {', '.join(m.get('local_addrs', []))}"],
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
            finding(
                "PING-UNREACHABLE",
                "error",
                dead,
                f"the master {addr} does not answer from {', '.join(dead)} (no ICMP, no TCP)",
                "No reply to ping and every TCP attempt timed out or found no route: a firewall "
                "drops traffic between these nodes and the master, or they are on networks that "
                "do not route to each other.",
                "Check `ip route get MASTER_ADDR` and the firewall (`iptables -S`, `nft list "
                "ruleset`, cloud security groups) on both ends; nodes must reach each other on all "
                "TCP ports.",
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
            finding(
                "PING-ICMP-FILTERED",
                "info",
                filtered,
                f"the master {addr} ignores ping from {', '.join(filtered)} but answers on TCP",
                "ICMP is filtered on the way; TCP gets through, which is what torch uses.",
                "Nothing to do for DDP; the port step tests the TCP paths that matter.",
                [
                    f"{n}: "
                    + ", ".join(f"{p['port']} {p['result']}" for p in facts[n].get("tcp", []))
                    for n in filtered
                ],
            )
        )
    return out
