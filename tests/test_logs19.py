"""Round logs19 (issue 15, blind batch M's misses that name an id): each reading comes
from the printing program's own message format (bash's job status for a SIGKILLed
child, Ubuntu's command-not-found handler) and is checked on the real excerpt as pasted
and on the neighbours it must leave alone."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from corpus_excerpts import excerpt, ids, lead

from ddptui.logs.diagnose import diagnose_lines


def test_bashs_killed_job_status_is_the_oom_killer_where_no_killer_is_named() -> None:
    """bash prints "SCRIPT: line N: PID Killed   CMD" for a foreground job a SIGKILL
    ended; the shell lived on, so one process was picked and killed: the OOM killer
    (FfDL#127: the learner pod's memory limit, exit 137).  A killer the log names
    (Kubernetes' OOMKilled, Slurm's cancel) leads instead; torchrun's exitcode -9 alone
    stays C10D-CHILD-SIGKILL."""
    d = excerpt("m1-k8s-oom-ffdl-127")
    assert lead(d) == "HOST-OOM-KILL", ids(d)
    assert d.first is not None and "python3 (pid 36)" in d.first.summary
    pai = excerpt("e-k8s-oomkilled-pai-5464")  # the same shell line inside a pod's OOMKilled status
    assert lead(pai) == "K8S-OOMKILLED", ids(pai)
    cancelled = diagnose_lines([
        "slurmstepd: error: *** JOB 42 ON n1 CANCELLED AT 2024-01-01T00:00:00 ***",
        "run.sh: line 3: 99 Killed                  python train.py",
    ], "x")
    assert "HOST-OOM-KILL" not in ids(cancelled), ids(cancelled)
    torchrun = diagnose_lines(["  exitcode  : -9 (pid: 36071)"], "x")
    assert lead(torchrun) == "C10D-CHILD-SIGKILL", ids(torchrun)
    bare = diagnose_lines(["Killed"], "x")
    assert lead(bare) == "C10D-CHILD-SIGKILL", ids(bare)


def test_command_not_found_in_the_handlers_words_is_the_launcher_missing() -> None:
    """Ubuntu's command-not-found handler says "Command 'torchrun' not found, did you
    mean:"; awsome-distributed-ai#245 pasted it unquoted, "command torchrun not found"
    (the Slurm script ran torchrun without activating its conda environment).  Only the
    launchers and python the signature names; the handler's suggestion lines and another
    program's missing subcommand stay silent."""
    d = excerpt("m1-cmdnotfound-awsome-distributed-ai-245")
    assert lead(d) == "LAUNCH-CMD-NOTFOUND", ids(d)
    ubuntu = diagnose_lines(["Command 'torchrun' not found, did you mean:"], "x")
    assert lead(ubuntu) == "LAUNCH-CMD-NOTFOUND", ids(ubuntu)
    for quiet in ("  command 'deepspeed' from deb python3-deepspeed", "Subcommand python not found", "command nvcc not found"):
        q = diagnose_lines([quiet], "x")
        assert "LAUNCH-CMD-NOTFOUND" not in ids(q), (quiet, ids(q))
