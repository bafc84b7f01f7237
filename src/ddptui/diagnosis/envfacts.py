"""What the env audit works on (one node's launch environment and network facts)
and the helpers every rule shares. Core layer."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ddptui.diagnosis.envkb import REDACTED_PREFIX, SOURCE_WORDS
from ddptui.diagnosis.finding import Finding, Severity
from ddptui.diagnosis.kb import kb_finding
from ddptui.diagnosis.model import odd_nodes
from ddptui.diagnosis.netmatch import _is_up


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
    def from_records(
        cls,
        name: str,
        rank: int,
        env_record: dict[str, Any],
        net_record: dict[str, Any],
        gpu_count: int | None = None,
    ) -> EnvFacts:
        """Build from the env probe's "env" and "net" records."""
        env, sources = env_record.get("env") or {}, env_record.get("sources") or {}
        return cls(
            name,
            rank,
            {str(k): str(v) for k, v in env.items()},
            {str(k): str(v) for k, v in sources.items()},
            list(net_record.get("interfaces") or []),
            net_record.get("route"),
            net_record.get("shm_bytes"),
            gpu_count,
        )


@dataclass(frozen=True)
class _Job:
    """The launch every node is checked against (from the config)."""

    master_addr: str
    master_port: int
    nproc: int | str
    nnodes: int
    single_host: bool = False  # every "node" is this machine (the local demo)

    @property
    def multi_host(self) -> bool:
        """Loopback is only wrong when ranks sit on different machines."""
        return self.nnodes > 1 and not self.single_host

    @property
    def world(self) -> int | None:
        return self.nnodes * self.nproc if isinstance(self.nproc, int) else None


Rule = Callable[[list[EnvFacts], _Job], list[Finding]]


# --------------------------------------------------------------------------- small helpers


def _make(
    id_: str,
    nodes: list[str],
    text: str,
    evidence: Iterable[str],
    *,
    severity: Severity | None = None,
    **facts: object,
) -> Finding:
    """A finding whose summary is '<nodes>: <text>'; its cause and fix are the knowledge
    base's entry for id_, filled with facts."""
    summary = f"{_names(nodes)}: {text}"
    return kb_finding(id_, nodes, summary, list(evidence), severity=severity, facts=facts)


def _per_node(check: Callable[[EnvFacts, _Job], Finding | None]) -> Rule:
    """A rule that judges each node on its own."""
    return lambda nodes, job: [x for f in nodes if (x := check(f, job)) is not None]


def _set(f: EnvFacts, var: str) -> str | None:
    """The value when set and comparable (not redacted)."""
    value = f.env.get(var)
    return None if value is None or value.startswith(REDACTED_PREFIX) else value


def _kv(f: EnvFacts, var: str) -> str:
    if var not in f.env:
        return f"{f.name}: {var} unset"
    return f"{f.name}: {var}={f.env[var]} (from {SOURCE_WORDS.get(f.sources.get(var, ''), '?')})"


def _iface_text(i: dict[str, Any]) -> str:
    """'eth0(up,10.0.0.2)', 'eth1(down,no address)'."""
    addrs = [str(a.get("addr")) for a in i.get("addrs") or []] or ["no address"]
    return f"{i.get('name')}({','.join(['up' if _is_up(i) else 'down', *addrs])})"


def _ifaces_line(f: EnvFacts) -> str:
    return "interfaces: " + (", ".join(map(_iface_text, f.interfaces)) or "none reported")


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
    return (
        f"in {f.name}'s login environment (~/.bashrc above its interactive guard, "
        f"~/.profile, /etc/environment), or override it under {f.name}'s `env:`"
    )


def _outliers(values: Mapping[str, object]) -> list[str]:
    """Nodes not holding the majority value (model.odd_nodes: every node on a tie)."""
    return odd_nodes(values)


def _by(nodes: list[EnvFacts], name: str) -> EnvFacts:
    return next(f for f in nodes if f.name == name)


def _int(value: str) -> int | None:
    try:
        return int(value.strip())
    except ValueError:
        return None
