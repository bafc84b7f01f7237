"""Env audit rules for interface selection: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME,
matched against each node's interfaces the way NCCL and gloo do."""

from __future__ import annotations

from typing import Any

from ddptui.diagnosis.envfacts import (
    EnvFacts,
    _ifaces_line,
    _Job,
    _kv,
    _make,
    _outliers,
    _per_node,
    _set,
    _where,
)
from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.netmatch import _is_up, _nccl_addrs, _routes_to_master, nccl_ifname_match

# --------------------------------------------------------------------------- NCCL_SOCKET_IFNAME


def _nccl_candidates(f: EnvFacts) -> list[dict[str, Any]]:
    """Interfaces in the order NCCL walks getifaddrs(): IPv4 entries first, then IPv6-only."""
    family = {"AF_INET": "inet", "AF_INET6": "inet6"}.get(f.env.get("NCCL_SOCKET_FAMILY", ""))
    v4 = [i for i in f.interfaces if any(a["family"] == "inet" for a in _nccl_addrs(i, family))]
    return v4 + [i for i in f.interfaces if i not in v4 and _nccl_addrs(i, family)]


def _suggest_iface(f: EnvFacts) -> str:
    """The interface to name in a fix: the route to the master, else the first usable non-lo."""
    dev = (f.route or {}).get("dev")
    usable = [
        str(i.get("name")) for i in _nccl_candidates(f) if _is_up(i) and i.get("kind") != "loopback"
    ]
    return dev if dev in usable else (usable[0] if usable else "<iface>")


def _pick_verdict(f: EnvFacts, pick: dict[str, Any], job: _Job) -> tuple[str, str] | None:
    """Judge the interface NCCL would bootstrap on."""
    name = pick.get("name")
    if not _is_up(pick):
        return "ENV-IFNAME-DOWN", f"makes NCCL use {name}, which is down"
    if pick.get("kind") == "loopback":
        loop = job.multi_host
        return ("ENV-IFNAME-LOOPBACK", f"makes NCCL use the loopback {name}") if loop else None
    if f.route is not None and not _routes_to_master(f.route, pick, job.master_addr):
        return "ENV-IFNAME-NOROUTE", (
            f"makes NCCL use {name}, but the master "
            f"{job.master_addr} is reached through {f.route.get('dev')}"
        )
    return None


def _ifname_verdict(f: EnvFacts, spec: str, job: _Job) -> tuple[str, str] | None:
    """(finding id, what is wrong) for one node's NCCL_SOCKET_IFNAME, or None when fine."""
    matched = nccl_ifname_match(spec, [str(i.get("name")) for i in f.interfaces])
    if matched is None:
        return "ENV-IFNAME-IGNORED", "is ignored by NCCL (one character)"
    if not matched:
        hint = " (NCCL does not trim spaces)" if " " in spec else ""
        if any(item[:1] in "^=" for item in spec.lstrip("^").lstrip("=").split(",")[1:]):
            hint = " ('^' and '=' apply to the whole list and only at its start)"
        return "ENV-IFNAME-NOMATCH", f"matches no interface{hint}"
    picks = [i for i in _nccl_candidates(f) if i.get("name") in matched]
    if not picks:
        return "ENV-IFNAME-DOWN", f"selects {', '.join(matched)}, none of which has an address"
    return _pick_verdict(f, picks[0], job)


def _route_line(f: EnvFacts, job: _Job) -> list[str]:
    """The node's route to the master, as evidence (it names the interface to use)."""
    if f.route is None:
        return []
    r = f.route
    return [
        f"{f.name}: route to {job.master_addr}: dev {r.get('dev')} "
        f"src {r.get('src')} via {r.get('via') or '-'}"
    ]


@_per_node
def _rule_ifname(f: EnvFacts, job: _Job) -> Finding | None:
    spec = _set(f, "NCCL_SOCKET_IFNAME")
    verdict = _ifname_verdict(f, spec, job) if spec is not None else None
    if verdict is None:
        return None
    ev = [f"{_kv(f, 'NCCL_SOCKET_IFNAME')}; {_ifaces_line(f)}", *_route_line(f, job)]
    return _make(
        verdict[0],
        [f.name],
        f"NCCL_SOCKET_IFNAME={spec} {verdict[1]}",
        ev,
        suggest=_suggest_iface(f),
        place=_where(f, "NCCL_SOCKET_IFNAME"),
        node=f.name,
    )


# --------------------------------------------------------------------------- GLOO_SOCKET_IFNAME


def _gloo_problems(f: EnvFacts, value: str) -> list[str]:
    problems = []
    if "^" in value or "=" in value:
        problems.append("uses NCCL syntax ('^'/'='); Gloo takes exact names only")
    by_name = {str(i.get("name")): i for i in f.interfaces}
    for name in value.replace("^", "").replace("=", "").split(","):
        iface = by_name.get(name)
        if iface is None:
            problems.append(f"no interface is named {name!r}")
        elif not iface.get("addrs"):
            problems.append(f"{name} has no address")
        elif not _is_up(iface):
            problems.append(f"{name} is down")
    return problems


@_per_node
def _rule_gloo_syntax(f: EnvFacts, job: _Job) -> Finding | None:
    value = _set(f, "GLOO_SOCKET_IFNAME")
    problems = _gloo_problems(f, value) if value is not None else []
    if not problems:
        return None
    return _make(
        "ENV-GLOO-SYNTAX",
        [f.name],
        f"GLOO_SOCKET_IFNAME={value}: {'; '.join(problems)}",
        [f"{_kv(f, 'GLOO_SOCKET_IFNAME')}; {_ifaces_line(f)}", *_route_line(f, job)],
        iface=str(value),
    )


def _rule_gloo_count(nodes: list[EnvFacts], job: _Job) -> list[Finding]:
    counts = {
        f.name: len(f.env["GLOO_SOCKET_IFNAME"].split(",")) if "GLOO_SOCKET_IFNAME" in f.env else 1
        for f in nodes
    }
    if len(set(counts.values())) <= 1:
        return []
    return [
        _make(
            "ENV-GLOO-COUNT",
            _outliers(counts),
            "GLOO_SOCKET_IFNAME lists a different number of interfaces than on other nodes",
            [f"{_kv(f, 'GLOO_SOCKET_IFNAME')} -> {counts[f.name]} device(s)" for f in nodes],
        )
    ]
