"""An NCCL WARN that a paste or a document wrapped without keeping the space it was cut at
(logs35).  Core layer, stdlib only.

A long WARN (NET/IB's work-completion error runs to 250 characters) reaches users'
threads and documentation pages broken over lines:

    ... ib_plugin.c:2033 NCCL WARN NET/IB: Got completion
    from peer 10.128.8.30<55095> with status=IBV_WC_LOC_PROT_ERR(4) opcode=IBV_WC_SEND(0)
    reqSize=524288 vendor_err=81 req_type=Send localGid ::ffff:10.0.106.7

logs31 joins a line cut at a terminal's width by the single space it keeps; these keep
none.  NCCL prints every line of its own with its ``host:pid:tid [dev]`` prefix, so a line
after a WARN that no signature reads, that goes on in lower case or with a digit, names no
NCCL and matches nothing on its own, is that WARN's continuation: up to WARN_WRAP such lines
are joined while the joined text still matches no signature (scan._after_cut).  A WARN a
signature reads as it stands is never joined, so whole logs are read as before."""

from __future__ import annotations

import re
from typing import Final

from ddptui.diagnosis.factmodel import UNRECOGNIZED
from ddptui.diagnosis.signatures import Signature, classify_line

WARN_WRAP: Final = 3  # continuation lines joined at most
_WARN: Final = " NCCL WARN "
_OWN_HEAD: Final = re.compile(r"\S+:\d+:\d+ \[\d+\]")  # NCCL's prefix: a line of its own
_GOES_ON: Final = re.compile(r"[a-z0-9]")


def unread(text: str, sigs: tuple[Signature, ...]) -> bool:
    """Whether no signature but an honest unknown reads `text`."""
    m = classify_line(text, sigs) if sigs else None
    return m is None or m.signature.id.startswith(UNRECOGNIZED)


def warn_cut(text: str, sigs: tuple[Signature, ...]) -> bool:
    """Whether `text` is an NCCL WARN that no signature reads (its rest may follow)."""
    return _WARN in text and unread(text, sigs)


def continues(body: str, sigs: tuple[Signature, ...] | None) -> bool:
    """Whether a line (its body after any launcher prefix; `sigs`: the signatures it may
    match, None for none) goes on with the WARN above it."""
    return (
        _GOES_ON.match(body) is not None
        and "NCCL" not in body
        and _OWN_HEAD.match(body) is None
        and (sigs is None or unread(body, sigs))
    )
