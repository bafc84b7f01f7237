"""SSH transport (asyncssh): one connection per node, reused by every step."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh

from ddptui.transport.base import (
    ConnectFailure,
    NodeTarget,
    ProbeRun,
    Transport,
    frame_payload,
    remote_command,
)

DEFAULT_KNOWN_HOSTS = ("~/.ssh/known_hosts", "/etc/ssh/ssh_known_hosts")
# asyncssh logs every packet exchange at INFO; those records cost CPU per connection
# and say nothing a ddptui user acts on.
logging.getLogger("asyncssh").setLevel(logging.WARNING)


def _preferred_ciphers() -> list[str]:
    """asyncssh's own list, AES-GCM first: one C call per packet, where chacha20-poly1305
    is assembled in Python (measured: a third of the client's CPU per connection)."""
    from asyncssh.encryption import get_default_encryption_algs

    algs = [a.decode("ascii") for a in get_default_encryption_algs()]
    gcm = [a for a in algs if a.endswith("-gcm@openssh.com")]
    return gcm + [a for a in algs if a not in gcm]


KEEPALIVE_COUNT_MAX = 3


@dataclass(frozen=True)
class SSHOptions:
    known_hosts: tuple[str, ...] = DEFAULT_KNOWN_HOSTS
    accept_new_host_keys: bool = False
    identity_files: tuple[str, ...] = ()
    config: str | None = None
    connect_timeout: float = 10.0
    keepalive_interval: float = 5.0
    jump_host: str | None = None
    connect_limit: asyncio.Semaphore | None = None


class _Jump:
    """One bastion connection shared by every node (opened on first use)."""

    def __init__(self) -> None:
        self.conn: asyncssh.SSHClientConnection | None = None
        self.lock = asyncio.Lock()


_JUMPS: dict[tuple[str, str | None], _Jump] = {}


def _expand(paths: Sequence[str]) -> list[str]:
    return [str(Path(p).expanduser()) for p in paths]


class SSHTransport(Transport):
    kind = "ssh"

    def __init__(self, target: NodeTarget, options: SSHOptions) -> None:
        super().__init__(target)
        self.options = options
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------ connect

    def _known_hosts(self) -> tuple[Any, bool]:
        """(known_hosts argument for asyncssh, whether this host has any recorded key)."""
        files = [p for p in _expand(self.options.known_hosts) if Path(p).is_file()]
        if not files:
            return b"", False
        try:
            known = asyncssh.read_known_hosts(files)
        except (OSError, ValueError, asyncssh.Error) as exc:
            raise ConnectFailure(
                "other", f"cannot read known_hosts {', '.join(files)}: {exc}"
            ) from None
        addr = _resolve(self.target.host)
        keys = known.match(self.target.host, addr or "", self.target.port or 22)[0]
        return known, bool(keys)

    async def connect(self) -> str:
        async with self._lock:
            if self._conn is not None:
                return self._summary()
            limit = self.options.connect_limit or asyncio.Semaphore(1)
            async with limit:
                self._conn = await self._open()
            return self._summary()

    def _summary(self) -> str:
        assert self._conn is not None
        user = self._conn.get_extra_info("username") or "?"
        peer = self._conn.get_extra_info("peername") or ("?", 0)
        return f"connected as {user} to {peer[0]}:{peer[1]}"

    async def _open(self) -> asyncssh.SSHClientConnection:
        known, has_entry = self._known_hosts()
        kwargs: dict[str, Any] = {
            "known_hosts": None if (self.options.accept_new_host_keys and not has_entry) else known,
            "connect_timeout": self.options.connect_timeout,
            "keepalive_interval": self.options.keepalive_interval,
            "keepalive_count_max": KEEPALIVE_COUNT_MAX,
            "encryption_algs": _preferred_ciphers(),
        }
        if self.target.user:
            kwargs["username"] = self.target.user
        if self.target.port:
            kwargs["port"] = self.target.port
        if self.options.identity_files:
            kwargs["client_keys"] = _expand(self.options.identity_files)
        if self.options.config:
            kwargs["config"] = _expand([self.options.config])
        if self.options.jump_host:
            kwargs["tunnel"] = await self._jump()
        try:
            conn = await asyncssh.connect(self.target.host, **kwargs)
        except asyncssh.HostKeyNotVerifiable as exc:
            if has_entry:
                raise ConnectFailure("hostkey-changed", str(exc), _ev(exc)) from None
            raise ConnectFailure("hostkey-unknown", str(exc), _ev(exc)) from None
        except asyncssh.PermissionDenied as exc:
            raise ConnectFailure("auth", str(exc) or "permission denied", _ev(exc)) from None
        except asyncssh.DisconnectError as exc:
            raise ConnectFailure("disconnect", str(exc), _ev(exc)) from None
        except (asyncio.TimeoutError, TimeoutError) as exc:
            raise ConnectFailure(
                "timeout", f"no answer within {self.options.connect_timeout:g} s", _ev(exc)
            ) from None
        except ConnectionRefusedError as exc:
            raise ConnectFailure("refused", "connection refused", _ev(exc)) from None
        except socket.gaierror as exc:
            raise ConnectFailure("dns", f"cannot resolve {self.target.host!r}", _ev(exc)) from None
        except OSError as exc:
            if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
                raise ConnectFailure("noroute", exc.strerror or str(exc), _ev(exc)) from None
            if exc.errno == errno.ETIMEDOUT:
                raise ConnectFailure("timeout", exc.strerror or str(exc), _ev(exc)) from None
            raise ConnectFailure("other", str(exc), _ev(exc)) from None
        except (asyncssh.Error, ValueError) as exc:
            raise ConnectFailure("other", str(exc), _ev(exc)) from None
        if kwargs["known_hosts"] is None:
            self._record_host_key(conn)
        return conn

    async def _jump(self) -> asyncssh.SSHClientConnection:
        assert self.options.jump_host
        key = (self.options.jump_host, self.options.config)
        jump = _JUMPS.setdefault(key, _Jump())
        async with jump.lock:
            if jump.conn is None:
                known, _ = self._known_hosts()
                jump.conn = await asyncssh.connect(
                    self.options.jump_host,
                    known_hosts=known,
                    connect_timeout=self.options.connect_timeout,
                    **({"config": _expand([self.options.config])} if self.options.config else {}),
                )
            return jump.conn

    def _record_host_key(self, conn: asyncssh.SSHClientConnection) -> None:
        """Trust on first use, only when the config opted in: append the new key."""
        key = conn.get_server_host_key()
        files = _expand(self.options.known_hosts)
        if key is None or not files:
            return
        target = Path(files[0])
        host = self.target.host
        if self.target.port and self.target.port != 22:
            host = f"[{host}]:{self.target.port}"
        line = f"{host} {key.export_public_key().decode().strip()}\n"
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a", encoding="utf-8") as fh:
            fh.write(line)

    # ------------------------------------------------------------------ probes

    async def start_probe(
        self, name: str, params: dict[str, Any], *, on_stderr: Callable[[str], None] | None = None
    ) -> ProbeRun:
        if self._conn is None:
            await self.connect()
        assert self._conn is not None
        try:
            proc = await self._conn.create_process(
                remote_command(self.target.python), encoding=None
            )
        except (asyncssh.ChannelOpenError, asyncssh.Error, OSError) as exc:
            self._conn = None  # reconnect on the next call; this one is gone
            raise ConnectFailure("lost", f"cannot open a session: {exc}") from None
        stdin = _QuietWriter(proc.stdin)
        stdin.write(frame_payload(name, params))

        async def _wait() -> int | None:
            completed = await proc.wait(check=False)
            return completed.exit_status if completed.exit_signal is None else 128 + 15

        def _force() -> None:
            proc.close()

        conn = self._conn

        async def _kill_group(pid: int) -> None:
            # pid is an int parsed from the node's own announcement; nothing else is sent.
            with contextlib.suppress(asyncssh.Error, OSError):
                await conn.run(
                    f"kill -KILL -- -{int(pid)} {int(pid)} 2>/dev/null", check=False, timeout=5
                )

        run = ProbeRun(
            node=self.target.name,
            probe=name,
            stdin=stdin,
            stdout=proc.stdout,
            stderr_stream=proc.stderr,
            wait_exit=_wait,
            force_close=_force,
            on_stderr=on_stderr,
            kill_group=_kill_group,
        )
        return self._track(run)

    async def close(self) -> None:
        await self._stop_probes()
        if self._conn is not None:
            self._conn.close()
            with contextlib.suppress(asyncssh.Error, OSError):
                await asyncio.wait_for(self._conn.wait_closed(), 3)
            self._conn = None


class _QuietWriter:
    """The probe's stdin. Writing to a channel the node already closed (the probe exited,
    the connection died) is not an error here: the exit status tells what happened."""

    def __init__(self, writer: asyncssh.SSHWriter[bytes]) -> None:
        self._writer = writer

    def write(self, data: bytes) -> None:
        with contextlib.suppress(asyncssh.Error, OSError):
            self._writer.write(data)

    def write_eof(self) -> None:
        with contextlib.suppress(asyncssh.Error, OSError):
            self._writer.write_eof()

    def close(self) -> None:
        with contextlib.suppress(asyncssh.Error, OSError):
            self._writer.close()


def _resolve(host: str) -> str | None:
    try:
        return str(socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0])
    except (OSError, IndexError):
        return None


def _ev(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def close_jumps() -> None:
    """Close the shared bastion connections (after the nodes' connections through them)."""
    jumps = list(_JUMPS.values())
    _JUMPS.clear()
    for jump in jumps:
        if jump.conn is not None:
            jump.conn.close()
            with contextlib.suppress(asyncssh.Error, OSError):
                await jump.conn.wait_closed()
