"""Readings added in round logs29 (issue 15, blind batch U: documentation of Open MPI, the
Slurm manual, Lightning, kubernetes.io, Sherlock, CSC, DLRover, DeepOps, JobSet, Kueue).

self_requeue: slurmstepd's "*** JOB J ON N CANCELLED AT T DUE TO JOB REQUEUE ***" says only
that the job was requeued, not by whom.  A job that requeues itself (a script that traps
the warning signal Slurm sends before the time limit, `--signal=USR1@...`, and runs
`scontrol requeue $SLURM_JOB_ID`: Sherlock's service-jobs page, Slurm's sbatch --signal)
prints so itself ("Job 31182239 received SIGUSR1, re-queueing") before slurmstepd's
line: that requeue is the job's design and comes back as the same job id.  The lines
decide: the job's own words (hints.self_requeue, a line no Slurm daemon printed) before a
REQUEUE (not a PREEMPTION) line of the same job make SLURM-PREEMPTED an info finding;
slurmstepd's PREEMPTION, or a requeue nobody in the job announced, stays an error.

Core layer, stdlib only."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Final

from ddptui.diagnosis.finding import Finding

_REQUEUE_LINE: Final = re.compile(r"\bCANCELLED AT \S+ DUE TO JOB REQUEUE\b")
_JOB: Final = re.compile(r"\*\*\* (?:JOB|STEP) (?P<job>\d+)")
_DAEMON: Final = re.compile(r"\b(?:slurmstepd|slurmctld|slurmd)\b")


def _job_ids(text: str) -> set[str]:
    return set(re.findall(r"\b\d{3,}\b", text))


def self_requeue(
    lead: Finding | None, findings: list[Finding], hints: Mapping[str, str]
) -> tuple[Finding | None, list[Finding]]:
    """SLURM-PREEMPTED for a requeue the job itself announced is no failure (info)."""
    said = hints.get("self_requeue")
    pre = next((f for f in findings if f.id == "SLURM-PREEMPTED"), None)
    if said is None or pre is None or _DAEMON.search(said):
        return lead, findings
    lines = [e for e in pre.evidence if "DUE TO" in e]
    if not lines or not all(_REQUEUE_LINE.search(e) for e in lines):
        return lead, findings  # a preemption line: Slurm's decision, whatever the job said
    jobs = {m["job"] for e in lines if (m := _JOB.search(e)) is not None}
    own = _job_ids(said.partition(": ")[2] or said)
    if jobs and own and not jobs & own:
        return lead, findings  # the job's words name another job
    quiet = dataclasses.replace(pre, severity="info")
    out = [quiet if f is pre else f for f in findings]
    if lead is pre:
        lead = next((f for f in out if f.severity == "error"), None)
    return lead, out
