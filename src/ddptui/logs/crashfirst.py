"""gpu8: a rank that raised its own exception first, and the peers that lost it after.

When one rank's Python exception (no signature knows it: an error in the user's code)
comes before another rank's "the peer went away" error (NCCL's "Connection closed by remote
peer", the rendezvous closed by the agent that gave up, the watchdog taking the survivor
down), the exception is the first cause and the peer's error its consequence: the log
leads with LOGS-UNRECOGNIZED quoting the crashing rank's line.  Real captures:
tests/fixtures/gpu-h200/fail8/restart.log (torchrun --max-restarts 1, one agent) and
restart2-n0/-n1.log (two agents, c10d rendezvous).  Core layer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Final, Protocol

# the findings that only say a peer went away (a consequence when a peer crashed first)
PEER_LOSS: Final = (
    "BOOT-PEERCLOSED", "C10D-RDZV-CLOSED", "C10D-CLOSED", "GLOO-PEER-*", "WATCHDOG-TEARDOWN",
)
_RANK_KEY: Final = re.compile(r"^rank (\d+)\b")


class _Hit(Protocol):
    @property
    def order(self) -> int: ...
    @property
    def rank(self) -> int | None: ...


class _Error(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def order(self) -> int: ...
    @property
    def text(self) -> str: ...


def peer_loss(fid: str) -> bool:
    return any(fnmatchcase(fid, p) for p in PEER_LOSS)


def crashed_first(
    lead: str | None,
    per_id: Mapping[str, Sequence[_Hit]],
    hard: Sequence[_Error],
    own_exception: re.Pattern[str],
) -> bool:
    """True where the leading finding is a peer's loss and another rank's own exception
    was printed before it."""
    if lead is None or not peer_loss(lead) or not per_id.get(lead):
        return False
    hit = per_id[lead][0]
    for e in hard:
        if e.order >= hit.order or own_exception.search(e.text) is None:
            continue
        m = _RANK_KEY.match(e.key)
        if hit.rank is None or m is None or int(m[1]) != hit.rank:
            return True
    return False
