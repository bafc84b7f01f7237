"""Launch-environment audit across nodes: pure rules over what the env probe saw.

Core layer: stdlib and ddptui.diagnosis.model only. Values arrive already
redacted on the node ("<redacted:HASH>", probes/env.py); they are compared as
opaque strings and shown only in that form. Rules follow
reference/failure-signatures.md section 4 and its ENV-* / BOOT-* entries.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ddptui.diagnosis.model import Finding, Severity, finding

GIB = 1024**3
REDACTED_PREFIX = "<redacted:"
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
SOURCE_WORDS = {"login": "login env", "config": "config env", "node": "node env"}

# NCCL_* that may legitimately differ per node: interface selectors and debug output.
NCCL_PER_NODE = frozenset(
    {"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"}
)
# A mismatch in these breaks the job: protocol/algorithm/buffer mismatches give
# "Message truncated"; transport and RoCE settings must agree between peers.
# NCCL_P2P_DISABLE only governs GPUs inside one node, so a difference is a warning.
NCCL_MUST_MATCH = frozenset({
    "NCCL_PROTO", "NCCL_ALGO", "NCCL_IB_DISABLE", "NCCL_NET", "NCCL_NET_PLUGIN",
    "NCCL_IB_GID_INDEX", "NCCL_IB_ROCE_VERSION_NUM", "NCCL_IB_TC", "NCCL_IB_SL", "NCCL_BUFFSIZE",
})
# Old name -> the name PyTorch prefers (ProcessGroupNCCL.hpp); if both are set TORCH_ wins.
DEPRECATED = {
    old: "TORCH_" + old
    for old in ("NCCL_ASYNC_ERROR_HANDLING", "NCCL_BLOCKING_WAIT", "NCCL_DESYNC_DEBUG",
                "NCCL_ENABLE_TIMING", "NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK")
}
TORCH_SHOULD_MATCH = ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_BLOCKING_WAIT")
# Values that differ per node by nature; callers of env_diff may pass this as `ignore`.
EXPECTED_TO_DIFFER = frozenset({
    "HOSTNAME", "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "XDG_SESSION_ID", "PWD", "OLDPWD",
    "SHLVL", "_", "NODE_RANK", "GROUP_RANK", "RANK", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES",
    "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA",
})
PET_VARS = ("PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT",
            "PET_NPROC_PER_NODE")

# Each finding id's default severity and cause: the knowledge, kept as data.
KB: dict[str, tuple[Severity, str]] = {
    "ENV-MASTER-MISMATCH": ("error", "Every rank must reach the one store at MASTER_ADDR:"
        "MASTER_PORT. torchrun overwrites both for its workers, but manual env:// launches and "
        "wrappers passing $MASTER_ADDR/$MASTER_PORT to torchrun use this value."),
    "ENV-MASTER-LOOPBACK": ("error", "On more than one node a loopback MASTER_ADDR makes each "
        "node look for the store on itself (PING-LOOPBACK); workers time out waiting for rank 0."),
    "ENV-DUPRANK": ("error", "NODE_RANK/GROUP_RANK must be unique per node (0..nnodes-1, config "
        "order), RANK a permutation of 0..WORLD_SIZE-1; a duplicate claims a rank twice ('rank N "
        "of M ranks has already checked in') and the store waits forever."),
    "ENV-WORLDSIZE": ("error", "Every process must agree on WORLD_SIZE, else NCCL reports "
        "'mismatch in rank count' / 'mismatch in info from procs' or the store waits forever."),
    "ENV-IFNAME-NOMATCH": ("error", "NCCL fails at bootstrap: 'Bootstrap : no socket interface "
        "found' (BOOT-NOIF; 2.27 prints '... is neither AF_INET(2) nor AF_INET6(10)'). A typo, a "
        "name that differs between nodes (eth0 vs ens5), or a container without the host NIC."),
    "ENV-IFNAME-DOWN": ("error", "NCCL binds to the first matching interface that has an "
        "address without checking that it is up; with no address at all it fails as BOOT-NOIF."),
    "ENV-IFNAME-LOOPBACK": ("error", "NCCL advertises 127.0.0.1 to its peers; ranks on other "
        "nodes then connect to themselves and bootstrap times out."),
    "ENV-IFNAME-NOROUTE": ("warning", "NCCL advertises an address on a network the other nodes "
        "may not reach (BOOT-WRONGIF); bootstrap then hangs or is refused."),
    "ENV-IFNAME-IGNORED": ("warning", "NCCL reads NCCL_SOCKET_IFNAME only when it is longer than "
        "one character and otherwise picks an interface itself (ib*, then not docker/lo/virbr)."),
    "ENV-GLOO-SYNTAX": ("error", "Gloo matches each comma-separated name exactly (no '^', no "
        "prefixes) and needs an address on it, else 'Unable to find address for: <iface>'."),
    "ENV-GLOO-COUNT": ("warning", "PyTorch requires every process to list the same number of "
        "Gloo interfaces (one Gloo device each); unset counts as one."),
    "ENV-NCCL-DIFF": ("warning", "NCCL settings should be identical on every rank; a mismatch "
        "changes behaviour between peers."),
    "ENV-DEPRECATED": ("warning", "PyTorch still reads the old name but warns 'Environment "
        "variable NCCL_... is deprecated; use TORCH_NCCL_... instead'; the TORCH_ name wins."),
    "BOOT-COMMID": ("warning", "PyTorch passes NCCL's unique id through its store and never "
        "needs NCCL_COMM_ID; a leftover value makes NCCL look for an interface in that subnet or "
        "fail with 'No usable listening interface found' / 'Invalid NCCL_COMM_ID'."),
    "ENV-ORDINAL": ("error", "Each local rank calls torch.cuda.set_device(LOCAL_RANK); a rank "
        "beyond the visible devices fails with 'CUDA error: invalid device ordinal'."),
    "SHM-SIZE": ("warning", "NCCL keeps intra-node buffers in /dev/shm; a small one (docker's "
        "default is 64 MB) fails with 'failed to extend /dev/shm/nccl-...' or SIGBUS."),
    "ENV-PET-OVERRIDE": ("warning", "torchrun reads PET_<FLAG> as the default of --<flag>: any "
        "torchrun started on this node without that flag uses it."),
}


def _make(id_: str, nodes: Iterable[str], summary: str, fix: str, evidence: Iterable[str],
          *, more: str = "", severity: Severity | None = None) -> Finding:
    sev, cause = KB[id_]
    return finding(id_, severity or sev, list(nodes), summary,
                   f"{cause} {more}".strip(), fix, list(evidence))


@dataclass(frozen=True)
class EnvFacts:
    """What the env probe (and the inventory step) saw on one node."""

    name: str
    rank: int
    env: dict[str, str]
    sources: dict[str, str]
    interfaces: list[dict[str, Any]]
    route: dict[str, Any] | None
    shm_bytes: int | None
    gpu_count: int | None

    @classmethod
    def from_records(cls, name: str, rank: int, env_record: dict[str, Any],
                     net_record: dict[str, Any], gpu_count: int | None = None) -> EnvFacts:
        """Build from the env probe's "env" and "net" records."""
        return cls(
            name=name, rank=rank,
            env={str(k): str(v) for k, v in (env_record.get("env") or {}).items()},
            sources={str(k): str(v) for k, v in (env_record.get("sources") or {}).items()},
            interfaces=list(net_record.get("interfaces") or []), route=net_record.get("route"),
            shm_bytes=net_record.get("shm_bytes"), gpu_count=gpu_count,
        )


