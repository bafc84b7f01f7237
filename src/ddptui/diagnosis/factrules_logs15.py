"""Rules over a log's facts added in round logs15 (issue 15, blind batch J's misses), read
from the printing program's own lines (factrules.yaml hints).

ib_hca_unfound: NCCL prints "NCCL_IB_HCA set to <list>" (net_ib.cc, once, where the user
named the HCAs) and "NET/IB : No device found." when none of them has an active port, then
"Using network Socket": the job was told which InfiniBand devices to use and NCCL found
none of them, so the all-reduces run over TCP (AR-IB-UNUSED).  A list that only excludes
devices ("^mlx5_bond") names none; a log that states an IPoIB socket is logs8's rule.

ray_worker_vanished: Ray's raylet says "Worker unexpectedly exits with a connection error
code 2. End of file." when a worker's socket closed without the worker reporting an error
(Worker exit type: SYSTEM_ERROR) and lists the kernel's OOM killer first among the
possible causes.  A worker that crashed prints its own crash (a segmentation fault, a
Python fatal error, a core dump) and `ray stop --force` is typed by hand: where the log
holds neither and names no other killer, the SIGKILL was the OOM killer (HOST-OOM-KILL).
Core layer, stdlib only; the rules file and the other predicates are factrules.py's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddptui.diagnosis.factcontext import Context, Hit
from ddptui.diagnosis.factrules_logs8 import _KILLERS

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules


def ib_hca_unfound(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """NCCL_IB_HCA names devices, NET/IB found no device, the network is Socket."""
    named = ctx.hints.get("ib_hca_named")
    missing = ctx.hints.get("ib_unusable")
    socket = ctx.hints.get("net_socket")
    if named is None or missing is None or socket is None or "socket_ipoib" in ctx.hints:
        return None
    said = (
        "NCCL_IB_HCA names the InfiniBand devices to use, yet NCCL found none of them "
        "(NET/IB : No device found) and runs its network over TCP sockets"
    )
    evidence = list(dict.fromkeys([named, missing, socket]))
    return [], evidence, said, {}


def ray_worker_vanished(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """Ray's "Worker unexpectedly exits with a connection error code N. End of file." and
    no crash of the worker's own, no other killer named."""
    eof = ctx.hints.get("ray_worker_eof")
    if eof is None or "crashed" in ctx.hints:
        return None
    if any(_KILLERS.match(i) and i != "HOST-OOM-KILL" for i in ctx.present):
        return None
    said = (
        "a Ray worker's connection closed without an error of its own (Ray: SYSTEM_ERROR, "
        "End of file) and the log shows no crash of it: killed with SIGKILL, by the "
        "kernel's OOM killer (Ray's first named cause)"
    )
    return [], [eof], said, {}
