"""Round 21 (blind AU3, torchcomms#2358): torch's TCPStore client logs a failed read at
warning level (C10D_WARNING "recvValue failed on ...") and rethrows; where its caller
retried and got through, the warning is all the log holds. Seen only on c10d's
warning-level lines ("[W0506 ...]") and with nothing raised after, the signature is a
warning: a failure shows the raise that follows (a DistNetworkError, a traceback), which
leads as an error. Core layer, stdlib only."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

WARNED_THEN_RAISED: Final = frozenset({"C10D-RESET"})
C10D_WARNING: Final = re.compile(r"^(?:\S+\s)?\[W\d{3,4} ")


def warned_only(sid: str, severity: str, texts: Sequence[str], count: int, raised: bool) -> str:
    """The severity of signature `sid`, whose kept lines are `texts` of `count` seen: a
    warning when torch only warned (every line at c10d's warning level, all of them kept,
    nothing raised in the log), else `severity`."""
    if sid not in WARNED_THEN_RAISED or count != len(texts) or raised:
        return severity
    if all(C10D_WARNING.match(t.lstrip()) for t in texts):
        return "warning"
    return severity
