"""The embedded local demo: two "nodes" on this machine, CPU/gloo, no SSH, no root."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddptui.config import ClusterConfig

DEMO_YAML = """\
# ddptui embedded demo: two "nodes" that are both this machine (host: local),
# so every step runs for real without SSH or root. Mirrors configs/local.yaml.
name: local-demo
master:
  addr: 127.0.0.1
  port: 29500
nodes:
  - host: local
    name: node0
  - host: local
    name: node1
nproc_per_node: 1
env:
  GLOO_SOCKET_IFNAME: lo
timeouts:
  step: 20
  allreduce: 60
  ddp: 90
# The ddp step trains a small DDP model on both "nodes" and projects DDP's scaling
# for a model of ddp.model_params (default 100M) from the allreduce step's busbw.
"""


def demo_config() -> ClusterConfig:
    """The demo runs probes with this very interpreter (the one that has ddptui, and torch
    when installed), so it works from any environment."""
    from ddptui.config import parse_config  # pydantic: not on the first frame's path

    cfg = parse_config(DEMO_YAML, "<embedded demo>")
    return cfg.model_copy(update={"python": sys.executable})


def config_or_demo(path: str | None) -> ClusterConfig:
    """The config at path (ConfigError as load_config raises it), or the demo's."""
    from ddptui.config import load_config

    return demo_config() if path is None else load_config(path)
