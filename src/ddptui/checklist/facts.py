"""Typed facts that later steps use from earlier ones (instead of `dict.get` chains on
the probes' records). Core layer.

The inventory probe's record stays the step's node data (the report keeps it as is);
steps that need its facts read them through `StepContext.inventory(node)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class Interface:
    name: str
    up: bool
    speed_mbps: int | None
    addrs: tuple[str, ...]

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Interface:
        addrs = tuple(
            str(a["addr"])
            for a in rec.get("addrs") or ()
            if isinstance(a, Mapping) and isinstance(a.get("addr"), str)
        )
        return cls(str(rec.get("name", "?")), bool(rec.get("up")), _int(rec.get("speed_mbps")), addrs)


@dataclass(frozen=True)
class IbPort:
    device: str
    port: str
    state: str

    @property
    def active(self) -> bool:
        return self.state.upper().endswith("ACTIVE")


@dataclass(frozen=True)
class InventoryFacts:
    """One node's inventory, as later steps use it."""

    hostname: str | None
    gpu_count: int | None  # None: the inventory could not tell
    interfaces: tuple[Interface, ...]
    ib_ports: tuple[IbPort, ...]
    machine_id: str | None
    boot_id: str | None
    netns: str | None  # "net:[4026531840]": which network stack (loopback is per stack)
    torch: str | None
    nccl: str | None

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> InventoryFacts:
        gpus = data.get("gpus")
        return cls(
            hostname=_str(data.get("hostname")),
            gpu_count=len(gpus) if isinstance(gpus, list) else None,
            interfaces=tuple(
                Interface.from_record(i)
                for i in data.get("interfaces") or ()
                if isinstance(i, Mapping)
            ),
            ib_ports=tuple(
                IbPort(str(p.get("device", "?")), str(p.get("port", "?")), str(p.get("state") or ""))
                for p in data.get("ib_ports") or ()
                if isinstance(p, Mapping)
            ),
            machine_id=_str(data.get("machine_id")),
            boot_id=_str(data.get("boot_id")),
            netns=_str(data.get("netns")),
            torch=_str(data.get("torch")),
            nccl=_str(data.get("nccl")),
        )

    @property
    def ib_active(self) -> bool:
        return any(p.active for p in self.ib_ports)

    def interface(self, name: str | None) -> Interface | None:
        return next((i for i in self.interfaces if i.name == name), None)


@dataclass(frozen=True)
class Route:
    """How a node reaches MASTER_ADDR (the ping step): the interface and source address."""

    dev: str | None
    src: str | None

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Route | None:
        route = data.get("route")
        if not isinstance(route, Mapping):
            return None
        return cls(_str(route.get("dev")), _str(route.get("src")))
