"""logs37: a warning about retries that the same thread then says it got past.

A net plugin (google/nccl-fastsocket, net_fastsocket.cc ncclSocketAsyncConnectV2 and
ncclSocketAcceptV2) warns "Maximum retry reached for connect 3." when flow placement
found no queue after MAX_CONNECT_RETRY tries, takes the first free socket instead and
says at INFO, on the same thread, "NET/FastSocket : Connected after 1000 retries.": the
connection was made (nccl-fastsocket#4, a run that trained).  A retry warning is held per
thread (NCCL's host:pid:tid); the thread's own "connected after N retries" drops it, and
one never followed by it is a soft unknown as before (released at the end).  Core layer.
"""

from __future__ import annotations

import re
from typing import Final

from ddptui.logs.teardown import nccl_thread

RETRY_WARN: Final = re.compile(r"\bNCCL WARN\b.*\bretr(?:y|ies)\b", re.IGNORECASE)
RECOVERED: Final = re.compile(
    r"\b(?:[Cc]onnected|[Aa]ccepted|[Ee]stablished|[Ss]ucceeded) after \d+ (?:retries|retry|attempts?|tries)\b"
)
MAX_HELD: Final = 1024

# (key, order, t, where, text) of a held soft line, as Unknowns.add takes them
Held = tuple[str, int, float | None, str, str]


class RetryWarnings:
    """Retry warnings held per (source, pid, tid) until their thread says it connected."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, int, int], list[Held]] = {}
        self._n = 0

    def hold(self, source: str, line: Held) -> bool:
        """Hold a soft unknown line that warns of retries; False: not one (add it now)."""
        text = line[4]
        if "retr" not in text.lower() or RETRY_WARN.search(text) is None or self._n >= MAX_HELD:
            return False
        th = nccl_thread(text)
        if th is None:
            return False
        self._held.setdefault((source, *th), []).append(line)
        self._n += 1
        return True

    def feed(self, source: str, text: str) -> None:
        """A thread saying it connected after retries: its held warnings were recovered."""
        if not self._held or " after " not in text or RECOVERED.search(text) is None:
            return
        th = nccl_thread(text)
        if th is not None:
            self._held.pop((source, *th), None)

    def unrecovered(self) -> list[Held]:
        """The held lines no recovery followed, in their order."""
        return sorted((h for lines in self._held.values() for h in lines), key=lambda h: h[1])
