"""Rules over a log's facts added in round gpu7 (real launcher captures on one lent GPU,
tests/fixtures/gpu-h200/launch/), read from the printing program's own lines
(factrules.yaml hints).

lightning_gpus: Lightning's device check (lightning/fabric/utilities/device_parser.py,
_sanitize_gpu_ids) raises MisconfigurationException(f"You requested gpu: {gpus}\\n But
your machine only has: {all_available_gpus}"); a traceback prints it over two lines.
Trainer(devices=N) asked for more GPUs than the process sees (CUDA_VISIBLE_DEVICES, a
smaller machine): the launch of N local ranks fails before any of them starts.  Under
Slurm the same words mean a task bound to fewer GPUs than `devices` (LAUNCH-LIGHTNING-SLURM
keeps that: this rule holds only where no Slurm line is in the log).
Core layer, stdlib only; the rules file and the other predicates are factrules.py's."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from ddptui.diagnosis.factcontext import Context, Hit

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules

_LIST: Final = re.compile(r"You requested gpu: \[(?P<want>[\d, ]*)\]")
_HAVE: Final = re.compile(r"But your machine only has: \[(?P<have>[\d, ]*)\]")


def _ids(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)]


def _asked(ctx: Context) -> tuple[str, list[int], str | None, list[int] | None] | None:
    """(line, GPUs asked for, the second line, GPUs seen) of Lightning's device check."""
    line = ctx.hints.get("lightning_gpus")
    m = _LIST.search(line) if line is not None else None
    if line is None or m is None:
        return None
    have_line = ctx.hints.get("lightning_gpus_have")
    h = _HAVE.search(have_line) if have_line else None
    return line, _ids(m["want"]), have_line, _ids(h["have"]) if h else None


def lightning_gpus_slurm(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """The same check with Slurm's lines in the log: a task sees fewer GPUs than devices
    (LAUNCH-LIGHTNING-SLURM, whose signature reads the message on one line only)."""
    asked = _asked(ctx)
    if asked is None or "slurm" not in ctx.hints:
        return None
    line, want, have_line, have = asked
    said = f"Lightning was asked for GPUs {want} under Slurm; the task sees " + (
        f"only {have}" if have is not None else "fewer"
    )
    return [], [e for e in (line, have_line) if e], said, {"want": str(want), "have": str(have)}


def lightning_gpus(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """Lightning's "You requested gpu: [..]" (hints.lightning_gpus), no Slurm line."""
    asked = _asked(ctx)
    if asked is None or "slurm" in ctx.hints:
        return None
    line, want, have_line, have = asked
    missing = [g for g in want if have is not None and g not in have]
    lrank = str(missing[0] if missing else max(want, default=0))
    seen = ",".join(map(str, have)) if have is not None else "fewer"
    cvd = f"(not stated; the process sees GPUs {seen})"
    said = (
        f"Lightning was asked for GPUs {want} (Trainer devices) and the process sees "
        + (f"only {have}" if have is not None else "fewer")
        + f": local rank {lrank} has no GPU"
    )
    return [], [e for e in (line, have_line) if e], said, {"lrank": lrank, "cvd": cvd}


# A worker that torch elastic reports killed by SIGABRT or SIGTERM was taken down: the
# watchdog aborts the process after an NCCL error or timeout ("To avoid data
# inconsistency, we are taking the entire process down"), the agent sends SIGTERM to the
# other workers once one failed.  Beside another error, the signal only says a failure
# happened (a wrapper); SIGSEGV, SIGBUS, SIGKILL and the others stay causes.
TAKEN_DOWN: Final = re.compile(r"[Ss]ignal (?:6|15) \(SIG(?:ABRT|TERM)\) received by PID \d+")


def taken_down(first_id: str, evidence: tuple[str, ...]) -> bool:
    """Whether a C10D-CHILD-SIGNAL finding names only SIGABRT or SIGTERM."""
    return (
        first_id == "C10D-CHILD-SIGNAL"
        and bool(evidence)
        and all(TAKEN_DOWN.search(e) for e in evidence)
    )
