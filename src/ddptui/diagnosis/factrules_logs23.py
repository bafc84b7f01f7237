"""Rules over a log's facts added in round logs23 (issue 15, blind batch P), read from the
printing programs' own lines (factrules.yaml hints).

bench_init_one_host: nccl-tests / rccl-tests list the devices their ranks run on ("# Rank
0 Pid 28329 on SAIS1020 device 0"), every rank on one host; NCCL's init printed its lines
after that list, up to "NCCL INFO Using network Socket" (NCCL#259's healthy run, cut by
its reporter at "Setting affinity for GPU 0", is not read so) and the log never reaches
the benchmark's table header nor an "Init COMPLETE", in an NCCL older than 2.18 (2.18+
prints "Init START" right after "Using network", so a log that stops there is cut; the
stall rules read 2.18+): the run stopped between NCCL's init and its first size, on one
machine, where NCCL connects the GPUs over P2P/SHM only.  Nothing may fail (an error
finding); NCCL's own warnings that it went on past (a WARN before its last "Using
network") did not stop it.  What single-host hangs there establish most is GPU peer traffic
through an IOMMU or PCIe ACS (P2P-IOMMU, a warning: a pasted excerpt may only be cut
there); nccl-tests#115.

whole_job_one_host: the log lists several ranks, every one on one host, and no rank states
a world larger than the ranks listed: the whole job runs on that host, so the network
interface NCCL chose (bootstrap or NET/Socket) carries nothing between machines and
explains no failure (factrules.py _iface_class).

ib_open_in_use: NCCL's "NET/IB : Unable to open device X" (IB-OPEN, a warning alone) is an
error where the log shows channels over NET/IB/k, k >= 1 (see the function).

Core layer, stdlib only; the rules file and the other predicates are factrules.py's."""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Final

from ddptui.diagnosis.evidence import parse_evidence
from ddptui.diagnosis.factcontext import Context, Hit, one_host

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules
    from ddptui.diagnosis.finding import Finding

# hints whose last line (not the first) is kept (logs/diagnose.py): NCCL's last warning and
# its last "Using network" line, compared by line with the device list
LAST_HINTS: Final = frozenset({"nccl_warn", "nccl_using_net"})
_RELEASE: Final = re.compile(r"NCCL version (\d+)\.(\d+)\.(\d+)")
INIT_START_SINCE: Final = (2, 18, 0)  # the release whose init prints "... - Init START"
_LINENO: Final = re.compile(r"^(?P<src>.*?):(?P<n>\d+): ")


def _line(hint: str | None) -> tuple[str, int] | None:
    m = _LINENO.match(hint or "")
    return (m["src"], int(m["n"])) if m else None


def whole_job_one_host(ctx: Context) -> bool:
    """Several ranks, all on one host, and no stated world larger than them."""
    if one_host(ctx) is None:
        return False
    ranks = {p.rank for p in ctx.procs if p.rank is not None}
    world = max((p.world_size or 0 for p in ctx.procs), default=0)
    return len(ranks) >= 2 and world <= len(ranks)


def _stopped_in_old_init(ctx: Context) -> bool:
    """NCCL's init lines follow the device list in its file, no table header nor Init
    COMPLETE, an NCCL older than INIT_START_SINCE stated, and no warning after them."""
    at_list = _line(ctx.hints.get("bench_devices"))
    at_net = _line(ctx.hints.get("nccl_using_net"))
    if at_list is None or at_net is None or at_list[0] != at_net[0] or at_net[1] <= at_list[1]:
        return False  # NCCL's lines must follow the device list, in the same file
    if "bench_table" in ctx.hints or "init_complete" in ctx.hints:
        return False
    # NCCL 2.18+ prints "Init START" right after "Using network": a log that stops at the
    # latter there is cut (factrules.yaml stalls, logs17); an NCCL the log does not state
    # is not judged
    release = _RELEASE.search(ctx.hints.get("nccl_release", ""))
    if release is None or tuple(map(int, release.groups())) >= INIT_START_SINCE:
        return False
    warned = _line(ctx.hints.get("nccl_warn"))
    # a warning after NCCL's last init line is not one it went on past
    return warned is None or (warned[0] == at_net[0] and warned[1] < at_net[1])


def bench_init_one_host(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """A one-host benchmark stopped after NCCL's init lines, before its first size."""
    if any(sev == "error" for sev in ctx.present.values()) or not whole_job_one_host(ctx):
        return None
    if not _stopped_in_old_init(ctx):
        return None
    listed, net = ctx.hints["bench_devices"], ctx.hints["nccl_using_net"]
    hosts = sorted({p.host for p in ctx.procs if p.host})
    said = (
        f"the benchmark's ranks all run on {hosts[0]}; NCCL's init went on "
        f"({parse_evidence(net).text[:120]!r}) and the log never reaches the benchmark's "
        "first size nor an Init COMPLETE"
    )
    return [], [listed, net], said, {}


# ids whose line is a warning alone and an error where the log shows NCCL's channels
# running over a second IB device (hints.ib_channel_k): ib_open_in_use
IB_OPEN: Final = "IB-OPEN"


def ib_open_in_use(
    first: Finding | None, findings: list[Finding], hints: dict[str, str]
) -> tuple[Finding | None, list[Finding]]:
    """NCCL could not open an IB device, and the log shows channels over NET/IB/k, k >= 1:
    NCCL did not fall back to sockets, some rank runs channels over two or more HCAs while
    one could not be opened, so the ranks do not open the same devices, and a channel on a
    device its peer lacks waits forever (NCCL#2428: the mismatch guard silenced).  Alone
    (NCCL fell back to sockets, or one HCA of a rank's several) it stays a warning."""
    channel = hints.get("ib_channel_k")
    if channel is None or not any(f.id == IB_OPEN and f.severity != "error" for f in findings):
        return first, findings
    shown = parse_evidence(channel).text[:120]
    out = []
    for f in findings:
        if f.id == IB_OPEN and f.severity != "error":
            g = dataclasses.replace(
                f,
                severity="error",
                summary=f"{f.summary}, while channels run over a second IB device ({shown!r}): "
                "the ranks do not open the same HCAs",
                evidence=(*f.evidence, channel)[:5],
            )
            first = g if first is f else first
            out.append(g)
            continue
        out.append(f)
    return first, out
