"""`host: local`: the same probes as subprocesses of ddptui, no SSH, no root."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import socket
from collections.abc import Callable
from typing import Any

from ddptui.transport.base import (
    STAGE0,
    ConnectFailure,
    ProbeRun,
    Transport,
    frame_payload,
)


class LocalTransport(Transport):
    kind = "local"

    async def connect(self) -> str:
        return f"local as {getpass.getuser()} on {socket.gethostname()} (no SSH)"

    async def start_probe(
        self, name: str, params: dict[str, Any], *, on_stderr: Callable[[str], None] | None = None
    ) -> ProbeRun:
        try:
            proc = await asyncio.create_subprocess_exec(
                self.target.python,
                "-u",
                "-c",
                STAGE0,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=4 * 1024 * 1024,
                start_new_session=True,
            )
        except OSError as exc:
            raise ConnectFailure(
                "other", f"cannot start {self.target.python!r} locally: {exc.strerror or exc}"
            ) from None
        assert proc.stdin and proc.stdout and proc.stderr
        with contextlib.suppress(OSError, RuntimeError):  # the exit status tells why
            proc.stdin.write(frame_payload(name, params))

        async def _wait() -> int | None:
            return await proc.wait()

        def _force() -> None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)

        run = ProbeRun(
            node=self.target.name,
            probe=name,
            stdin=proc.stdin,
            stdout=proc.stdout,
            stderr_stream=proc.stderr,
            wait_exit=_wait,
            force_close=_force,
            on_stderr=on_stderr,
        )
        return self._track(run)

    async def close(self) -> None:
        await self._stop_probes()
