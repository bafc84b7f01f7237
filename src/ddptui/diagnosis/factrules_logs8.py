"""Rules over a log's facts added in round logs8 (issue 15): what NCCL and the launchers
say of the host, read from their own lines (factrules.yaml hints): InfiniBand hardware
NCCL could not use, a rank SIGKILLed while it loaded its model.  Core layer, stdlib only;
the rules file and the other predicates are factrules.py's."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from ddptui.diagnosis.factcontext import Context, Hit

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules

# a finding that already names who killed the rank (a scheduler, Kubernetes, the kernel)
_KILLERS: Final = re.compile(
    r"^(?:SLURM-(?:OOM|TIMELIMIT|PREEMPTED|NODE-FAIL|CANCELLED|UNKILLABLE)|K8S-.*|HOST-OOM-KILL|RANK-CUDA-OOM)$"
)
_PID: Final = re.compile(r"\bpid:? (?P<pid>\d+)|Killing subprocess (?P<sub>\d+)")


def ib_verbs_unusable(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """NCCL could not use InfiniBand (its "Failed to open libibverbs.so[.1]", or "NET/IB :
    No device found") and then opened its data sockets on an IPoIB interface (NET/Socket
    on ib*): the node has IB hardware, yet the all-reduces run over TCP.  A node without IB
    prints the first line too (healthy noise); the IPoIB socket is what proves the fabric.
    A log whose processes all name one host is a one-node job: its network is not used."""
    missing = ctx.hints.get("ib_unusable")
    on_ipoib = ctx.hints.get("socket_ipoib")
    if missing is None or on_ipoib is None:
        return None
    hosts = {(p.host or "").partition("#")[0] for p in ctx.procs}
    if len(ctx.procs) >= 2 and len(hosts) == 1 and "" not in hosts:
        # every process on one host: a one-node job, whose ranks talk over P2P/SHM, not
        # the network (MeshTransformer#38's working run prints the same two lines)
        return None
    said = (
        "NCCL could not use InfiniBand and runs its network over TCP sockets on an IPoIB "
        "interface: the node has IB hardware that NCCL does not use (it matters between "
        "nodes; a one-node job talks over P2P/SHM)"
    )
    return [], [missing, on_ipoib], said, {}


def sigkill_while_loading(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """A rank was killed with SIGKILL (torchrun's exitcode -9, DeepSpeed's return code -9)
    while the log says it was loading a model or checkpoint, and nothing names another
    killer: loading is where host RAM peaks (every rank reads the whole checkpoint into
    CPU memory), so the kernel's OOM killer is what killed it."""
    return sigkill_beside(
        ctx,
        "loading",
        "while it loaded its model or checkpoint, where host memory peaks; no scheduler or "
        "container limit is named: the kernel's OOM killer",
    )


def sigkill_beside(ctx: Context, hint: str, when: str) -> Hit | None:
    """A rank killed with SIGKILL (torch's child-signal line present), a line of the log the
    hint `hint` names, and no other killer (a scheduler, Kubernetes, the kernel's own
    lines): the OOM killer, said as "a rank (pid N) was killed with SIGKILL {when}"."""
    kill = ctx.hints.get("sigkill")
    beside = ctx.hints.get(hint)
    if kill is None or beside is None or "C10D-CHILD-SIGKILL" not in ctx.present:
        return None
    if any(_KILLERS.match(i) for i in ctx.present):
        return None
    m = _PID.search(kill)
    pid = f" (pid {m['pid'] or m['sub']})" if m else ""
    return [], [beside, kill], f"a rank{pid} was killed with SIGKILL {when}", {}