@dataclass(frozen=True)
class _Job:
    """The launch every node is checked against (from the config)."""

    master_addr: str
    master_port: int
    nproc: int | str
    nnodes: int

    @property
    def world(self) -> int | None:
        return self.nnodes * self.nproc if isinstance(self.nproc, int) else None


Rule = Callable[[list[EnvFacts], _Job], list[Finding]]


# --------------------------------------------------------------------------- small helpers


def _set(f: EnvFacts, var: str) -> str | None:
    """The value when set and comparable (not redacted)."""
    value = f.env.get(var)
    return None if value is None or value.startswith(REDACTED_PREFIX) else value


def _per_node(check: Callable[[EnvFacts, _Job], Finding | None]) -> Rule:
    """A rule that judges each node on its own."""
    return lambda nodes, job: [x for f in nodes if (x := check(f, job)) is not None]


def _kv(f: EnvFacts, var: str) -> str:
    if var not in f.env:
        return f"{f.name}: {var} unset"
    return f"{f.name}: {var}={f.env[var]} (from {SOURCE_WORDS.get(f.sources.get(var, ''), '?')})"


def _ifaces_line(f: EnvFacts) -> str:
    """'interfaces: lo(up,127.0.0.1), eth1(down,no address)'."""
    parts = [f"{i.get('name')}({','.join(['up' if _is_up(i) else 'down', *addrs])})"
             for i in f.interfaces
             for addrs in [[str(a.get("addr")) for a in i.get("addrs") or []] or ["no address"]]]
    return "interfaces: " + (", ".join(parts) or "none reported")


