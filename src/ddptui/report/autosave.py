"""Every session saves itself: the report JSON under the user's state directory, after
every step and at the end, atomically. A crash or a closed terminal loses nothing."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import secrets
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddptui.report.export import Report
from typing import Any

KEEP = 200  # sessions kept; older ones are pruned when a new one starts


def sessions_dir() -> Path:
    """$XDG_STATE_HOME/ddptui/sessions (default ~/.local/state/ddptui/sessions)."""
    base = os.environ.get("XDG_STATE_HOME", "").strip()
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".local" / "state"
    return root / "ddptui" / "sessions"


def new_session_id(cluster: str | None) -> str:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", cluster or "session").strip("-.")[:40] or "session"
    return f"{stamp}-{slug}-{secrets.token_hex(2)}"


class Autosaver:
    """Writes one session's JSON on every save(); never raises (a session that cannot be
    saved is a warning, not a lost diagnosis).

    save_later() hands the serialising and writing to one background thread (a big
    cluster's session is megabytes: not on the UI's event loop); saves land in order and
    a stale one never overwrites a newer one. Compact JSON: it is for machines."""

    def __init__(self, cluster: str | None, directory: Path | None = None) -> None:
        self.directory = directory or sessions_dir()
        self.id = new_session_id(cluster)
        self.path = self.directory / f"{self.id}.json"
        self.error: str | None = None
        self.saves = 0
        self._lock = threading.Lock()
        self._issued = 0  # sequence numbers of the saves asked for
        self._written = 0  # ... and of the newest one written
        self._pool: ThreadPoolExecutor | None = None
        self._pending: list[Future[bool]] = []

    @property
    def info(self) -> dict[str, Any]:
        return {"id": self.id, "autosave": str(self.path)}

    def save(self, report: Report) -> bool:
        """Write now (in this thread); True when the file holds this report."""
        self._issued += 1
        return self._write(report, self._issued)

    def save_later(self, report: Report) -> None:
        """Write in the background; the report must not change afterwards."""
        self._issued += 1
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="ddptui-autosave")
        self._pending = [f for f in self._pending if not f.done()]
        self._pending.append(self._pool.submit(self._write, report, self._issued))

    def flush(self, timeout: float | None = None) -> None:
        """Wait for the background saves asked for so far."""
        wait(self._pending, timeout=timeout)

    def _write(self, report: Report, seq: int) -> bool:
        from ddptui.report.export import atomic_write, document_of

        text = json.dumps(document_of(report), separators=(",", ":")) + "\n"
        with self._lock:
            if seq < self._written:
                return True  # a newer session state is on disk already
            try:
                if self.saves == 0:
                    self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
                    _prune(self.directory, KEEP - 1)
                atomic_write(self.path, text, mode=0o600)
            except OSError as exc:
                self.error = f"cannot autosave the session to {self.path}: {exc.strerror or exc}"
                return False
            self._written = seq
            self.saves += 1
            self.error = None
            return True


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _prune(directory: Path, keep: int) -> None:
    sessions = sorted(directory.glob("*.json"), key=_mtime, reverse=True)
    for old in sessions[keep:]:
        with contextlib.suppress(OSError):
            old.unlink()
