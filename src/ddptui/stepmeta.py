"""Step ids in checklist order and their titles, as plain data: views and reports need
them without loading the steps themselves (start-up time). registry.py checks that
the two agree."""

from __future__ import annotations

ORDER: tuple[str, ...] = ("ssh", "inventory", "ping", "port", "env", "allreduce", "fabric", "ddp")
TITLES: dict[str, str] = {
    "ssh": "SSH reachability",
    "inventory": "Node inventory and version skew",
    "ping": "MASTER_ADDR resolution and reachability",
    "port": "MASTER_PORT and all-pairs TCP",
    "env": "Launch environment audit",
    "allreduce": "torchrun allreduce (NCCL/gloo)",
    "fabric": "Fabric: slow nodes and slow links",
    "ddp": "DDP training steps",
}