def _names(nodes: Iterable[str]) -> str:
    n = list(nodes)
    return ", ".join(n) if len(n) <= 4 else f"{', '.join(n[:3])} and {len(n) - 3} more"


def _where(f: EnvFacts, var: str) -> str:
    """Where a person changes var for this node, given where its value came from."""
    source = f.sources.get(var)
    if source == "node":
        return f"under {f.name}'s `env:` in the config"
    if source == "config":
        return "under the top-level `env:` in the config (it applies to every node)"
    return (f"in {f.name}'s login environment (~/.bashrc above its interactive guard, "
            f"~/.profile, /etc/environment), or override it under {f.name}'s `env:`")


def _outliers(values: Mapping[str, object]) -> list[str]:
    """Nodes not holding the most common value; every node when there is no clear majority."""
    counts = Counter(values.values()).most_common()
    if len(counts) > 1 and counts[0][1] > counts[1][1]:
        return [n for n, v in values.items() if v != counts[0][0]]
    return list(values)


def _by(nodes: list[EnvFacts], name: str) -> EnvFacts:
    return next(f for f in nodes if f.name == name)


def _int(value: str) -> int | None:
    try:
        return int(value.strip())
    except ValueError:
        return None


def _ip(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(value.strip().strip("[]"))
    except ValueError:
        return None


def _is_loopback(addr: str) -> bool:
    ip = _ip(addr)
    return ip.is_loopback if ip is not None else addr.strip().lower() in LOOPBACK_NAMES


def _same_addr(a: str, b: str) -> bool | None:
    """True/False when decidable here; None for a name against an address (DNS decides)."""
    ia, ib = _ip(a), _ip(b)
    if ia is not None and ib is not None:
        return ia == ib
    if ia is None and ib is None:
        return a.strip().lower().rstrip(".") == b.strip().lower().rstrip(".")
    return None


# --------------------------------------------------------------------------- NCCL interface choice


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
    out = []
    for a in iface.get("addrs") or []:
        fam, ip = a.get("family"), _ip(str(a.get("addr")))
        if fam in ("inet", "inet6") and family in (None, fam) and not (
                fam == "inet6" and ip is not None and ip.is_loopback):
            out.append(a)
    return out


def _nccl_candidates(f: EnvFacts) -> list[dict[str, Any]]:
    """Interfaces in the order NCCL walks getifaddrs(): IPv4 entries first, then IPv6-only."""
    family = {"AF_INET": "inet", "AF_INET6": "inet6"}.get(f.env.get("NCCL_SOCKET_FAMILY", ""))
    v4 = [i for i in f.interfaces if any(a["family"] == "inet" for a in _nccl_addrs(i, family))]
    return v4 + [i for i in f.interfaces if i not in v4 and _nccl_addrs(i, family)]


def _routes_to_master(f: EnvFacts, iface: dict[str, Any], master: str) -> bool:
    """Whether iface is how this node reaches the master, or sits on the master's subnet."""
    route, addrs = f.route or {}, iface.get("addrs") or []
    if route.get("dev") == iface.get("name") or any(
            route.get("src") and a.get("addr") == route.get("src") for a in addrs):
        return True
    master_ip = _ip(master)
    for a in addrs:
        try:
            net = ipaddress.ip_network(f"{a.get('addr')}/{a.get('prefixlen')}", strict=False)
        except ValueError:
            continue
        if master_ip is not None and master_ip.version == net.version and master_ip in net:
            return True
    return False


def _suggest_iface(f: EnvFacts) -> str | None:
    """The interface to name in a fix: the route to the master, else the first usable non-lo."""
    dev = (f.route or {}).get("dev")
    usable = [i for i in _nccl_candidates(f) if _is_up(i) and not i.get("kind") == "loopback"]
    for iface in usable:
        if iface.get("name") == dev:
            return str(dev)
    return str(usable[0].get("name")) if usable else None


def _pick_verdict(f: EnvFacts, pick: dict[str, Any], job: _Job) -> tuple[str, str] | None:
    """Judge the interface NCCL would bootstrap on."""
    name = pick.get("name")
    if not _is_up(pick):
        return "ENV-IFNAME-DOWN", f"makes NCCL use {name}, which is down"
    if pick.get("kind") == "loopback":
        loop = job.nnodes > 1
        return ("ENV-IFNAME-LOOPBACK", f"makes NCCL use the loopback {name}") if loop else None
    if f.route is not None and not _routes_to_master(f, pick, job.master_addr):
        return "ENV-IFNAME-NOROUTE", (f"makes NCCL use {name}, but the master "
                                      f"{job.master_addr} is reached through {f.route.get('dev')}")
    return None


def _ifname_verdict(f: EnvFacts, spec: str, job: _Job) -> tuple[str, str] | None:
    """(finding id, what is wrong) for one node's NCCL_SOCKET_IFNAME, or None when fine."""
    matched = nccl_ifname_match(spec, [str(i.get("name")) for i in f.interfaces])
    if matched is None:
        return "ENV-IFNAME-IGNORED", "is ignored by NCCL (one character)"
    if not matched:
        hint = " (NCCL does not trim spaces)" if " " in spec else ""
        return "ENV-IFNAME-NOMATCH", f"matches no interface{hint}"
    picks = [i for i in _nccl_candidates(f) if i.get("name") in matched]
    if not picks:
        return "ENV-IFNAME-DOWN", f"selects {', '.join(matched)}, none of which has an address"
    return _pick_verdict(f, picks[0], job)


@_per_node
def _rule_ifname(f: EnvFacts, job: _Job) -> Finding | None:
    spec = _set(f, "NCCL_SOCKET_IFNAME")
    verdict = _ifname_verdict(f, spec, job) if spec is not None else None
    if verdict is None:
        return None
    ev = [f"{_kv(f, 'NCCL_SOCKET_IFNAME')}; {_ifaces_line(f)}"]
    if f.route is not None:
        r = f.route
        ev.append(f"{f.name}: route to {job.master_addr}: dev {r.get('dev')} "
                  f"src {r.get('src')} via {r.get('via') or '-'}")
    return _make(
        verdict[0], [f.name], f"{f.name}: NCCL_SOCKET_IFNAME={spec} {verdict[1]}",
        f"Set NCCL_SOCKET_IFNAME: \"={_suggest_iface(f) or '<iface>'}\" "
        f"{_where(f, 'NCCL_SOCKET_IFNAME')} (check `ip -o addr` on {f.name}); if names differ "
        "between nodes, list them all (e.g. =eth0,=ens5).", ev)


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
        "ENV-GLOO-SYNTAX", [f.name], f"{f.name}: GLOO_SOCKET_IFNAME={value}: {problems[0]}",
        f"Set GLOO_SOCKET_IFNAME: \"{_suggest_iface(f) or '<iface>'}\" "
        f"{_where(f, 'GLOO_SOCKET_IFNAME')}.",
        [f"{_kv(f, 'GLOO_SOCKET_IFNAME')}; {_ifaces_line(f)}"], more="; ".join(problems))


