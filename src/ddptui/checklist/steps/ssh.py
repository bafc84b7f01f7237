"""`ssh`: every node reachable and authenticated; host keys verified."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ddptui.checklist.base import Step, StepContext
from ddptui.diagnosis.model import Finding, NodeResult, finding
from ddptui.transport.base import ConnectFailure, NodeTarget

# kind -> (finding id, summary tail, cause, fix); {host}/{user}/{port} filled per node.
CATALOG: dict[str, tuple[str, str, str, str]] = {
    "auth": (
        "SSH-AUTH",
        "authentication refused",
        "The node refused every key offered for user {user}: the public key is not in that "
        "user's ~/.ssh/authorized_keys, the wrong identity file or agent key was offered, or "
        "the user is wrong.",
        "Install your key with `ssh-copy-id {login}`, or point `ssh.identity_file` (or the "
        "node's IdentityFile in ~/.ssh/config) at the right key; `ssh-add -l` lists agent keys.",
    ),
    "hostkey-unknown": (
        "SSH-HOSTKEY-UNKNOWN",
        "host key not known",
        "The node's host key is in none of the known_hosts files, so its identity cannot be "
        "verified (ddptui never connects to an unverified host by default).",
        "Verify the fingerprint with your admin, then `ssh-keyscan -p {port} {host} >> "
        "~/.ssh/known_hosts`; or, on a trusted network, set `ssh.accept_new_host_keys: true` "
        "to record new keys on first use.",
    ),
    "hostkey-changed": (
        "SSH-HOSTKEY-CHANGED",
        "host key CHANGED",
        "The node presented a host key different from the one recorded in known_hosts: it was "
        "reinstalled or re-keyed, the address now points at another machine, or someone is "
        "intercepting the connection.",
        "Confirm with your admin that the node was rebuilt; only then `ssh-keygen -R {host}` "
        "and re-add its key (`ssh-keyscan -p {port} {host} >> ~/.ssh/known_hosts`).",
    ),
    "timeout": (
        "SSH-TIMEOUT",
        "no answer (timed out)",
        "Nothing answered on {host}:{port} in time: the node is down, the address is wrong, or "
        "a firewall silently drops SSH.",
        "Check the node is up (`ping {host}`, your scheduler's node state) and that port {port} "
        "is open (`nc -zv -w3 {host} {port}`); fix the address in the config if it is wrong.",
    ),
    "refused": (
        "SSH-REFUSED",
        "connection refused",
        "{host} answered but nothing listens on port {port}: sshd is not running there, or "
        "it listens on another port.",
        "Start sshd on the node (`systemctl start ssh`) or set the node's `port:` to the one "
        "sshd uses.",
    ),
    "noroute": (
        "SSH-NOROUTE",
        "no route to host",
        "The login node has no route to {host}, or a router/firewall answered host-unreachable.",
        "Check the address, and the route from here (`ip route get {host}`); the node may be "
        "on a network this machine cannot reach (use `ssh.jump_host`).",
    ),
    "dns": (
        "SSH-DNS",
        "name does not resolve",
        "{host} is not a known hostname here (not in DNS, /etc/hosts or ~/.ssh/config).",
        "Use the node's IP, add it to /etc/hosts, or add a `Host` entry to ~/.ssh/config.",
    ),
    "disconnect": (
        "SSH-DISCONNECT",
        "connection closed by the node",
        "The SSH server closed the connection during the handshake (MaxStartups exceeded, "
        "AllowUsers/DenyUsers, or a crashed sshd).",
        "Retry; if it persists, read the node's sshd log (`journalctl -u ssh`).",
    ),
    "other": (
        "SSH-ERROR",
        "SSH connection failed",
        "The SSH connection could not be set up.",
        "Try `ssh {login}` by hand with the same key and known_hosts to see the error.",
    ),
}


class SSHStep(Step):
    id = "ssh"
    title = "SSH reachability"
    needs_ssh = False

    async def check(
        self, ctx: StepContext, nodes: dict[str, NodeResult]
    ) -> tuple[list[Finding], dict[str, Any]]:
        findings: list[Finding] = []

        async def one(t: NodeTarget) -> None:
            started = time.monotonic()
            try:
                summary = await ctx.transports[t.name].connect()
            except ConnectFailure as exc:
                ctx.unreachable.add(t.name)
                fid, short, cause, fix = CATALOG[exc.kind]
                fill = _fill(t)
                findings.append(
                    finding(
                        fid,
                        "error",
                        [t.name],
                        f"{t.name}: {short}",
                        cause.format(**fill),
                        fix.format(**fill),
                        [f"{t.name}: {exc.evidence or exc.message}"],
                    )
                )
                self.set_node(
                    ctx,
                    nodes,
                    t.name,
                    NodeResult(
                        "fail",
                        f"{short}: {exc.message}",
                        {"error": exc.kind},
                        time.monotonic() - started,
                    ),
                )
                return
            self.set_node(
                ctx,
                nodes,
                t.name,
                NodeResult(
                    "pass",
                    summary,
                    {"transport": ctx.transports[t.name].kind},
                    time.monotonic() - started,
                ),
            )

        await asyncio.gather(*(one(t) for t in ctx.targets))
        order = {t.name: i for i, t in enumerate(ctx.targets)}
        findings.sort(key=lambda f: order.get(f.nodes[0], 0))
        return findings, {}


def _fill(t: NodeTarget) -> dict[str, str]:
    port = str(t.port or 22)
    login = f"{t.user}@{t.host}" if t.user else t.host
    if t.port and t.port != 22:
        login = f"-p {t.port} {login}"
    return {"host": t.host, "user": t.user or "(your user)", "port": port, "login": login}
