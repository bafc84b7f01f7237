"""Addresses and interface selection as NCCL sees them. Core layer, stdlib only.

Split out of envaudit: pure functions over the interface records the probes
send (probes/_common.py interfaces()).
"""

from __future__ import annotations

import ipaddress
from typing import Any

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})

__all__ = [
    "LOOPBACK_NAMES",
    "_ip",
    "_is_up",
    "_nccl_addrs",
    "_routes_to_master",
    "_same_addr",
    "is_loopback",
    "nccl_ifname_match",
]


def _ip(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(value.strip().strip("[]"))
    except ValueError:
        return None


def is_loopback(addr: str) -> bool:
    """The one loopback test: 127.0.0.0/8, ::1 (a %zone is ignored), or a loopback name."""
    ip = _ip(addr.split("%", maxsplit=1)[0])
    return ip.is_loopback if ip is not None else addr.strip().lower() in LOOPBACK_NAMES


def _same_addr(a: str, b: str) -> bool | None:
    """True/False when decidable here; None for a name against an address (DNS decides)."""
    ia, ib = _ip(a), _ip(b)
    if ia is not None and ib is not None:
        return ia == ib
    if ia is None and ib is None:
        return a.strip().lower().rstrip(".") == b.strip().lower().rstrip(".")
    return None


def _is_up(iface: dict[str, Any]) -> bool:
    return bool(iface.get("up")) and str(iface.get("state", "")).lower() != "down"


def nccl_ifname_match(spec: str, names: list[str]) -> list[str] | None:
    """The names (in the order given) that NCCL_SOCKET_IFNAME=spec selects.

    None means NCCL ignores the value (length <= 1: `strlen(env) > 1` in
    socket.cc) and falls back to its default order, which keeps "ignored" apart
    from "matches nothing" ([]). A leading '^' excludes, then '=' means exact
    names, else prefixes; ':port' suffixes and empty items are dropped as
    parseStringList does. Nothing is trimmed: ' eth1' never matches eth1.
    """
    if len(spec) <= 1:
        return None
    exclude = spec.startswith("^")
    rest = spec[1:] if exclude else spec
    exact = rest.startswith("=")
    rest = rest[1:] if exact else rest
    items = [p for p in (item.split(":", 1)[0] for item in rest.split(",")) if p]

    def listed(name: str) -> bool:
        # An empty list matches everything (matchIfList), so "^=" matches nothing.
        return not items or any(name == i if exact else name.startswith(i) for i in items)

    return [n for n in names if listed(n) != exclude]


def _nccl_addrs(iface: dict[str, Any], family: str | None) -> list[dict[str, Any]]:
    """Addresses NCCL may bind on iface: IPv4/IPv6 (of NCCL_SOCKET_FAMILY if set), never ::1."""
    return [
        a
        for a in iface.get("addrs") or []
        if a.get("family") in ("inet", "inet6")
        and family in (None, a.get("family"))
        and not (a.get("family") == "inet6" and is_loopback(str(a.get("addr"))))
    ]


def _routes_to_master(route: dict[str, Any] | None, iface: dict[str, Any], master: str) -> bool:
    """Whether iface is how this node reaches the master, or sits on the master's subnet."""
    route, addrs, master_ip = route or {}, iface.get("addrs") or [], _ip(master)
    if route.get("dev") == iface.get("name") or any(
        route.get("src") and a.get("addr") == route.get("src") for a in addrs
    ):
        return True
    for a in addrs:
        try:
            net = ipaddress.ip_network(f"{a.get('addr')}/{a.get('prefixlen')}", strict=False)
        except ValueError:
            continue
        if master_ip is not None and master_ip.version == net.version and master_ip in net:
            return True
    return False