def _rule_gloo_count(nodes: list[EnvFacts], job: _Job) -> list[Finding]:
    counts = {f.name: len(f.env["GLOO_SOCKET_IFNAME"].split(","))
              if "GLOO_SOCKET_IFNAME" in f.env else 1 for f in nodes}
    if len(set(counts.values())) <= 1:
        return []
    bad = _outliers(counts)
    return [_make(
        "ENV-GLOO-COUNT", bad,
        f"{_names(bad)}: GLOO_SOCKET_IFNAME lists a different number of interfaces",
        "Give GLOO_SOCKET_IFNAME the same number of names on every node.",
        [f"{_kv(f, 'GLOO_SOCKET_IFNAME')} -> {counts[f.name]} device(s)" for f in nodes])]


# --------------------------------------------------------------------------- master, ranks, world


def _rule_master(nodes: list[EnvFacts], job: _Job) -> list[Finding]:
    checks: list[tuple[str, str, Callable[[str], bool | None]]] = [
        ("MASTER_ADDR", job.master_addr, lambda v: _same_addr(v, job.master_addr)),
        ("MASTER_PORT", str(job.master_port), lambda v: _int(v) == job.master_port),
    ]
    out = []
    for var, expected, same in checks:
        # A loopback MASTER_ADDR on a multi-node job is ENV-MASTER-LOOPBACK's finding.
        seen = {f.name: v for f in nodes if (v := _set(f, var)) is not None
                and not (var == "MASTER_ADDR" and job.nnodes > 1 and _is_loopback(v))}
        verdicts = {n: same(v) for n, v in seen.items()}
        bad = [n for n, ok in verdicts.items() if ok is not True]
        if not bad:
            continue
        across = len({v.strip().lower() for v in seen.values()}) > 1
        definite = across or any(verdicts[n] is False for n in bad)
        how = "differs across nodes and from" if across else "differs from"
        maybe = "" if definite else " (a name vs an address: check both resolve alike)"
        out.append(_make(
            "ENV-MASTER-MISMATCH", bad,
            f"{_names(bad)}: {var} {how} the config's {expected}{maybe}",
            f"Unset {var} (or set it to {expected}) {_where(_by(nodes, bad[0]), var)}.",
            [_kv(f, var) for f in nodes] + [f"config: master {job.master_addr}:{job.master_port}"],
            severity="error" if definite else "warning"))
    return out


