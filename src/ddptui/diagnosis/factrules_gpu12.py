"""Rules over a log's facts added in round 18: same_address, lost_midrun and socket_extra
from real captures on one lent H200 (tests/fixtures/gpu-h200/fail12/: two ranks in two
network namespaces, cross-host faults), peer_on_bridge from blind batch AM3 (NVIDIA/nccl#331).

same_address: NCCL prints the address it bootstraps on ("Bootstrap: Using br0:10.200.0.1<0>").
Two different hosts bootstrapping on one and the same address is never a working set-up: the
address is host-local (a bridge every host makes alike: libvirt's, a container runtime's, a
NAT'd network of cloned VMs), so a rank that connects to "its peer" there reaches its own host
(refused) or nothing at all.  The interface's name does not matter (a `br0` is as likely the
host's real uplink as not); the same address on two hosts does.  (Two containers of one
machine on its host network under different host names would share an address rightly; the
rule needs a failure to explain, so their healthy runs stay silent.)

lost_midrun: NCCL's socket connect failing with a network errno (unreachable, no route, timed
out) on a process whose communicator of two or more ranks had completed its init earlier in
the same log (Init COMPLETE: every connection of the bootstrap had worked), to a peer address
on the bootstrap's own network (a rank's bootstrap address, or the /24 of this process's):
the network these ranks used has gone away during the run (a link or a NIC down, a switch
port, a node that vanished), which no configuration change explains.  NCCL builds its data
channels lazily, after Init COMPLETE (gpu12c): a failure to reach a second NIC's address is
not a lost network but a NIC that never joined the hosts (socket_extra).  A
refused connection (a peer process gone) is not read.  The channels' transports are not
asked for: NCCL prints a line per channel, and passing those through the reader cost a 1 GB
log ten times its time.  Core layer, stdlib only."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from ddptui.diagnosis.evidence import parse_evidence
from ddptui.diagnosis.factcontext import Context, Hit
from ddptui.diagnosis.factrules_logs35 import same_24

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules

_PEER: Final = r"\[?(?P<addr>[0-9A-Fa-f:.]+?)\]?<(?P<port>\d+)>"  # NCCL's "addr<port>"
_CONNECT: Final = re.compile(
    rf"[Cc]onnect(?:ing)? to {_PEER} "
    r"(?:failed ?: ?|returned )(?P<why>Network is unreachable|No route to host|Connection timed out)"
)
_TARGET: Final = re.compile(rf"\b[Cc]onnect to {_PEER} (?:failed|returned)\b")


def _at(said: str) -> tuple[str, int] | None:
    """(source, line) of a "file:line: text" line (evidence.parse_evidence)."""
    q = parse_evidence(said)
    return (q.source, q.line) if q.source is not None and q.line is not None else None


def same_address(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """Two hosts bootstrap NCCL on the same (non-loopback) address."""
    by_addr: dict[str, dict[str, tuple[str, str]]] = {}
    for p in ctx.procs:
        if not p.host:
            continue
        for role, iface, addr in p.interfaces:
            if role != "bootstrap" or rules.is_of("loopback", iface, addr):
                continue
            said = p.evidence.get("bootstrap", f"{p.ident}: bootstrap {iface}:{addr}")
            by_addr.setdefault(addr, {}).setdefault(p.host, (iface, said))
    for addr, hosts in by_addr.items():
        if len(hosts) < 2:
            continue
        names = sorted(hosts)
        ifaces = ", ".join(dict.fromkeys(i for i, _ in hosts.values()))
        ranks = [p.rank for p in ctx.procs if p.host in hosts and p.rank is not None]
        said = f"hosts {', '.join(names[:4])} all bootstrap on {addr} ({ifaces})"
        fill = {"addr": addr, "iface": ifaces, "hosts": ", ".join(names[:4])}
        return sorted(set(ranks)), [hosts[h][1] for h in names[:2]], said, fill
    return None


def _boot_addrs(ctx: Context) -> set[str]:
    return {a for p in ctx.procs for role, _, a in p.interfaces if role == "bootstrap"}


def lost_midrun(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """A network connect failure after the same process's NCCL init had completed."""
    line = ctx.hints.get("net_gone")
    m = _CONNECT.search(line or "")
    at = _at(line or "")
    if line is None or m is None or at is None:
        return None
    boot = _boot_addrs(ctx)
    for p in ctx.procs:
        done = _at(p.evidence.get("complete", ""))
        if done is None or done[0] != at[0] or done[1] >= at[1]:
            continue
        if (p.world_size or 0) < 2:
            continue  # a communicator of one rank connects to no one
        own = [a for role, _, a in p.interfaces if role == "bootstrap"]
        if m["addr"] not in boot and not any(same_24(m["addr"], a) for a in own):
            # gpu12c: NCCL connects its data channels lazily, after Init COMPLETE; a peer
            # address off the bootstrap's network never worked (a second NIC, twonic)
            continue
        said = (
            f"{p.ident}'s NCCL completed its init (line {done[1]}), then its connection "
            f"to {m['addr']} failed with "
            f"'{m['why']}' (line {at[1]}): the network went away during the run"
        )
        fill = {"peer": m["addr"], "why": m["why"]}
        return ([p.rank] if p.rank is not None else []), [line, p.evidence["complete"]], said, fill
    return None


