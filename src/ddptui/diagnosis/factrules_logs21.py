"""Rules over a log's facts added in round logs21 (issue 15, blind batch N's misses that
name an id), read from the printing program's own lines (factrules.yaml hints).

accept_closed_early: NCCL 2.16-2.26's bootstrap listener (misc/socket.cc) accepts a
connection, then socketFinalizeAccept waits for the 8-byte magic the connecting NCCL
sends first (`socketWait(NCCL_SOCKET_RECV, sock, &magic, sizeof(magic), ...)`).  A
peer that closes before those 8 bytes makes socketProgress WARN "Connection closed by
remote peer" and the error climbs NCCL's return trace ("misc/socket.cc:L -> 6") through
that magic wait and then through the call of socketFinalizeAccept in
socketProgressState.  Where both frames are the same release's pair, the closed
connection was an accepted one that never said it was NCCL: a scanner, a health check
or another job on the port (NCCL#1612; 2.27.3 ignores such connections).  The pairs are
each release's line numbers from NVIDIA/nccl's tags (v2.16.2 to v2.26.6): the magic
wait, the finalize call.  A closed connection without that pair stays BOOT-PEERCLOSED
(a peer that died).
Core layer, stdlib only; the rules file and the other predicates are factrules.py's."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from ddptui.diagnosis.factcontext import Context, Hit

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules

# release -> (socketFinalizeAccept's magic wait, socketProgressState's finalize call)
ACCEPT_FRAMES: Final = {
    "2.16.2": (424, 551),
    "2.16.5": (424, 558),
    "2.18.3": (427, 561),
    "2.19.1": (428, 562),
    "2.20.3": (428, 564),
    "2.23.4": (429, 566),
    "2.24.3": (474, 628),
    "2.26.2": (475, 629),
}
_FRAME: Final = re.compile(r"\bmisc/socket\.cc:(?P<line>\d+) -> \d+")


def accept_closed_early(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """A peer closed an accepted bootstrap connection before sending NCCL's magic."""
    closed = ctx.hints.get("peer_closed")
    magic, finalize = ctx.hints.get("accept_magic"), ctx.hints.get("accept_finalize")
    if closed is None or magic is None or finalize is None:
        return None
    m, f = _FRAME.search(magic), _FRAME.search(finalize)
    if m is None or f is None:
        return None
    pair = (int(m["line"]), int(f["line"]))
    releases = [r for r, p in ACCEPT_FRAMES.items() if p == pair]
    if not releases:
        return None
    said = (
        "NCCL's listener accepted a connection whose other end closed it before sending "
        f"NCCL's 8-byte magic: the error climbs through socketFinalizeAccept's magic wait "
        f"(socket.cc:{pair[0]}, then :{pair[1]}, NCCL {releases[0]}'s lines); a peer that "
        "never said it was NCCL reached the bootstrap port"
    )
    return [], [closed, magic, finalize], said, {}