def _rule_master_loopback(nodes: list[EnvFacts], job: _Job) -> list[Finding]:
    if job.nnodes <= 1:
        return []
    if _is_loopback(job.master_addr):
        return [_make(
            "ENV-MASTER-LOOPBACK", [f.name for f in nodes],
            f"config: master.addr {job.master_addr} is loopback on a {job.nnodes}-node job",
            "Set master.addr in the config to rank 0's routable IP (not 127.0.0.1/localhost).",
            [f"config: master {job.master_addr}:{job.master_port}"])]
    bad = [f for f in nodes if _is_loopback(_set(f, "MASTER_ADDR") or "x")]
    if not bad:
        return []
    return [_make(
        "ENV-MASTER-LOOPBACK", [f.name for f in bad],
        f"{_names(f.name for f in bad)}: MASTER_ADDR={bad[0].env['MASTER_ADDR']} is loopback "
        f"on a {job.nnodes}-node job",
        f"Unset MASTER_ADDR {_where(bad[0], 'MASTER_ADDR')}, or set it to {job.master_addr}.",
        [_kv(f, "MASTER_ADDR") for f in nodes])]


def _node_rank_problems(f: EnvFacts, var: str, nodes: list[EnvFacts], job: _Job) -> list[str]:
    n = _int(f.env[var])
    if n is None:
        return ["is not an integer"]
    problems = []
    if not 0 <= n < job.nnodes:
        problems.append(f"is out of range 0..{job.nnodes - 1}")
    if n != f.rank:
        problems.append(f"but {f.name} is node {f.rank} in the config")
    twins = [g.name for g in nodes if g is not f and _int(g.env.get(var, "x")) == n]
    if twins:
        problems.append(f"also claimed by {_names(twins)}")
    return problems


