"""Rules over a log's facts added in round logs19 (issue 15, blind batch M's misses that
name an id), read from the printing program's own lines (factrules.yaml hints).

shell_child_killed: bash reports a foreground job that a signal ended as
"SCRIPT: line N: PID Killed   COMMAND" (jobs.c, the job's status is strsignal(SIGKILL),
"Killed", then the command as typed).  The shell that started the command lived on to
print it: the SIGKILL went to that one process, not to the job step, the container or
the process group (a scheduler's cancel, a container stop, a time limit end the shell
too, and name themselves: SLURM-*, K8S-*).  What picks one process and SIGKILLs it is
the OOM killer, the kernel's or the container's memory cgroup (FfDL#127: the learner
pod's memory limit, "line 18: 36 Killed python3 convolutional_network.py", exit 137).
Where a killer is named it leads instead; torchrun's and DeepSpeed's "-9" without the
shell's line stays C10D-CHILD-SIGKILL.
Core layer, stdlib only; the rules file and the other predicates are factrules.py's."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from ddptui.diagnosis.factcontext import Context, Hit
from ddptui.diagnosis.factrules_logs8 import _KILLERS

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules

_JOB: Final = re.compile(r": line (?P<line>\d+): +(?P<pid>\d+) Killed +(?P<cmd>\S+)")


def shell_child_killed(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """bash's "line N: PID Killed  COMMAND" for a process it started, no killer named."""
    line = ctx.hints.get("shell_killed")
    if line is None or "C10D-CHILD-SIGKILL" not in ctx.present:
        return None
    if any(_KILLERS.match(i) for i in ctx.present):
        return None
    m = _JOB.search(line)
    what = f"{m['cmd'].rsplit('/', 1)[-1]} (pid {m['pid']})" if m else "a process"
    said = (
        f"the shell that started {what} reports it Killed (SIGKILL) and lived on to say so: "
        "one process was chosen and killed, as the OOM killer does (the kernel's, or the "
        "container's memory limit); no scheduler or container stop is named"
    )
    return [], [line], said, {}
