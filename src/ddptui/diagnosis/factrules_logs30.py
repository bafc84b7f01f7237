"""Readings added in round logs30 (issue 15, blind batch V: the Slurm FAQ, NeMo, torchtitan,
Megatron-LM, nanotron, aws-ofi-nccl, kubeflow, HPC centres' and projects' docs).

LoggerExit: Python's logging.handlers.QueueListener runs a thread (`_monitor`) that reads
the records worker processes put on a multiprocessing queue; when the processes at the
other end have exited and the pipe closes, its `queue.get` raises EOFError and Python
prints "Exception in thread Thread-N:" with that traceback (frames in logging/handlers.py
`_monitor` -> `dequeue`, multiprocessing/connection.py, ending in a bare EOFError).  That is
the logger's teardown, not the training's failure, where the lines just before the
traceback say the work was done: a checkpoint saved, training finished (OFA-Sys/
Chinese-CLIP's notebook: the last epoch validated, epoch_latest.pt saved, then the EOFError
at interpreter exit).  The same traceback after a training step (a worker that vanished
mid-run, killed without a word) stays an honest unknown.  Round 21 (blind AT3, an MLPerf
SSD run that trained): a traceback whose frames are multiprocessing's exit finalizers
(util.py `_run_finalizers` / `_exit_function`: a semaphore's `sem_unlink` raising
FileNotFoundError because another process unlinked it first) is interpreter exit wherever it
comes: the process was ending, and whatever failed before it says so in its own lines.

credential_clock: Slurm's credentials (signed by munge) carry the time they were made; a
node whose clock is off the controller's rejects them as expired.  slurmd says "Invalid job
credential from <address>: Job credential expired", srun "Task launch for J failed on node
N: Job credential expired", munge "Munge decode failed: Expired credential".  The Slurm FAQ
("Why are jobs allocated nodes and then unable to initiate programs on some nodes?", and
its clock section) and c3nl_cluster#62 (the admins synced NTP) establish the clocks as the
cause: FABRIC-CLOCK-SKEW, whatever else the launch failure says.

slurm_wrapper_alone: srun's and slurmstepd's words that a task exited or that Slurm ended the
step (SLURM-TASK-EXIT, SLURM-CANCELLED: wrappers, factrules.yaml) give way to a line that
says more, and with none the failure is an honest unknown quoting them.  Where the log
holds no failure line at all besides Slurm's own ("srun: Force Terminated job", "srun:
First task exited 30s ago", the Slurm FAQ's pastes), the unknown would quote only that
line: Slurm's finding leads instead, with its fix (sacct's State and Reason say who ended
the step, and which task exited first).

ib_asked_unfound: the job asked for InfiniBand by name (NCCL prints "NCCL_IB_DISABLE set by
environment to 0"), and NCCL found no IB device (NET/IB : No device found) or could not open
libibverbs: IB the job means to use is not visible to NCCL, and the all-reduces go over TCP
(pytorch#111424: /dev/infiniband was not mapped into the Slurm/pyxis container).  The
logs15 rule reads the same for NCCL_IB_HCA naming devices; an IPoIB socket, logs8's.

Core layer, stdlib only."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from ddptui.diagnosis.factcontext import Context, Hit
from ddptui.diagnosis.finding import Finding

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules

_HEADER: Final = re.compile(r"\bTraceback \(most recent call last\)")
_THREAD: Final = re.compile(r"^\s*Exception in thread [^:]+:\s*$")
_FRAME: Final = re.compile(r'^\s*File "[^"]+", line \d+, in [\w<>.]+\s*$')
# the QueueListener's reader loop (logging/handlers.py, Python 3.2+)
_MONITOR: Final = re.compile(r'logging[/\\]handlers\.py", line \d+, in _monitor\b')
_EOF: Final = re.compile(r"^\s*EOFError\s*$")
# multiprocessing's exit finalizers (multiprocessing/util.py, Python 3), and the exception
# line that ends their traceback
_FINALIZER: Final = re.compile(
    r'multiprocessing[/\\]util\.py", line \d+, in (?:_run_finalizers|_exit_function)\b'
)
_RAISED: Final = re.compile(r"^\s*(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\b(?::.*)?$")
# the lines a run prints when its work is done (the triggers in logs/prefilter.py)
FINISHED: Final = re.compile(
    r"\bSaved checkpoint\b|\bTraining (?:completed|finished)\b|\bSaving final checkpoint\b"
)
MAX_SOURCES: Final = 4096
# the traceback starts on the line right after the line saying the work was done
# (lines the prefilter skips are not seen: the line numbers say nothing came between)
NEAR: Final = 1


class LoggerExit:
    """Per source: where the current traceback started, whether the line before it said the
    work was done, and whether its frames are the QueueListener's reader thread."""

    def __init__(self) -> None:
        self._done: dict[str, int] = {}  # source -> line number of its last 'done' line
        self._start: dict[str, tuple[int, bool]] = {}
        self._monitor: set[str] = set()
        self._finalizer: set[str] = set()  # the current traceback is exit finalizers'
        self._thread: set[str] = set()  # "Exception in thread X:" just said, header next

    def feed(self, source: str, order: int, lineno: int, text: str) -> None:
        thread = _THREAD.match(text) is not None
        if thread or _HEADER.search(text) is not None:
            if source not in self._thread and len(self._start) < MAX_SOURCES:
                done = self._done.get(source)
                self._start[source] = (order, done is not None and 0 < lineno - done <= NEAR)
            if thread and len(self._thread) < MAX_SOURCES:
                self._thread.add(source)
            else:
                self._thread.discard(source)
            self._monitor.discard(source)
            self._finalizer.discard(source)
            return
        self._thread.discard(source)
        if _FRAME.match(text) is not None:
            if source in self._start and _MONITOR.search(text) is not None:
                self._monitor.add(source)
            if source in self._start and _FINALIZER.search(text) is not None:
                self._finalizer.add(source)
            return
        if _EOF.match(text) is not None:
            return
        if FINISHED.search(text) is not None and len(self._done) < MAX_SOURCES:
            self._done[source] = lineno

    def teardown_since(self, source: str, text: str) -> int | None:
        """The order the logger thread's traceback started at, when `text` is its EOFError
        after a run whose work was done, or the order multiprocessing's exit finalizers'
        traceback started at, when `text` is the exception that ends it; else None."""
        if source in self._finalizer and _RAISED.match(text) is not None:
            self._finalizer.discard(source)
            return self._start.get(source, (None, False))[0]
        if source not in self._monitor or _EOF.match(text) is None:
            return None
        start, done = self._start.get(source, (0, False))
        self._monitor.discard(source)
        return start if done else None