def _rule_node_rank(nodes: list[EnvFacts], job: _Job) -> list[Finding]:
    out = []
    for var in ("NODE_RANK", "GROUP_RANK"):
        for f in nodes:
            problems = _node_rank_problems(f, var, nodes, job) if _set(f, var) else []
            if problems:
                out.append(_make(
                    "ENV-DUPRANK", [f.name], f"{f.name}: {var}={f.env[var]} {problems[0]}",
                    f"Unset {var} {_where(f, var)} (torchrun gets --node-rank), "
                    f"or set it to {f.rank}.", [_kv(g, var) for g in nodes],
                    more="; ".join(problems)))
    return out


def _rule_rank(nodes: list[EnvFacts], job: _Job) -> list[Finding]:
    ranks = {f.name: _int(v) for f in nodes if (v := _set(f, "RANK")) is not None}
    world = job.world
    counts = Counter(r for r in ranks.values() if r is not None)
    dup = [n for n, r in ranks.items() if r is not None and counts[r] > 1]
    out_of_range = [n for n, r in ranks.items()
                    if r is None or r < 0 or (world is not None and r >= world)]
    out = []
    for bad, what in ((dup, "is the same on several nodes"),
                      (out_of_range, f"is not in 0..{world - 1 if world else 'WORLD_SIZE-1'}")):
        if bad:
            out.append(_make(
                "ENV-DUPRANK", bad, f"{_names(bad)}: RANK {what}",
                f"Unset RANK {_where(_by(nodes, bad[0]), 'RANK')}; torchrun sets it per process "
                "(RANK = NODE_RANK * nproc_per_node + LOCAL_RANK).",
                [_kv(f, "RANK") for f in nodes]))
    return out


def _rule_world_size(nodes: list[EnvFacts], job: _Job) -> list[Finding]:
    values = {f.name: v for f in nodes if (v := _set(f, "WORLD_SIZE")) is not None}
    world = job.world
    if world is not None:
        bad = [n for n, v in values.items() if _int(v) != world]
        why = f"differs from nnodes x nproc_per_node = {job.nnodes} x {job.nproc} = {world}"
    else:
        bad = _outliers(values) if len(set(values.values())) > 1 else []
        why = "differs across nodes"
    if not bad:
        return []
    return [_make(
        "ENV-WORLDSIZE", bad, f"{_names(bad)}: WORLD_SIZE {why}",
        f"Unset WORLD_SIZE {_where(_by(nodes, bad[0]), 'WORLD_SIZE')}; torchrun computes it.",
        [_kv(f, "WORLD_SIZE") for f in nodes])]


# --------------------------------------------------------------------------- NCCL_* consistency


def _diff(var: str, values: dict[str, str | None], nodes: list[EnvFacts], *,
          critical: bool = False, more: str = "") -> Finding:
    bad = _outliers(values)
    if critical:
        more = ("This one must match: a protocol, algorithm, buffer or transport mismatch "
                "gives 'Message truncated' or a hang.")
    return _make(
        "ENV-NCCL-DIFF", bad, f"{_names(bad)}: {var} differs from the other nodes",
        f"Set {var} to one value under the top-level `env:` in the config, and remove per-node "
        "or login-shell copies.", [_kv(f, var) for f in nodes],
        more=more, severity="error" if critical else None)


