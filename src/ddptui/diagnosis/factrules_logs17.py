"""Rules over a log's facts added in round logs17 (issue 15, blind batch K's misses that
name an id), read from the printing program's own lines (factrules.yaml hints).

sigkill_host_memory: a rank was killed with SIGKILL (torchrun's "exitcode: -9", DeepSpeed's
"return code = -9") while the log itself states that a process holds a lot of host memory:
ColossalAI's per-step "CPU memory usage: 44096.98 MB" (colossalai.utils.memory), DeepSpeed's
see_memory_usage "CPU Virtual Memory:  used = 120.5 GB, percent = 96.1%".  The hint matches
only large values (16 GB or more held by one process, or 90 % of the host's memory in
use), and no other killer (a scheduler, Kubernetes, the kernel's own lines) is named: the
memory the log was tracking is what ran out, and the kernel's OOM killer sent the SIGKILL
(HOST-OOM-KILL).  A SIGKILL with no such line stays C10D-CHILD-SIGKILL.
Core layer, stdlib only; the rules file and the other predicates are factrules.py's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddptui.diagnosis.factcontext import Context, Hit
from ddptui.diagnosis.factrules_logs8 import sigkill_beside

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules


def sigkill_host_memory(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """A SIGKILLed rank, a line stating large host-memory use, no other killer named."""
    return sigkill_beside(
        ctx,
        "host_memory",
        "after the log stated its large host-memory use; no scheduler or container limit is "
        "named: the kernel's OOM killer",
    )


def nccl_crash(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """A crash report (UCX's "Caught signal 11 (Segmentation fault: ...)", Open MPI's "***
    Process received signal ***", glibc's "Segmentation fault") and, in the log, one of its
    innermost frames (number 0 to 4: past the signal handler's own frames) in libnccl.so:
    UCX's " 3  /path/libnccl.so(+0x120057) [0x7f..]", glibc's backtrace_symbols as Open
    MPI prints it "[host:pid] [ 1] /path/libnccl.so.2(+0x8a1b2)[0x7f..]"."""
    crash = ctx.hints.get("signal_report")
    frame = ctx.hints.get("nccl_frame")
    if crash is None or frame is None:
        return None
    said = "a process crashed and the innermost frames of its crash report are NCCL's (libnccl.so)"
    return [], [crash, frame], said, {}
