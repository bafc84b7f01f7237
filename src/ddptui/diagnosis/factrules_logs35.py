"""Readings added in round logs35 (issue 15, blind batch Z: repositories' notes and
troubleshooting docs).

noroute_on_subnet: NCCL could not connect to a peer's listener, "No route to host"
(EHOSTUNREACH), and the peer's address lies in the /24 of an address the log's own NCCL
bootstraps or talks sockets on.  The peer is on the network this rank sits on (no router
in between to lack a route) and it is alive (it published that listener through the
store), so the kernel's "no route" is an ICMP host-prohibited answer: a firewall's REJECT,
firewalld's default, on NCCL's ephemeral ports while the master port was opened
(PORT-PAIR-NOROUTE, as the port step calls the same edge).  An address off the rank's own
networks is not read (a wrong interface chosen is then as likely), nor IPv6.

Core layer, stdlib only."""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING, Final

from ddptui.diagnosis.factcontext import Context, Hit

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules

_PEER: Final = re.compile(r"\b[Cc]onnect to (?P<addr>\d{1,3}(?:\.\d{1,3}){3})<(?P<port>\d+)>")
_PREFIX: Final = 24  # NCCL states no netmask; a /24 is the narrowest common LAN


def _v4(addr: str) -> ipaddress.IPv4Address | None:
    try:
        return ipaddress.IPv4Address(addr)
    except ValueError:
        return None


def same_24(a: str, b: str) -> bool:
    """Two IPv4 addresses in one /24 (the narrowest common LAN: NCCL states no netmask)."""
    va, vb = _v4(a), _v4(b)
    return (
        va is not None
        and vb is not None
        and vb in ipaddress.IPv4Network(f"{va}/{_PREFIX}", strict=False)
    )


def noroute_on_subnet(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """NCCL's "No route to host" to a peer on the rank's own /24: a firewall's REJECT."""
    line = ctx.hints.get("noroute_peer")
    m = _PEER.search(line or "")
    peer = _v4(m["addr"]) if m is not None else None
    if line is None or m is None or peer is None:
        return None
    for p in ctx.procs:
        for _, iface, addr in p.interfaces:
            own = _v4(addr)
            if own is None or own == peer or not same_24(str(peer), addr):
                continue
            said = (
                f"NCCL on {iface} ({own}) got 'No route to host' connecting to {peer} port "
                f"{m['port']}, an address on its own network: a firewall rejects the "
                "connection (icmp-host-prohibited)"
            )
            if p.nccl_env.get("NCCL_SOCKET_IFNAME", "").lstrip("=") == iface:
                # gpu12: the interface was named by hand; a network that joins nothing (no
                # neighbour answers) says the same "no route" on the same /24
                said += (
                    f", or {iface}, which NCCL_SOCKET_IFNAME names, is not the network that "
                    "joins the hosts (no neighbour answers there)"
                )
            where = p.evidence.get("bootstrap") or p.evidence.get("socket")
            evidence = [line] + ([where] if where else [])
            fill = {"neigh": "not in the log", "culprits": str(peer)}
            return ([p.rank] if p.rank is not None else []), evidence, said, fill
    return None
