"""Transports: how probes reach a node. One small protocol, two implementations.

`base` holds the protocol and is safe to import anywhere; `ssh` (asyncssh) and
`local` (subprocess) are imported only when a transport is made.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ddptui.transport.base import (
    ConnectFailure,
    NodeTarget,
    ProbeOutput,
    ProbeRun,
    Transport,
)

if TYPE_CHECKING:
    from ddptui.config import ClusterConfig

__all__ = [
    "ConnectFailure",
    "NodeTarget",
    "ProbeOutput",
    "ProbeRun",
    "Transport",
    "close_transports",
    "make_transports",
]


async def close_transports(transports: dict[str, Transport]) -> None:
    """Close every node's transport, then the bastion connection they shared (one per
    jump host), so nothing of the run stays connected."""
    import sys

    await asyncio.gather(*(t.close() for t in transports.values()), return_exceptions=True)
    groups = {id(g): g for t in transports.values() if (g := getattr(t, "group", None))}
    await asyncio.gather(*(g.close() for g in groups.values()), return_exceptions=True)
    ssh = sys.modules.get("ddptui.transport.ssh")
    if ssh is not None:
        await ssh.close_jumps()


def make_transports(config: ClusterConfig, targets: list[NodeTarget]) -> dict[str, Transport]:
    """One transport per node: `local` for host "local" (or `transport: local`), srun
    for a Slurm job (one SrunGroup shared by every node), SSH otherwise (sharing one
    bound on concurrent connects)."""
    out: dict[str, Transport] = {}
    options = None
    if config.transport == "srun" and config.slurm is not None and config.slurm.job:
        from ddptui.transport.srun import SrunGroup, SrunOptions, SrunTransport

        group = SrunGroup(SrunOptions(job=config.slurm.job), targets)
        return {t.name: SrunTransport(t, group) for t in targets}
    for t in targets:
        if t.host == "local" or config.transport == "local":
            from ddptui.transport.local import LocalTransport

            out[t.name] = LocalTransport(t)
            continue
        if options is None:
            from ddptui.transport.ssh import DEFAULT_KNOWN_HOSTS, SSHOptions

            ssh = config.ssh
            known = ssh.known_hosts
            options = SSHOptions(
                known_hosts=tuple([known] if isinstance(known, str) else known)
                if known
                else DEFAULT_KNOWN_HOSTS,
                accept_new_host_keys=ssh.accept_new_host_keys,
                identity_files=tuple(
                    [ssh.identity_file]
                    if isinstance(ssh.identity_file, str)
                    else ssh.identity_file or []
                ),
                config=ssh.config,
                connect_timeout=ssh.connect_timeout,
                keepalive_interval=ssh.keepalive_interval,
                jump_host=ssh.jump_host,
                connect_limit=asyncio.Semaphore(ssh.max_concurrent_connects),
            )
        from ddptui.transport.ssh import SSHTransport

        out[t.name] = SSHTransport(t, options)
    return out
