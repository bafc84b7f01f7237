"""What the flight recorder and NCCL RAS say, as findings: the same reading for a live look
at the nodes (side.py) and for dumps and answers saved on this machine (offline.py)."""

from __future__ import annotations

from collections.abc import Sequence

from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.kb import kb_finding
from ddptui.job.flight import RankDump, analyse
from ddptui.job.ras import RasStatus
from ddptui.job.stacks import rank_ranges


def flight_findings(dumps: Sequence[RankDump], nodes: list[str]) -> list[Finding]:
    out = []
    for stop in analyse(dumps):
        if stop.diverged:
            out.append(
                kb_finding(
                    "JOB-FR-DIVERGED",
                    nodes,
                    f"flight recorder: ranks part ways at collective #{stop.seq} (pg {stop.pg})",
                    list(stop.diverged),
                    where=stop.where,
                    at=stop.where or "?",
                    seq=stop.seq,
                    pg=stop.pg,
                    what="; ".join(stop.diverged),
                )
            )
            continue
        missing = f"; rank(s) {rank_ranges(stop.missing)} never enqueued it" if stop.missing else ""
        if stop.timed_out is False and not stop.missing:
            out.append(
                kb_finding(
                    "JOB-FR-INFLIGHT",
                    nodes,
                    f"flight recorder: collective #{stop.seq} ({stop.op}) was in flight for "
                    f"{stop.age_s:.0f} s when dumped (timeout {stop.timeout_s:.0f} s), last "
                    f"completed #{stop.last_completed}, at {stop.where or '?'}",
                    [f"frames: {' <- '.join(stop.frames)}"],
                    rank=stop.ranks[0] if stop.ranks else None,
                    where=stop.where,
                    seq=stop.seq,
                    op=stop.op,
                    age=f"{stop.age_s:.0f}",
                    limit=f"{stop.timeout_s:.0f}",
                )
            )
            continue
        out.append(
            kb_finding(
                "JOB-FR-TIMEOUT",
                nodes,
                f"flight recorder: collective #{stop.seq} ({stop.op}) {stop.state}, last completed "
                f"#{stop.last_completed}, at {stop.where or '?'}{missing}",
                [
                    f"frames: {' <- '.join(stop.frames)}",
                    f"ranks with the entry: {rank_ranges(stop.ranks)}",
                ],
                rank=stop.ranks[0] if stop.ranks else None,
                who=rank_ranges(stop.ranks),
                where=stop.where,
                at=stop.where or "?",
                seq=stop.seq,
                last=stop.last_completed,
                op=stop.op,
                sizes=stop.sizes,
                state=stop.state,
                pg=stop.pg,
            )
        )
    return out


def ras_findings(
    answers: Sequence[tuple[str, RasStatus]], nodes: Sequence[str] = ()
) -> list[Finding]:
    """A problem finding per answer that reports one; else one status line for them all."""
    out = []
    for source, status in answers:
        if status.problems:
            out.append(
                kb_finding(
                    "JOB-RAS-PROBLEM",
                    nodes,
                    f"NCCL RAS ({source}): {status.problems[0]}",
                    status.problems[:6],
                    node=source,
                    what="; ".join(status.problems[:3]),
                )
            )
    if out or not answers:
        return out
    source, status = answers[-1]
    sizes = ", ".join(str(c.size) for c in status.comms)
    counts = status.collective_counts or {}
    return [
        kb_finding(
            "JOB-RAS-OK",
            nodes,
            f"NCCL RAS: NCCL {status.version or '?'}, {len(status.comms)} communicator(s) "
            f"(size {sizes or '?'}), no missing rank, no error",
            [f"{s}: {a.form} form" for s, a in answers]
            + ([f"collective counts (launched, not progress): {counts}"] if counts else []),
            version=status.version or "?",
        )
    ]
