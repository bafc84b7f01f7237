"""A Slurm job as a cluster source: its nodes, in Slurm's order, and their state.

Asks the controller with `scontrol show job -o J` and `scontrol show node -o LIST`
(bounded in time: a controller that does not answer is an error, not a hang); the
job's NodeList is expanded with our own hostlist parser, in Slurm's order (the order
`scontrol show hostnames` gives, which srun's task ranks follow). Core layer.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field

from ddptui.sources.hostlist import HostlistError, expand

QUERY_TIMEOUT_S = 20.0
JOB_ID = re.compile(r"^\d+(_\d+)?(\+\d+)?$")
BAD_NODE_STATES = ("DOWN", "FAIL", "NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN", "FUTURE")


class SlurmError(Exception):
    """The job cannot be used (usage error, exit 2); str() says what, where, how to fix."""


@dataclass(frozen=True)
class SlurmJob:
    id: str
    state: str
    user: str
    uid: int | None
    nodes: list[str]
    nodelist: str
    batch_host: str | None = None
    node_states: dict[str, str] = field(default_factory=dict)
    node_reasons: dict[str, str] = field(default_factory=dict)

    def unusable(self) -> dict[str, str]:
        """Nodes srun cannot reach, with Slurm's words why (DOWN, NOT_RESPONDING...)."""
        return unusable_nodes(self.nodes, self.node_states, self.node_reasons)

    def drained(self) -> dict[str, str]:
        return {n: s for n, s in self.node_states.items() if "DRAIN" in s and n in self.nodes}


def unusable_nodes(
    nodes: list[str], states: Mapping[str, str], reasons: Mapping[str, str]
) -> dict[str, str]:
    out: dict[str, str] = {}
    for node in nodes:
        state = states.get(node, "")
        words = re.split(r"[+*~#!%$@^-]", state.upper())
        if any(bad in words for bad in BAD_NODE_STATES):
            reason = reasons.get(node)
            out[node] = f"Slurm reports node {node} {state}" + (
                f" (reason: {reason})" if reason else ""
            )
    return out


def job_id_from(arg: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The job to use: the argument, else $SLURM_JOB_ID; neither is a usage error."""
    env = os.environ if environ is None else environ
    job = (arg or "").strip() or env.get("SLURM_JOB_ID", "").strip()
    if not job:
        raise SlurmError(
            "--slurm: no job id given and not inside a Slurm allocation ($SLURM_JOB_ID is "
            "not set). Either run ddptui inside the job (`salloc -N4` then `ddptui check "
            "--slurm`, or as the first line of your sbatch script), or name the job: "
            "`ddptui check --slurm JOBID` (squeue --me lists yours)."
        )
    if not JOB_ID.match(job):
        raise SlurmError(f"--slurm: {job!r} is not a Slurm job id (a number like 1234)")
    return job


def _scontrol(args: list[str], timeout: float) -> str:
    exe = shutil.which("scontrol")
    if exe is None:
        raise SlurmError(
            "--slurm: Slurm's commands are not on PATH (scontrol not found): run ddptui "
            "on a login node of the cluster, or load Slurm's module"
        )
    try:
        proc = subprocess.run(
            [exe, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise SlurmError(
            f"--slurm: the Slurm controller did not answer within {timeout:g} s "
            f"(`scontrol {' '.join(args)}`); is slurmctld up? (`scontrol ping`)"
        ) from None
    except OSError as exc:
        raise SlurmError(f"--slurm: cannot run scontrol: {exc.strerror or exc}") from None
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise _CommandFailed(err[-1] if err else f"scontrol exited with {proc.returncode}")
    return proc.stdout


class _CommandFailed(Exception):
    pass


def _fields(line: str) -> dict[str, str]:
    """`Key=Value Key2=Value2 ...` of `scontrol -o` (values have no spaces, except the
    last keys of some records; good enough for the keys read here)."""
    return {m.group(1): m.group(2) for m in re.finditer(r"(\w[\w:/]*)=(\S*)", line)}


def query_job(job: str, *, timeout: float = QUERY_TIMEOUT_S) -> SlurmJob:
    try:
        out = _scontrol(["show", "job", "-o", job], timeout)
    except _CommandFailed as exc:
        text = str(exc)
        if "Invalid job id" in text:
            raise SlurmError(
                f"--slurm {job}: no such job (Slurm: {text}); `squeue --me` lists your jobs"
            ) from None
        if "configuration source" in text:
            raise SlurmError(
                f"--slurm {job}: this machine has no Slurm configuration (scontrol: {text}); "
                "run ddptui on a login node of the cluster, or set SLURM_CONF"
            ) from None
        if "Unable to contact" in text or "Connection refused" in text or "timed out" in text:
            raise SlurmError(
                f"--slurm {job}: the Slurm controller does not answer ({text}); is slurmctld "
                "up? (`scontrol ping`)"
            ) from None
        raise SlurmError(f"--slurm {job}: scontrol failed: {text}") from None
    line = next((ln for ln in out.splitlines() if ln.strip()), "")
    f = _fields(line)
    state = f.get("JobState", "?")
    user_field = f.get("UserId", "?")
    m = re.match(r"^(.*)\((\d+)\)$", user_field)
    user, uid = (m.group(1), int(m.group(2))) if m else (user_field, None)
    if uid is not None and os.getuid() not in (0, uid):
        raise SlurmError(
            f"--slurm {job}: the job belongs to {user}, not to you; ddptui reaches only "
            "your own jobs' nodes (srun refuses others')"
        )
    if state != "RUNNING":
        hint = {
            "PENDING": f"it is waiting for nodes (reason: {f.get('Reason', '?')}); run ddptui "
            "once `squeue -j " + job + "` shows R",
            "COMPLETED": "it has ended; check a running job (or run ddptui inside the next one)",
        }.get(state, "only a running job has nodes to check")
        raise SlurmError(f"--slurm {job}: the job is {state}, not RUNNING: {hint}")
    nodelist = f.get("NodeList", "")
    try:
        nodes = expand(nodelist) if nodelist and nodelist != "(null)" else []
    except HostlistError as exc:
        raise SlurmError(f"--slurm {job}: cannot read the job's NodeList: {exc}") from None
    if not nodes:
        raise SlurmError(f"--slurm {job}: the job has no nodes (NodeList={nodelist!r})")
    states, reasons = _node_states(nodelist, timeout)
    return SlurmJob(
        id=job,
        state=state,
        user=user,
        uid=uid,
        nodes=nodes,
        nodelist=nodelist,
        batch_host=f.get("BatchHost") or None,
        node_states=states,
        node_reasons=reasons,
    )


def _node_states(nodelist: str, timeout: float) -> tuple[dict[str, str], dict[str, str]]:
    try:
        out = _scontrol(["show", "node", "-o", nodelist], timeout)
    except _CommandFailed:
        return {}, {}  # node details are a bonus; the job's own record is what counts
    return parse_node_states(out)


def parse_node_states(out: str) -> tuple[dict[str, str], dict[str, str]]:
    """{node: State}, {node: Reason} from `scontrol show node -o` output."""
    states: dict[str, str] = {}
    reasons: dict[str, str] = {}
    for line in out.splitlines():
        f = _fields(line)
        name = f.get("NodeName")
        if not name:
            continue
        states[name] = f.get("State", "")
        m = re.search(r"\bReason=(.*?)(?: \[|$)", line)
        if m and m.group(1).strip():
            reasons[name] = m.group(1).strip()
    return states, reasons
