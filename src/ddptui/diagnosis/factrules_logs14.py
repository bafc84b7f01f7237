"""Rules over facts added in round logs14 (issue 15), read from what every process states
about itself rather than from one excerpt.

world_of_one: MPI's own hello world (MPI_Comm_rank / MPI_Comm_size) and any script that
prints its rank and world say "process <r> of <n>"; under `mpirun -np N` (N >= 2) each
process of one world states a different rank of N.  Two or more processes that each state
rank 0 of a world of 1 are each a world of their own: the binary was built against another
MPI than the mpirun that started it (Open MPI vs MPICH), or reads no rank from it, so N
copies ran side by side (LAUNCH-INDEPENDENT-JOBS).

main_first_bar: a progress bar of data preparation (tokenising, caching, mapping) that had
run as long as the collective timeout when the job failed is the main process working
alone while the others waited at a barrier (LOGS-MAIN-FIRST-WAIT), the pattern of
transformers'/accelerate's main_process_first() and of rank-0-only preprocessing.
Core layer, stdlib only; the rules file and the other predicates are factrules.py's."""

from __future__ import annotations

import re
from typing import Final

from ddptui.diagnosis.evidence import parse_evidence
from ddptui.diagnosis.factcontext import Context, Hit


def world_of_one(rules: object, rule: object, ctx: Context) -> Hit | None:
    """The launcher asked for N >= 2 processes (facts.py LAUNCH_N) and two or more lines
    each state rank 0 of a world of 1 (facts.py WORLD_OF_ONE)."""
    if ctx.launch_n is None or ctx.launch_n[0] < 2 or len(ctx.world_of_one) < 2:
        return None
    n, launch = ctx.launch_n
    command = parse_evidence(launch).text
    said = (
        f"the launcher asked for {n} processes ({command[:80]}) and "
        f"{len(ctx.world_of_one)} of them each say they are rank 0 of a world of 1"
    )
    fill = {
        "count": str(len(ctx.world_of_one)),
        "hosts": f"processes of `{command[:60]}`",
        "ranks": "0 of 1 (each a world of its own)",
    }
    return [], [launch, *ctx.world_of_one[:3]], said, fill


# A bar of data preparation (what main_process_first() blocks and "rank 0 first, then
# barrier()" code run on one process): tokenising, mapping, caching, loading a dataset.
_PREP: Final = re.compile(
    r"(?i:\b(?:tokeni[sz]\w*|cach\w*|latents?|preprocess\w*|dataset|download\w*|"
    r"filter\w*|group\w*|pack\w*|convert\w*|prepar\w*|index\w*|shard\w*|load\w*)\b)"
    r"|\b[Mm]ap\b(?!@)"  # datasets' "Map: 12%|", not a metric's "mAP@.5"
)
_NOT_PREP: Final = re.compile(
    r"(?i)\b(?:epoch|train\w*|step|iter\w*|batch|eval\w*|valid\w*|test\w*|infer\w*|generat\w*|sampl\w*)"
)
# torch's defaults: 30 minutes for a process group, 10 minutes for NCCL's (recent torch)
_DEFAULTS_S: Final = (600, 1800)
# A process group's first collectives are its setup (DDP's parameter broadcast, barriers):
# a watchdog timing out in one of these waited before any training step.
_SETUP_SEQ: Final = 5
_SEQ: Final = re.compile(r"SeqNum[ =](\d+)")


def main_first_bar_alone(rules: object, rule: object, ctx: Context) -> Hit | None:
    """main_first_bar where the bar alone says who was elsewhere (at most one rank's
    watchdog: LOGS-NOT-IN-COLLECTIVE cannot name an absent rank from the ranks' numbering):
    this reading, which says what the bar's work was, leads."""
    return main_first_bar(rules, rule, ctx) if len(ctx.collective) <= 1 else None


def main_first_bar_beside(rules: object, rule: object, ctx: Context) -> Hit | None:
    """main_first_bar where several ranks' watchdogs name the ranks that waited:
    LOGS-NOT-IN-COLLECTIVE (the absent rank by its number) leads, this one follows."""
    return main_first_bar(rules, rule, ctx) if len(ctx.collective) > 1 else None


def main_first_bar(rules: object, rule: object, ctx: Context) -> Hit | None:
    """One process's progress bar of data preparation had run as long as the collective
    timeout when the job failed: every other rank waited (at main_process_first()'s
    barrier, or a barrier after rank-0-only preprocessing) while the main process worked
    alone, and their wait timed out.  The timeout is the one the watchdog states, else
    torch's default (the bar at 30:0x or 10:0x when a failure followed).  A bar without a
    label counts when the collective that timed out is among the process group's first
    (its setup: no training step had run)."""
    if ctx.progress is None:
        return None
    seconds, label, line = ctx.progress
    failed = any(v == "error" for v in ctx.present.values()) or "LOGS-UNRECOGNIZED" in ctx.present
    if not failed or _NOT_PREP.search(label):
        return None
    if ctx.timeout_ms:
        limit = ctx.timeout_ms / 1000
        if not 0.8 * limit <= seconds < limit + 300:
            return None
    elif not any(d <= seconds < d + 90 for d in _DEFAULTS_S):
        return None
    else:
        limit = float(next(d for d in _DEFAULTS_S if d <= seconds < d + 90))
    seqs = [int(m[1]) for v in ctx.collective.values() if (m := _SEQ.search(v))]
    if not _PREP.search(label) and not (seqs and max(seqs) <= _SETUP_SEQ):
        return None
    what = repr(label.strip(" :")) if label.strip(" :") else "a progress bar"
    ran = f"{seconds // 60}:{seconds % 60:02d}"
    said = (
        f"one process's {what} had run {ran} when the job failed, about the "
        f"{limit / 60:g}-minute collective timeout"
    )
    if seqs:
        said += f" (the waiting rank timed out in collective #{max(seqs)}"
        said += ", before any training step)" if max(seqs) <= _SETUP_SEQ else ")"
    ev = [line, *[ctx.watchdog_lines[r] for r in sorted(ctx.watchdog_lines)[:2]]]
    return [], ev, said, {}
