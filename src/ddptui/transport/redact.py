"""The login node's own redaction pass, for node text that never went through the
probes' redaction: a probe's raw stderr (a crash message, a traceback, what the
training environment prints at every interpreter start) and stdout lines that are
not records. Those can be quoted as finding evidence, so they are scrubbed here with
the very rules the nodes use (probes/_redact.py, loaded from the probe folder: one
source of truth). Only the pattern rules apply: the login node never knows a node's
secret values. Core layer: stdlib only.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Callable
from typing import cast

from ddptui.probeset import helper_source

# One salt per ddptui process: markers hide values, they never need to match the nodes'.
_SALT = secrets.token_hex(8)

_Redactor = Callable[[str, "tuple[str, ...]", str], str]


@functools.cache
def _redact_text() -> _Redactor:
    namespace: dict[str, object] = {"__name__": "ddptui_node_redact"}
    code = compile(helper_source("_redact.py"), "<probes/_redact.py>", "exec")
    exec(code, namespace)  # noqa: S102 - ddptui's own shipped redaction rules
    return cast(_Redactor, namespace["redact_text"])


def scrub(text: str) -> str:
    """`text` with credential-shaped strings, URL passwords, bearer tokens and values
    assigned to secret-named words replaced by `<redacted:HASH>` markers."""
    if not text:
        return text
    return _redact_text()(text, (), _SALT)
