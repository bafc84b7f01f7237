"""gpu8: torch's flight-recorder dump signal, as a rank that was not waiting sees it.

When one rank's watchdog times out, ProcessGroupNCCL tells every other rank through the
store, and each prints "[PG ID 0 PG GUID 0(default_pg) Rank 1] Received a dump signal due
to a collective timeout from  rank 0 ... Last enqueued NCCL work: 16, last completed NCCL
work: 16." (ProcessGroupNCCL.cpp).  A rank whose enqueued work is all completed was in no
collective: the rank named waited in one this rank never entered.  That is the stalled
rank's own view (tests/fixtures/gpu-h200/fail8/hf-stall-n1.log: the HF Trainer's rank 1 slept
in a callback while rank 0 timed out); a rank that was waiting too has work still in flight
and says nothing here.  Core layer.
"""

from __future__ import annotations

import re
from typing import Final

DUMP_FROM: Final = re.compile(
    r"\bRank (?P<rank>\d+)\] Received a dump signal due to a collective timeout from\s+rank "
    r"(?P<origin>\d+)\b.*?[Ll]ast enqueued NCCL work: (?P<enq>\d+), last completed NCCL work: "
    r"(?P<done>\d+)"
)


def idle_receiver(text: str) -> tuple[int, int] | None:
    """(the rank whose watchdog timed out, the receiving rank) where the receiver had no
    work in flight."""
    if "dump signal due to" not in text:
        return None
    m = DUMP_FROM.search(text)
    if m is None or m["enq"] != m["done"] or m["rank"] == m["origin"]:
        return None
    return int(m["origin"]), int(m["rank"])