def _rule_nccl_diff(nodes: list[EnvFacts], job: _Job) -> list[Finding]:
    skip = NCCL_PER_NODE | set(DEPRECATED) | {"NCCL_COMM_ID"}
    out = []
    for var in sorted({k for f in nodes for k in f.env if k.startswith("NCCL_")} - skip):
        values = {f.name: f.env.get(var) for f in nodes}
        if len(set(values.values())) > 1:
            out.append(_diff(var, values, nodes, critical=var in NCCL_MUST_MATCH))
    for var in TORCH_SHOULD_MATCH:
        old = var.removeprefix("TORCH_")
        values = {f.name: f.env.get(var, f.env.get(old)) for f in nodes}
        if len(set(values.values())) > 1:
            out.append(_diff(var, values, nodes, more=(
                f"Not fatal: nodes would handle a failed collective differently. {old} counts "
                f"where {var} is unset.")))
    return out


def _rule_deprecated(nodes: list[EnvFacts], job: _Job) -> list[Finding]:
    out = []
    for old, new in DEPRECATED.items():
        holders = [f for f in nodes if old in f.env]
        ev = []
        for f in holders:
            ev.append(_kv(f, old))
            if new in f.env and f.env[new] != f.env[old]:
                ev.append(f"{_kv(f, new)} -- differs; PyTorch uses this one (the TORCH_ name wins)")
        if holders:
            out.append(_make(
                "ENV-DEPRECATED", [f.name for f in holders],
                f"{_names(f.name for f in holders)}: {old} is deprecated; use {new}",
                f"Rename {old} to {new} {_where(holders[0], old)}.", ev))
    return out


def _rule_comm_id(nodes: list[EnvFacts], job: _Job) -> list[Finding]:
    holders = [f for f in nodes if "NCCL_COMM_ID" in f.env]
    if not holders:
        return []
    return [_make(
        "BOOT-COMMID", [f.name for f in holders],
        f"{_names(f.name for f in holders)}: NCCL_COMM_ID is set",
        f"Unset NCCL_COMM_ID {_where(holders[0], 'NCCL_COMM_ID')}.",
        [_kv(f, "NCCL_COMM_ID") for f in holders])]


# --------------------------------------------------------------------------- GPUs, shm, PET_*


def visible_gpu_count(value: str, gpu_count: int | None) -> int:
    """How many devices CUDA_VISIBLE_DEVICES exposes. CUDA stops at the first invalid
    entry (negative, out of range, repeated); UUIDs and MIG ids count one each."""
    text = value.strip()
    if text.lower() in ("", "-1", "none", "nodevfiles", "void"):
        return 0
    seen: list[str] = []
    for raw in text.split(","):
        item = raw.strip()
        index = _int(item) if item.lstrip("-").isdigit() else None
        if not item or item in seen or (index is not None and (
                index < 0 or (gpu_count is not None and index >= gpu_count))):
            break
        seen.append(item)
    return len(seen)