# the node the line names (srun's "failed on node N", slurmd's "from <address>")
_NODE: Final = re.compile(r"\bfailed on node (?P<node>[^\s:]+)|\bcredential from (?P<addr>[^\s:]+):")


def credential_clock(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """Slurm or munge rejected a credential as expired: a node's clock is off."""
    line = ctx.hints.get("credential_expired")
    if line is None:
        return None
    m = _NODE.search(line)
    node: str = (m["node"] or m["addr"] or "") if m is not None else ""
    on = f" on {node}" if node and not node.startswith("<") else ""
    said = (
        f"Slurm rejected a job credential as expired{on}: that node's clock and the "
        "controller's disagree"
    )
    fill = {
        "clock": f"A Slurm/munge credential was rejected as expired{on}: the clocks of the "
        "node and of the controller that signed it disagree",
        "node": node if on else "every node of the job",
    }
    return [], [line], said, fill


def ib_asked_unfound(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """NCCL_IB_DISABLE=0 set by the job, and NCCL found no IB device."""
    asked = ctx.hints.get("ib_disable_zero")
    missing = ctx.hints.get("ib_unusable")
    if asked is None or missing is None or {"ib_hca_set", "socket_ipoib"} & set(ctx.hints):
        return None  # (NCCL_IB_HCA set: the logs15 rule reads it; an IPoIB socket, logs8's)
    said = (
        "the job set NCCL_IB_DISABLE=0 (it means to use InfiniBand), yet NCCL found no IB "
        "device it can open: its network runs over TCP sockets"
    )
    return [], list(dict.fromkeys([missing, asked])), said, {}


SLURM_WRAPPERS: Final = frozenset({"SLURM-CANCELLED", "SLURM-TASK-EXIT"})
# logs37: JobSet's condition for its default failure handling (kubernetes-sigs/jobset
# pkg/constants FailedJobsMessage, "when no failure policy is defined"): the line names the
# policy that took the whole gang down, a cause of its own where nothing else is logged
JOBSET_DEFAULT_FAILED: Final = "jobset failed due to one or more job failures"


def slurm_wrapper_alone(first: Finding, failure_lines: int) -> bool:
    """Slurm's own wrapper leads where the log has no other failure line (hard or soft);
    so does JobSet's default failure handling (logs37)."""
    if failure_lines:
        return False
    if first.id == "K8S-JOB-FAILED":
        return any(JOBSET_DEFAULT_FAILED in e for e in first.evidence)
    return first.id in SLURM_WRAPPERS
