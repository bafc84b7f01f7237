"""Rules over a log's facts added in round logs26 (issue 15, blind batch R), read from the
printing programs' own lines (factrules.yaml hints).

srun_step_killed: srun's own report of how each task ended ("srun: error: node25: task
11: Killed", src/srun: the task's signal as strsignal words) names SIGKILL for two or
more tasks (or a task list, "tasks 0-3: Killed") and no task ending another way (an exit
code, a segfault, "Out Of Memory", "Terminated"), and nothing else fails in the log: the
step daemon killed the whole step, which it does at the time limit (SIGTERM, then SIGKILL
after KillWait to the tasks still there); a cgroup OOM kill is reported "Out Of Memory"
and a scancel prints its CANCELLED line to the same output.  SLURM-TIMELIMIT explains
the SIGKILL (CUHKSZ-CSC4005#51: the course cluster's time limit, 30 tasks killed).

sidecar_pod: `kubectl get pods` lists a training operator's replica pod (NAME ending in
-master-N / -worker-N / -launcher-N, as the Kubeflow operators name them) with TWO
containers (READY x/2) failing: the operator starts one container per replica, so the
second is an injected sidecar, Istio's proxy in Kubeflow's profile namespaces, which
sits in the rendezvous traffic (kubeflow/pytorch-operator#258, kubeflow/website#2011).

Core layer, stdlib only; the rules file and the other predicates are factrules.py's."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from ddptui.diagnosis.factcontext import Context, Hit

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules

# hints whose last line (not the first) is kept too (logs/diagnose.py, with logs23's)
LAST_HINTS: Final = frozenset({"srun_killed_last"})
_KILLED: Final = re.compile(r"\bsrun: error: (?P<node>[^\s:]+): tasks? (?P<tasks>[\d,-]+): Killed\b")
# what may be present beside it: the SIGKILL line itself, srun's task-exit wrapper
_BESIDE: Final = frozenset({"C10D-CHILD-SIGKILL", "SLURM-TASK-EXIT"})
_POD: Final = re.compile(r"^\s*(?P<pod>\S+-(?:master|worker|launcher)-\d+)\s+(?P<ready>[0-2])/2\s+(?P<status>\S+)")


def srun_step_killed(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """srun reports several tasks killed by SIGKILL and nothing ending otherwise."""
    first, last = ctx.hints.get("srun_killed"), ctx.hints.get("srun_killed_last")
    if first is None or last is None or "srun_other_end" in ctx.hints:
        return None
    m = _KILLED.search(first)
    if m is None or (first == last and not re.search(r"[,-]", m["tasks"])):
        return None  # one task killed: the OOM killer or a signal, not the whole step
    if set(ctx.present) - _BESIDE:
        return None
    said = (
        f"srun reports the tasks on {m['node']} killed (SIGKILL) and none ending otherwise: "
        "Slurm killed the whole step, as at its time limit"
    )
    fill = {"what": "the step", "job": "<job id>", "node": m["node"], "at": "the end of the log"}
    return [], list(dict.fromkeys((first, last))), said, fill


def sidecar_pod(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """A training operator's replica pod with two containers, failing."""
    line = ctx.hints.get("k8s_sidecar_pod")
    if line is None:
        return None
    text = line.split(": ", 1)[1] if ": " in line else line
    m = _POD.search(text)
    pod = m["pod"] if m else "a replica pod"
    said = f"{pod} runs two containers (the operator starts one): an injected sidecar, Istio's proxy"
    return [], [line], said, {}
