"""The probes themselves, run for real through the local transport: on this Python and
on the oldest node Python we support (3.8), where socket.timeout is not TimeoutError."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ddptui.transport.base import NodeTarget, ProbeOutput
from ddptui.transport.local import LocalTransport


def python38() -> str | None:
    pyenv = Path("~/.pyenv/versions").expanduser()
    for cand in sorted(map(str, pyenv.glob("3.8*/bin/python3.8"))):
        ok = subprocess.run(
            [cand, "-c", "import sys; assert sys.version_info[:2] == (3, 8)"],
            capture_output=True,
            check=False,
        )
        if ok.returncode == 0:
            return cand
    return None


PYTHONS = [sys.executable] + ([p] if (p := python38()) else [])


def run(python: str, probe: str, params: dict[str, Any], timeout: float = 20) -> ProbeOutput:
    t = LocalTransport(NodeTarget("n0", "local", 0, python))
    return asyncio.run(t.run_probe(probe, params, timeout=timeout))


@pytest.mark.parametrize("python", PYTHONS)
def test_inventory_probe(python: str) -> None:
    out = run(python, "inventory", {})
    assert out.ok, out.stderr
    rec = out.first("inventory")
    assert rec is not None and rec["hostname"] == socket.gethostname()
    assert any(i["name"] == "lo" for i in rec["interfaces"])
    assert rec["gpu_source"] in ("nvml", "nvidia-smi", "none")


@pytest.mark.parametrize("python", PYTHONS)
def test_port_probe_listen_and_connect(python: str) -> None:
    async def scenario() -> tuple[dict[str, Any] | None, ProbeOutput]:
        t = LocalTransport(NodeTarget("n0", "local", 0, python))
        listener = await t.start_probe("port", {"mode": "listen", "addr": "127.0.0.1", "port": 0})
        rec = await listener.next_record("listening", timeout=10)
        assert rec is not None
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        closed_port = closed.getsockname()[1]  # bound, never listening: refuses
        out = await t.run_probe(
            "port",
            {
                "mode": "connect",
                "timeout": 2,
                "targets": [
                    {"id": "open", "addr": "127.0.0.1", "port": rec["port"]},
                    {"id": "closed", "addr": "127.0.0.1", "port": closed_port},
                ],
            },
            timeout=10,
        )
        closed.close()
        accepted = await listener.next_record("accepted", timeout=5)
        await listener.stop()
        return accepted, out

    accepted, out = asyncio.run(scenario())
    assert out.ok, out.stderr
    results = {r["id"]: r["result"] for r in out.all("connect")}
    assert results == {"open": "connected", "closed": "refused"}
    assert accepted is not None and accepted["peer"] == "127.0.0.1"


@pytest.mark.parametrize("python", PYTHONS)
def test_ping_probe_on_loopback(python: str) -> None:
    out = run(python, "ping", {"master_addr": "127.0.0.1", "tcp_ports": [1]})
    assert out.ok, out.stderr
    rec = out.first("ping")
    assert rec is not None and rec["resolved"] == ["127.0.0.1"]
    assert "127.0.0.1" in rec["local_addrs"]


def test_a_probe_bug_is_reported_not_hidden(tmp_path: Path) -> None:
    out = run(sys.executable, "echo", {"exit": 7, "stderr": "boom"})
    assert out.exit_status == 7 and "boom" in out.stderr
    assert out.problem() is not None and "status 7" in (out.problem() or "")


def test_nothing_the_probe_started_outlives_it_not_even_orphans_in_their_own_sessions() -> None:
    """torchrun starts each rank in a session of its own; when torchrun dies before them,
    the ranks are orphans. Stopping the probe (its lifeline closed) still ends them all."""
    out = run(sys.executable, "echo", {"orphans": 3, "sleep": 60}, timeout=3)
    rec = out.first("orphans")
    assert rec is not None and len(rec["pids"]) == 3, out.stderr
    deadline = time.monotonic() + 10
    alive = list(rec["pids"])
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _running(pid)]
        time.sleep(0.1)
    assert not alive, f"left running after the probe stopped: {alive}"


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
