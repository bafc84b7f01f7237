"""What a node's detected hardware should give (fabric_expect.yaml: figures and their
sources are data). Pure core."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXPECT_FILE = Path(__file__).with_name("fabric_expect.yaml")


@functools.cache
def table() -> dict[str, Any]:
    from ruamel.yaml import YAML

    doc = YAML(typ="safe").load(EXPECT_FILE.read_text(encoding="utf-8"))
    assert isinstance(doc, dict), f"{EXPECT_FILE.name}: expected a mapping"
    return doc


@dataclass(frozen=True)
class Expect:
    gbs: float  # what a healthy pair (or the intra-node allreduce) should reach
    floor_gbs: float  # below this, the hardware is not delivering
    link: str  # "IB 400 Gb/s x1", "eth0 10 Gb/s"
    transport: str  # "ib" | "socket" | "nvlink"
    source: str


def _ib_active(hw: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        p
        for p in hw.get("ib") or ()
        if isinstance(p, Mapping)
        and str(p.get("state", "")).upper().endswith("ACTIVE")
        and isinstance(p.get("rate_gbps"), int | float)
        and str(p.get("link_layer", "InfiniBand")) != "Ethernet"
    ]


def network(hw: Mapping[str, Any], backend: str, net: str | None) -> Expect | None:
    """A node's figure between nodes: over IB when NCCL runs and the node has active
    IB ports (unless NCCL said it chose sockets), else its NIC speed over TCP."""
    conf = table()["network"]
    ports = _ib_active(hw)
    if backend == "nccl" and ports and net != "Socket":
        gbit = sum(float(p["rate_gbps"]) for p in ports)
        c = conf["ib"]
        return Expect(
            gbit / 8 * c["fraction"],
            gbit / 8 * c["floor"],
            f"IB {gbit:.0f} Gb/s over {len(ports)} port(s)",
            "ib",
            str(c["source"]),
        )
    speed = hw.get("speed_mbps")
    if not isinstance(speed, int | float) or speed <= 0:
        return None
    c = conf["socket"]
    return Expect(
        speed / 8000 * c["fraction"],
        speed / 8000 * c["floor"],
        f"{hw.get('iface') or '?'} {speed / 1000:g} Gb/s (TCP)",
        "socket",
        str(c["source"]),
    )


def tcp_where_ib(hw: Mapping[str, Any], backend: str, net: str | None) -> bool:
    """The node has active InfiniBand, yet NCCL moved the data over TCP sockets."""
    return backend == "nccl" and net == "Socket" and bool(_ib_active(hw))


def intra(gpus: list[Mapping[str, Any]]) -> Expect | None:
    """The intra-node allreduce busbw floor for a node's GPUs: a known SKU's figure, else
    NVLink links x per-link bandwidth x a fraction; None without NVLink."""
    if len(gpus) < 2:
        return None
    doc = table()
    name = str(gpus[0].get("name", ""))
    for sku in doc["skus"]:
        if sku["match"] in name and int(sku["gpus"]) == len(gpus):
            gbs = float(sku["intra_busbw_gbs"])
            return Expect(gbs, gbs, f"{len(gpus)}x {name}", "nvlink", str(sku["source"]))
    links = min(int(g.get("nvlinks") or 0) for g in gpus)
    gen = gpus[0].get("nvlink_gen")
    per = doc["nvlink_per_link_gbs"].get(gen) if isinstance(gen, int) else None
    if not links or per is None:
        return None
    gbs = links * float(per) * float(doc["nvlink_allreduce_fraction"])
    return Expect(
        gbs, gbs, f"{links} NVLink {gen} links per GPU", "nvlink", "NVLink per-link bandwidth"
    )
