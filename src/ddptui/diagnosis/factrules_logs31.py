"""Readings added in round logs31 (issue 15, blind batch W: bigscience's chronicles,
Megatron-Bridge, mmdetection/mmengine, navsim and pcdiff post-mortems, Lambda's, JSC's and
EIDF's documentation).

store_alone: c10d's TCPStore server waits for its world's clients ("Timed out after 3601
seconds waiting for clients. 1/16 clients joined."): the one client that joined is the
server's own process, so no other rank ever reached the store.  Their processes were never
started (python run without srun in an sbatch script, a host list with one node), not slow:
LOGS-MISSING-RANKS, with the count the line gives.  Two or more joined stays
C10D-CLIENTS-JOINED (some nodes came, the cause is on those that did not).

StackDumps / stack_wait: py-spy's dump of a hung job ("Thread 688514 (idle): "MainThread""
and its frames, innermost first, "    get (queue.py:179)").  Read as facts: which process's
main thread is inside a torch.distributed collective (a frame in distributed_c10d.py),
which one waits elsewhere (its innermost frame a threading/queue wait: a lock, a
DataLoader's queue); helper threads, which idle in queues in every healthy process, are
not read.
Processes in a collective while another waits elsewhere: that one holds the others (the
DataLoader deadlock of bigscience's tr11 eval); a dump whose only stack waits: the process
was stuck there.  No thread in the corpus establishes one cause for every such wait (the
DataLoader's own lock bug, a worker that died, a slow file system), so this is an honest
unknown that says who waits where (a warning where the dump shows no peer waiting).

Core layer, stdlib only."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from ddptui.diagnosis.evidence import parse_evidence
from ddptui.diagnosis.factcontext import Context, Hit
from ddptui.diagnosis.factrules_logs25 import fact_words

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules

_ALONE: Final = re.compile(r"waiting for clients\. 1/(?P<total>\d+) clients joined")


def store_alone(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """The store's server waited for N clients and only its own joined."""
    line = ctx.hints.get("store_alone")
    m = _ALONE.search(line) if line is not None else None
    if line is None or m is None or int(m["total"]) < 2:
        return None
    total = int(m["total"])
    client = ctx.hints.get("store_client_failed")
    if client is not None and parse_evidence(client).source != parse_evidence(line).source:
        return None  # gpu12: another file's rank did start and could not reach the store
    said = (
        f"the master's store waited for {total} clients and only its own process joined: "
        "no other rank of the job ever started"
    )
    missing = "1" if total == 2 else f"1 to {total - 1} (all but the master's own)"
    fill = {"world": str(total), "missing": missing}
    return [], [line], said, fill


# py-spy's `dump` format (py-spy/src/dump.rs): a header per thread, then one line per frame
_HEADER: Final = re.compile(
    r'^\s*Thread (?:0x[0-9A-Fa-f]+|\d+) \((?P<state>idle|active(?:\+gil)?)\)(?:: "(?P<name>[^"]*)")?'
)
_FRAME: Final = re.compile(r"^\s+(?P<fn>[\w<>.]+) \((?P<file>[^()\s]+\.py):\d+\)\s*$")
_WAIT_FILES: Final = ("threading.py", "queue.py")
_COLLECTIVE_FILE: Final = "distributed_c10d.py"
MAX_THREADS: Final = 4096


class StackDumps:
    """Per source, the py-spy thread being read; per thread, whether its stack is in a
    collective and, where its innermost frame is a wait, the frames that say where."""

    def __init__(self) -> None:
        self._current: dict[str, str] = {}  # source -> the thread whose frames follow
        self._innermost: set[str] = set()  # threads whose innermost frame was read
        self.collective: dict[str, str] = {}  # thread -> the collective's frame
        self.waits: dict[str, list[str]] = {}  # thread -> the frames of its wait
        self.threads: list[str] = []

    def feed(self, source: str, text: str) -> None:
        h = _HEADER.match(text)
        if h is not None:
            if h["name"] not in (None, "MainThread"):
                # a helper thread (DataLoader's pin-memory loop, a logger, a heartbeat)
                # idles in a queue in every healthy process: only a main thread's wait
                # says the process is held there
                self._current.pop(source, None)
            elif len(self.threads) < MAX_THREADS:
                header = f"{source}: {text.strip()[:80]}"
                self._current[source] = header
                self.threads.append(header)
            return
        tid = self._current.get(source)
        if tid is None:
            return
        f = _FRAME.match(text)
        if f is None:
            return
        name = f["file"].rsplit("/", 1)[-1]
        first = tid not in self._innermost
        self._innermost.add(tid)
        if name == _COLLECTIVE_FILE and tid not in self.collective:
            self.collective[tid] = f"{f['fn']} ({name})"
        if tid in self.waits and len(self.waits[tid]) < 3:
            self.waits[tid].append(f"{f['fn']} ({name})")
        elif first and name in _WAIT_FILES:
            self.waits[tid] = [f"{f['fn']} ({name})"]

    def hints(self) -> dict[str, str]:
        """What the dumps say, as hints (stack_waits: threads waiting elsewhere; stack_in:
        threads inside a collective), or nothing when no dump waits."""
        waiting = [t for t in self.waits if t not in self.collective]
        if not waiting:
            return {}
        out = {"stack_waits": "; ".join(f"{t} waits in {' <- '.join(self.waits[t])}" for t in waiting[:4])}
        if self.collective:
            shown = list(self.collective.items())[:4]
            out["stack_in"] = "; ".join(f"{t} is in {op}" for t, op in shown)
        return out


def stack_wait(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """A py-spy dump: a process waits (a lock, a queue) while others are in a collective,
    or, with no collective shown, the dumped process waits there (a warning then)."""
    waits = ctx.hints.get("stack_waits")
    inside = ctx.hints.get("stack_in")
    if waits is None or (inside is None) != (rule.severity == "warning"):
        return None
    if any(sev != "info" for sev in ctx.present.values()):
        return None
    if inside is not None:
        shows = (
            f"a stack dump (py-spy) of the hung job: {inside}, while {waits}: that process "
            "never reached the collective the others wait in"
        )
    else:
        shows = f"a stack dump (py-spy) of a stuck process: {waits}"
    fill = {
        **fact_words(shows, "wait"),
        "first_lines": "none (the log is a stack dump)",
        "first": waits.split("; ", 1)[0],
    }
    return [], [v for v in (waits, inside) if v is not None], shows, fill