def peer_on_bridge(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """Round 18 (blind AM3, NVIDIA/nccl#331): from inside a container, NCCL fails to connect to
    an address of a virtual bridge's network (docker's default 172.17.0.0/16): the peer
    advertised its container address, which is reachable from its own host only.  The log
    need not hold the peer's Bootstrap line; the address it failed to reach says it.  Only
    where the log shows a container (a host named by a container id, docker's words): a LAN
    may use 172.17.x addresses too."""
    line, inside = ctx.hints.get("connect_failed"), ctx.hints.get("container")
    m = _TARGET.search(line or "")
    if line is None or inside is None or m is None or not rules.is_of("virtual", "", m["addr"]):
        return None
    said = (
        f"NCCL, inside a container, could not connect to {m['addr']} port {m['port']}, an "
        "address of docker's default bridge network: the peer advertised its container "
        "address, which other hosts cannot reach"
    )
    return [], [line, inside], said, {"iface": m["addr"]}


def socket_extra(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """gpu12c: NCCL's socket transport lists several interfaces (`NET/Socket : Using
    [0]eth0:... [1]eth1:...`, all that pass NCCL_SOCKET_IFNAME or its default filter); a
    connect failed to a peer's address on one of them that is not the interface NCCL
    bootstraps on, the one proven to join the hosts.  That NIC does not join them (a private
    or storage network, a bridge, a cable not plugged), and NCCL stripes its channels over
    every listed interface."""
    line = ctx.hints.get("net_gone") or ctx.hints.get("connect_failed")
    m = _TARGET.search(line or "")
    if line is None or m is None:
        return None
    for exact in (True, False):  # the address's owner first, else a process on its /24
        for q in ctx.procs:
            boot = {i for role, i, _ in q.interfaces if role == "bootstrap"}
            socks = [(i, a) for role, i, a in q.interfaces if role == "NET/Socket"]
            hit = next(
                (
                    i
                    for i, a in socks
                    if i not in boot and (a == m["addr"] if exact else same_24(a, m["addr"]))
                ),
                None,
            )
            if hit is None or not boot or len(socks) < 2:
                continue
            used = ", ".join(dict.fromkeys(i for i, _ in socks))
            via = ", ".join(sorted(boot))
            said = (
                f"NCCL's socket transport on {q.host or q.ident} uses {used}; the connection to "
                f"{m['addr']} ({hit}) failed while the bootstrap over {via} had worked: {hit} "
                "does not join the hosts"
            )
            fill = {"iface": hit, "boot": via, "used": used}
            ranks = [q.rank] if q.rank is not None else []
            return ranks, [line, q.evidence.get("socket", q.ident)], said, fill
    return None


def fell_back(ctx: Context, seen: list[str]) -> str:
    """gpu12b (linkinit): what to add where NCCL bootstraps on loopback `seen` by itself.
    Every process on it logged NCCL's INFO lines (its version) and no NCCL_SOCKET_IFNAME
    (NCCL prints the variable at INFO when it is set): NCCL takes lo only after every other
    interface, i.e. none other was up (eth0 had lost its carrier when the lazy init ran)."""
    procs = [
        p
        for p in ctx.procs
        if any(f"{i}:{a}" in seen for role, i, a in p.interfaces if role == "bootstrap")
    ]
    if procs and all(
        p.nccl_version is not None and "NCCL_SOCKET_IFNAME" not in p.nccl_env for p in procs
    ):
        return (
            "; NCCL_SOCKET_IFNAME is not set, and NCCL falls back to lo only when no other "
            "interface is up (a link down, a container started without a network)"
        )
    return ""