def _ordinal_problem(f: EnvFacts, job: _Job) -> str | None:
    if f.gpu_count == 0:
        return None  # a CPU node: the job runs gloo there, there is no ordinal to get wrong
    cvd = _set(f, "CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        visible = visible_gpu_count(cvd, f.gpu_count)
        if isinstance(job.nproc, int) and visible < job.nproc:
            return f"={cvd} exposes {visible} GPU(s) but nproc_per_node is {job.nproc}"
        return f"={cvd} hides every GPU (nproc_per_node: {job.nproc})" if visible == 0 else None
    if isinstance(job.nproc, int) and f.gpu_count and job.nproc > f.gpu_count:
        return f" is unset and {f.name} has {f.gpu_count} GPU(s), but nproc_per_node is {job.nproc}"
    return None


@_per_node
def _rule_ordinal(f: EnvFacts, job: _Job) -> Finding | None:
    problem = _ordinal_problem(f, job)
    if problem is None:
        return None
    gpus = "unknown" if f.gpu_count is None else str(f.gpu_count)
    return _make(
        "ENV-ORDINAL", [f.name], f"{f.name}: CUDA_VISIBLE_DEVICES{problem}",
        "Lower nproc_per_node in the config, or expose more GPUs: fix "
        f"CUDA_VISIBLE_DEVICES {_where(f, 'CUDA_VISIBLE_DEVICES')}.",
        [_kv(f, "CUDA_VISIBLE_DEVICES") + f"; GPUs found: {gpus}"])


@_per_node
def _rule_shm(f: EnvFacts, job: _Job) -> Finding | None:
    if f.shm_bytes is None or f.shm_bytes >= GIB:
        return None
    mib = f.shm_bytes // (1024 * 1024)
    return _make(
        "SHM-SIZE", [f.name], f"{f.name}: /dev/shm is only {mib} MiB (under 1 GiB)",
        "docker: --shm-size=1g (or --ipc=host); k8s: mount an emptyDir {medium: Memory} at "
        "/dev/shm; or set NCCL_SHM_DISABLE=1 (slower).",
        [f"{f.name}: /dev/shm size {f.shm_bytes} bytes ({mib} MiB)"])


def _pet_wanted(f: EnvFacts, job: _Job) -> dict[str, str]:
    """What each PET_ variable would have to say to agree with the config."""
    nproc = "gpu" if job.nproc == "gpus" else str(job.nproc)  # torchrun spells it "gpu"
    return {"PET_NNODES": str(job.nnodes), "PET_NODE_RANK": str(f.rank),
            "PET_MASTER_ADDR": job.master_addr, "PET_MASTER_PORT": str(job.master_port),
            "PET_NPROC_PER_NODE": nproc}


def _pet_agrees(var: str, value: str, wanted: str) -> bool:
    if var == "PET_MASTER_ADDR":
        return _same_addr(value, wanted) is not False
    if var == "PET_NPROC_PER_NODE" and wanted == "gpu":
        return value.strip() in ("gpu", "gpus")
    return value.strip() in (wanted, f"{wanted}:{wanted}")  # PET_NNODES may be "min:max"


@_per_node
def _rule_pet(f: EnvFacts, job: _Job) -> Finding | None:
    want = _pet_wanted(f, job)
    bad = [v for v in PET_VARS if (x := _set(f, v)) is not None and not _pet_agrees(v, x, want[v])]
    if not bad:
        return None
    return _make(
        "ENV-PET-OVERRIDE", [f.name],
        f"{f.name}: {bad[0]}={f.env[bad[0]]} disagrees with the config ({want[bad[0]]})",
        f"Unset {' '.join(bad)} {_where(f, bad[0])}.", [_kv(f, v) for v in bad],
        more="The config says: " + ", ".join(f"{v}={want[v]}" for v in bad) + ".")


# --------------------------------------------------------------------------- entry points

RULES: tuple[Rule, ...] = (
    _rule_master, _rule_master_loopback, _rule_node_rank, _rule_rank, _rule_world_size,
    _rule_ifname, _rule_gloo_syntax, _rule_gloo_count, _rule_nccl_diff, _rule_deprecated,
    _rule_comm_id, _rule_ordinal, _rule_shm, _rule_pet,
)


def audit_env(
    nodes: list[EnvFacts], *, master_addr: str, master_port: int, nproc_per_node: int | str
) -> list[Finding]:
    """Every finding for these nodes (given in config order, rank = position), rule by rule."""
    job = _Job(master_addr, master_port, nproc_per_node, len(nodes))
    return [x for rule in RULES for x in rule(nodes, job)]


def env_diff(
    nodes: list[EnvFacts], *, ignore: Iterable[str] = ()
) -> dict[str, dict[str, str | None]]:
    """Variables whose (redacted) values differ across nodes, set-vs-unset included:
    {VAR: {node: value or None}}, sorted by name. Pass ignore=EXPECTED_TO_DIFFER to
    leave out what differs by nature (hostnames, ranks, interface names)."""
    names = sorted({k for f in nodes for k in f.env} - set(ignore))
    values = {var: {f.name: f.env.get(var) for f in nodes} for var in names}
    return {var: v for var, v in values.items() if len(set(v.values())) > 1}
