"""A rule over the NCCL variables ranks state (NCCL_DEBUG=INFO's "NCCL_X set by
environment to V"), judged as the env audit judges the nodes' environments: a setting of
envkb.NCCL_MUST_MATCH (protocol, algorithm, buffer size, transport, RoCE) that differs
between ranks makes peers disagree on the messages they exchange: NCCL's "message
truncated : receiving 1048576 bytes instead of 65536", or a hang.

Seen on a lent H200 (tests/fixtures/gpu-h200/xr2/): NCCL_PROTO LL against Simple and
NCCL_BUFFSIZE 1 MiB against the default gave "message truncated"; NCCL_ALGO Ring against
Tree hung with no error line.  A rank that never states the variable counts as unset only
once its init completed or its channels connected (NCCL reads them before that).
Core layer, stdlib only."""

from __future__ import annotations

from ddptui.diagnosis.envkb import NCCL_MUST_MATCH
from ddptui.diagnosis.factcontext import Context, Hit, Proc, values_said

UNSET = "unset"


def nccl_env_differs(rules: object, rule: object, ctx: Context) -> Hit | None:
    """Ranks that state different values of a variable that must match."""
    procs = [p for p in ctx.procs if p.nccl_version is not None]
    if len(procs) < 2:
        return None
    for var in sorted(NCCL_MUST_MATCH):
        values: dict[str, list[Proc]] = {}
        for p in procs:
            v = p.nccl_env.get(var)
            if v is None and not (p.transports or p.init_complete):
                continue  # NCCL has not read it yet where this rank's lines stop
            values.setdefault(v if v is not None else UNSET, []).append(p)
        if len(values) < 2:
            continue
        said = values_said(values)
        ev = [
            p.evidence[f"env:{var}"]
            for ps in values.values()
            for p in ps[:1]
            if f"env:{var}" in p.evidence
        ]
        ranks = [p.rank for ps in values.values() for p in ps if p.rank is not None]
        return ranks, ev, f"ranks run with different {var}: {said}", {"var": var, "which": said}
    return None
