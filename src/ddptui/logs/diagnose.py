"""Post-mortem of log lines: classify candidates with the signature knowledge base, name
the root cause, keep bounded evidence and a per-rank timeline.  Core layer.

`diagnose_lines(lines, source)` is the entry point for text held in memory (the job view,
the corpus); `diagnose_streams` merges the candidate streams of many files in time order.
"""

from __future__ import annotations

import heapq
import re
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final

from ddptui.diagnosis.factmodel import UNRECOGNIZED
from ddptui.diagnosis.factrules import load_factrules
from ddptui.diagnosis.factrules_collective import UNNAMED_OP
from ddptui.diagnosis.factrules_gpu9 import sole_worker
from ddptui.diagnosis.factrules_logs23 import LAST_HINTS
from ddptui.diagnosis.factrules_logs26 import LAST_HINTS as LAST_HINTS_26
from ddptui.diagnosis.factrules_logs30 import LoggerExit
from ddptui.diagnosis.factrules_logs31 import StackDumps
from ddptui.diagnosis.factrules_logs32 import SplicedSlurm
from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.kb import signature_finding
from ddptui.diagnosis.signatures import Match, classify_line, root_cause
from ddptui.logs.dumpsignal import idle_receiver
from ddptui.logs.facts import FactCollector
from ddptui.logs.lineinfo import (
    ELASTIC_LOCAL,
    ELASTIC_SIGNAL_PID,
    ELASTIC_SUMMARY_RANK,
    NCCL_INIT_RANK,
)
from ddptui.logs.recovered import RetryWarnings
from ddptui.logs.scan import Candidate, from_lines
from ddptui.logs.stalls import StallWatch
from ddptui.logs.teardown import AbortWindows
from ddptui.logs.unknown import Unknowns, conclude
from ddptui.logs.warned import WARNED_THEN_RAISED, warned_only

EVIDENCE_PER_ID: Final = 5  # lines kept per signature id (the first ones)
TIMELINE_HEAD: Final = 12  # events kept per rank from the start ...
TIMELINE_TAIL: Final = 8  # ... and from the end
_SEVERITY_ORDER: Final = {"error": 0, "warning": 1, "info": 2}
# torch's wait for the root's NCCL unique id, timed out: "[7] is setting up NCCL communicator
# and retrieving ncclUniqueId from [0] via c10d key-value store by key '0', but
# store->get('0') got error: Socket Timeout"
# torch's watchdog, the work it timed out in without the operation (2.2+): "[PG ID 0 PG GUID
# 0(default_pg) Rank 2]  failure detected by watchdog at work sequence id: 493 PG status: ...",
# "[PG 0 (default_pg) Rank 3] Exception (either an error or timeout) detected by watchdog at
# work: 3348, last enqueued NCCL work: 3348, ..."
WATCHDOG_AT: Final = re.compile(
    r"Rank (?P<rank>\d+)\]\s+(?:failure|Exception \(either an error or timeout\)) detected by "
    r"watchdog at work(?: sequence id)?: (?P<seq>\d+)"
)
# a tqdm progress bar: its label, then "| 280000/2969526 [29:55<4:48:08"; the elapsed time
# is before "<" ([MM:SS or [H:MM:SS)
PROGRESS: Final = re.compile(
    r"(?P<label>[^|\r\]]{0,80}?)\s*\d+%\|[^|\r]*\|\s*[\d.]+[kMGT]?/[\d.]+[kMGT]?\s*"
    r"\[(?:(?P<h>\d+):)?(?P<m>\d+):(?P<s>\d\d)<"
)
# logs14: torch's ProcessGroupNCCL states each rank's progress when it dumps or fails
# ("[PG ID 0 PG GUID 0(default_pg) Rank 1] Received a dump signal ... Last enqueued NCCL
# work: 3, last completed NCCL work: 3."; "... Rank 0]  failure detected by watchdog at
# work sequence id: 4 PG status: last enqueued work: 4, last completed work: 3")
ENQUEUED: Final = re.compile(
    r"\bRank (?P<rank>\d+)\][^\n]*?\b[Ll]ast enqueued (?:NCCL )?work: (?P<enq>\d+)"
)
UID_WAIT: Final = re.compile(
    r"\[(?P<rank>\d+)\] is setting up NCCL communicators? and retrieving ncclUniqueId from "
    r"\[(?P<root>\d+)\].*?(?:Socket Timeout|[Tt]imed out|timeout)"
)


@dataclass(frozen=True)
class LogHit:
    """One classified line."""

    order: int  # position in the merged stream (time order)
    t: float | None
    source: str
    lineno: int
    rank: int | None
    local_rank: int | None
    pid: int | None
    text: str
    match: Match
    code: str | None = None  # "train.py:88 in step" from the traceback above the line

    @property
    def where(self) -> str:
        return f"{self.source}:{self.lineno}"


@dataclass(frozen=True)
class TimelineEvent:
    t: float | None
    source: str
    lineno: int
    severity: str  # error | warning | info
    label: str  # the signature's title, or what a context line says ("NCCL init rank 0")
    id: str | None  # signature id, None for a context line


@dataclass
class RankTimeline:
    """The events of one rank (or one unranked source), bounded: the first TIMELINE_HEAD
    and the last TIMELINE_TAIL, with how many were left out between."""

    key: str
    head: list[TimelineEvent] = field(default_factory=list)
    tail: deque[TimelineEvent] = field(default_factory=lambda: deque(maxlen=TIMELINE_TAIL))
    dropped: int = 0

    def add(self, ev: TimelineEvent) -> None:
        if len(self.head) < TIMELINE_HEAD:
            self.head.append(ev)
            return
        if len(self.tail) == TIMELINE_TAIL:
            self.dropped += 1
        self.tail.append(ev)

    @property
    def events(self) -> list[TimelineEvent]:
        return [*self.head, *self.tail]


@dataclass(frozen=True)
class LogDiagnosis:
    """What the lines say: the root cause (`first`), every finding most important first,
    the kept evidence and a timeline per rank."""

    source: str
    first: Finding | None
    findings: tuple[Finding, ...]
    hits: tuple[LogHit, ...]
    timelines: tuple[RankTimeline, ...]
    lines_read: int = 0
    bytes_read: int = 0
    problems: tuple[str, ...] = ()  # inputs that could not be read, said plainly
    notes: tuple[str, ...] = ()  # about the inputs, not failures (a shared file read once)

    @property
    def failed(self) -> bool:
        """A cause of severity error was found."""
        return self.first is not None and self.first.severity == "error"


def _rank_key(rank: int | None, local: int | None, source: str, many: bool) -> str:
    if rank is not None:
        return f"rank {rank}"
    if local is not None:
        return f"local rank {local}" + (f" ({source})" if many else "")
    return source


class Diagnoser:
    """Consumes candidates in time order; `result()` builds the LogDiagnosis."""

    def __init__(self, source: str, stalls: bool = True, lone: bool = True) -> None:
        self.source = source
        # a timeout only the waiting side shows may name the ranks elsewhere (off for one
        # rank's share of a job's lines: the job view judges who waited itself)
        self.lone = lone
        self.order = 0
        self.per_id: dict[str, list[LogHit]] = {}
        self.counts: dict[str, int] = {}
        self.ranks_of: dict[str, set[int]] = {}
        self.sources_of: dict[str, set[str]] = {}
        self.pid_rank: dict[tuple[str, int], int] = {}
        self.pid_local: dict[tuple[str, int], int] = {}
        # gpu7: (source, local rank) -> global rank, from torch elastic's failure summary
        # ("rank      : 1 (local_rank: 0)"); -1 where one source says two (several agents)
        self.local_global: dict[tuple[str, int], int] = {}
        self.events: list[tuple[int | None, int | None, int | None, str, TimelineEvent]] = []
        self.sources: set[str] = set()
        self.lines_read = 0
        self.bytes_read = 0
        self.problems: list[str] = []
        self.facts = FactCollector()
        self.unknown = Unknowns()
        self.prefix_ranks: set[int] = set()
        self.collective: dict[int, str] = {}  # rank -> collective its watchdog waited in
        self.watchdog_lines: dict[int, str] = {}
        self.ended: str | None = None  # a line saying the run ended, before any watchdog
        self.named_ranks: set[int] = set()  # ranks another rank's line says it waits for
        # the last progress bar before any watchdog timeout: (elapsed s, label, line)
        self.progress: tuple[int, str, str] | None = None
        self.timeout_ms: int | None = None  # the shortest timeout a watchdog line states
        # rank -> (work, line) a watchdog stopped at: an error or a timeout; read as a
        # collective the rank waited in only when the log shows a timeout
        self.watchdog_at: dict[int, tuple[str, str]] = {}
        self.watchdog_unranked: str | None = None  # the first watchdog line naming no rank
        self.enqueued: dict[int, tuple[int, str]] = {}  # rank -> (last work enqueued, line)
        self.gloo_waits: dict[int, str] = {}  # rank -> its first gloo send/recv timeout line
        self._run_ended = load_factrules().run_ended
        self.hints: dict[str, str] = {}  # factrules.yaml hints: name -> first line saying it
        # logs16: c10d's "The hostname of the client socket cannot be retrieved" lines,
        # (source, "where: text") in order (factrules_logs16.rdns_slow reads their times)
        self.rdns: list[tuple[str, str]] = []
        self._hints = list(load_factrules().hints)
        # a log that stops where a job waits (off for a live job's logs: they always stop)
        self.stalls = StallWatch(load_factrules().stalls if stalls else ())
        self.aborts = AbortWindows()  # gpu8: NCCL's teardown at exit (logs/teardown.py)
        self.retries = RetryWarnings()  # logs37: retry warnings a thread got past
        self.logger_exit = LoggerExit()  # logs30: a QueueListener's EOFError after the work
        self.stacks = StackDumps()  # logs31: py-spy's dumps (who is in a collective, who waits)
        self.spliced = SplicedSlurm()  # logs32: another job's Slurm lines inside this run's
        # gpu8: rank -> the line of an idle rank saying that rank's watchdog timed out
        self.dump_waits: dict[int, str] = {}

    def feed(self, cand: Candidate) -> None:
        if cand.end:
            self.stalls.end(cand.source, cand.lineno)
            self.spliced.end(cand.source, cand.lineno)
            self.unknown.read_edges(cand.source, cand.edges, self.order, cand.t)  # logs33
            return
        self.order += 1
        self.sources.add(cand.source)
        head = cand.head
        self._learn_pids(cand)
        rank = head.rank
        if rank is None and head.pid is not None:
            rank = self.pid_rank.get((cand.source, head.pid))
        local = self._local(cand)
        if head.rank is not None and len(self.prefix_ranks) < 4096:
            self.prefix_ranks.add(head.rank)
        where = f"{cand.source}:{cand.lineno}"
        self.facts.feed(cand.source, where, cand.text, head.host, head.pid, rank)
        self._context(cand, where)
        self.aborts.feed(cand.source, head.pid, cand.text)
        self.retries.feed(cand.source, cand.text)
        self.logger_exit.feed(cand.source, self.order, cand.lineno, cand.text)
        self.stacks.feed(cand.source, cand.text)
        m = classify_line(cand.text, cand.sigs) if cand.sigs else None
        if m is None:
            return
        sig = m.signature
        if sig.severity != "info" or sig.id.startswith(UNRECOGNIZED):
            self.spliced.slurm(cand.source, self.order, cand.lineno, cand.text)
        if sig.id.startswith(UNRECOGNIZED):
            self._unknown_line(cand, _rank_key(rank, local, cand.source, True), where, sig.severity == "error")
            return
        if sig.id in ("WATCHDOG", "WATCHDOG-WORK", "WATCHDOG-BARE"):
            self._watchdog(m.groups, rank, where, cand.text)
        elif sig.id == "GLOO-OP-TIMEOUT":
            self._gloo_wait(m.groups, rank, where, cand.text)
        if sig.id == "C10D-UIDGET":
            self._uid_wait(where, cand.text)
        hit = LogHit(
            self.order, cand.t, cand.source, cand.lineno, rank, local, head.pid, cand.text, m,
            cand.where,
        )
        self.counts[sig.id] = self.counts.get(sig.id, 0) + 1
        kept = self.per_id.setdefault(sig.id, [])
        if len(kept) < EVIDENCE_PER_ID:
            kept.append(hit)
        if rank is not None:
            self.ranks_of.setdefault(sig.id, set()).add(rank)
        self.sources_of.setdefault(sig.id, set()).add(cand.source)
        if not (sig.secondary and sig.severity == "info"):
            ev = TimelineEvent(cand.t, cand.source, cand.lineno, sig.severity, sig.title, sig.id)
            self._event(rank, local, head.pid, cand.source, ev)

    def _unknown_line(self, cand: Candidate, key: str, where: str, hard: bool) -> None:
        """A failure line no signature knows, unless it is teardown."""
        if not hard and self.aborts.inside(cand.source, cand.head.pid, cand.text):
            return  # gpu8: teardown, not a failure
        if (since := self.logger_exit.teardown_since(cand.source, cand.text)) is not None:
            self.unknown.retract(cand.source, since)  # logs30: the logger's teardown
            return
        if not hard and self.retries.hold(cand.source, (key, self.order, cand.t, where, cand.text)):
            return  # logs37: kept until its thread says whether it connected
        self.unknown.add(key, self.order, cand.t, where, cand.text, hard, cand.where)

    def _watchdog(self, groups: dict[str, str], rank: int | None, where: str, text: str) -> None:
        """The collective a rank's watchdog timed out in, and the timeout it states."""
        said = groups.get("rank")
        who = int(said) if said is not None else rank
        tmo = groups.get("tmo")
        if tmo is not None and tmo.isdigit():
            self.timeout_ms = min(int(tmo), self.timeout_ms or int(tmo))
        if who is None and self.watchdog_unranked is None:
            self.watchdog_unranked = f"{where}: {text.strip()[:300]}"
        upto = groups.get("rank_to")  # logs31: "[Rank 1-7] Watchdog caught ...", a range
        if who is not None and upto is not None and who < int(upto) <= who + 4096:
            for other in range(who + 1, int(upto) + 1):
                one = {k: v for k, v in groups.items() if k != "rank_to"}
                self._watchdog({**one, "rank": str(other)}, other, where, text)
        if who is not None and len(self.collective) < 4096:
            op = groups.get("op", UNNAMED_OP)
            seq = groups.get("seq")
            said = f"{op} (SeqNum {seq})" if seq else op
            old = self.collective.setdefault(who, said)
            if old.startswith(UNNAMED_OP) and op != UNNAMED_OP and (not seq or old.endswith(f" {seq})")):
                self.collective[who] = said  # a later line of that timeout names the operation
                self.watchdog_lines[who] = f"{where}: {text.strip()[:300]}"
            self.watchdog_lines.setdefault(who, f"{where}: {text.strip()[:300]}")

    def _gloo_wait(self, groups: dict[str, str], rank: int | None, where: str, text: str) -> None:
        """gloo's own timeout of a collective's send or recv (logs7): the waiting side."""
        ms = groups.get("ms")
        if ms is not None and ms.isdigit():
            self.timeout_ms = min(int(ms), self.timeout_ms or int(ms))
        line = f"{where}: {text.strip()[:300]}"
        if rank is None:
            self.watchdog_unranked = self.watchdog_unranked or line
        elif len(self.gloo_waits) < 4096:
            self.gloo_waits.setdefault(rank, line)

    def _uid_wait(self, where: str, text: str) -> None:
        """A rank whose wait for the root's ncclUniqueId timed out: it waits in the
        communicator's setup, the root (which the line names) never arrived there."""
        m = UID_WAIT.search(text)
        if m is not None and len(self.collective) < 4096:
            who, root = int(m["rank"]), int(m["root"])
            self.collective.setdefault(who, f"NCCL's communicator setup (the ncclUniqueId rank {root} publishes)")
            self.watchdog_lines.setdefault(who, f"{where}: {text.strip()[:300]}")
            self.named_ranks.add(root)

    def _context(self, cand: Candidate, where: str) -> None:
        """What a line tells besides its signature: where a job waits (stalls), the work
        a watchdog timed out in, the end of the run before any watchdog timeout, hints of
        where the job ran."""
        self.stalls.feed(cand.source, cand.lineno, cand.text)
        if "detected by watchdog" in cand.text and (m := WATCHDOG_AT.search(cand.text)):
            said = (f"{UNNAMED_OP} (SeqNum {m['seq']})", f"{where}: {cand.text.strip()[:300]}")
            if len(self.watchdog_at) < 4096:
                self.watchdog_at.setdefault(int(m["rank"]), said)
        if (idle := idle_receiver(cand.text)) is not None and len(self.dump_waits) < 4096:
            self.dump_waits.setdefault(idle[0], f"{where}: {cand.text.strip()[:300]}")  # gpu8
            self.named_ranks.add(idle[1])  # the idle rank: the one the waiting rank waits for
        if "nqueued" in cand.text and (m := ENQUEUED.search(cand.text)) and len(self.enqueued) < 4096:
            self.enqueued.setdefault(int(m["rank"]), (int(m["enq"]), f"{where}: {cand.text.strip()[:300]}"))
        if (
            self.ended is None
            and not self.collective
            and self._run_ended is not None
            and self._run_ended.search(cand.text) is not None
        ):
            self.ended = f"{where}: {cand.text.strip()[:300]}"
        if self._hints:
            self._hint(where, cand.text)
        if "socket cannot be retrieved" in cand.text and len(self.rdns) < 64:
            self.rdns.append((cand.source, f"{where}: {cand.text.strip()[:300]}"))
        if not self.collective and "%|" in cand.text:
            bars = list(PROGRESS.finditer(cand.text[-4000:]))
            if bars:  # the last state of the bar (tqdm's carriage returns keep one line)
                b = bars[-1]
                seconds = int(b["h"] or 0) * 3600 + int(b["m"]) * 60 + int(b["s"])
                self.progress = (seconds, b["label"].strip()[-60:], f"{where}: {b.group().strip()[:200]}")

    def _hint(self, where: str, text: str) -> None:
        for name, rx in self._hints:
            if (m := rx.search(text)) is not None:
                # logs13: a long (joined) line is shown from shortly before what matched
                start = max(0, m.start() - 150) if m.end() > 300 else 0
                self.hints[name] = f"{where}: {text[start:].strip()[:300]}"
        # logs23: LAST_HINTS keep the last line saying it, the others the first
        self._hints = [(n, rx) for n, rx in self._hints if n not in self.hints or n in LAST_HINTS | LAST_HINTS_26]

    def _learn_pids(self, cand: Candidate) -> None:
        text = cand.text
        if " nranks " in text:
            m = NCCL_INIT_RANK.search(text)
            if m is not None:
                pid, rank = int(m["pid"]), int(m["rank"])
                self.pid_rank[(cand.source, pid)] = rank
                what = "Init COMPLETE" if "Init COMPLETE" in text else "Init START"
                if "Init" in text:
                    label = f"NCCL {what} (rank {rank})"
                    ev = TimelineEvent(cand.t, cand.source, cand.lineno, "info", label, None)
                    self._event(rank, None, pid, cand.source, ev)
        if "local_rank: " in text:
            m = ELASTIC_LOCAL.search(text)
            if m is not None:
                self.pid_local[(cand.source, int(m["pid"]))] = int(m["local"])
            elif (m := ELASTIC_SUMMARY_RANK.match(text)) is not None:
                key, said = (cand.source, int(m["local"])), int(m["rank"])
                self.local_global[key] = said if self.local_global.get(key, said) == said else -1

    def _local(self, cand: Candidate) -> int | None:
        """The local rank a line's prefix, its NCCL pid or (gpu7) the agent's own line
        about a worker ("failed (exitcode: 1) local_rank: 0 (pid: 831)") names."""
        head = cand.head
        local = head.local_rank
        if local is None and head.pid is not None:
            local = self.pid_local.get((cand.source, head.pid))
        if local is None and "local_rank: " in cand.text:
            m = ELASTIC_LOCAL.search(cand.text)
            local = int(m["local"]) if m is not None else None
        if local is None and "received by PID " in cand.text:  # gpu8
            s = ELASTIC_SIGNAL_PID.search(cand.text)
            local = self.pid_local.get((cand.source, int(s["pid"]))) if s is not None else None
        return local

    def _global(self, source: str, rank: int | None, local: int | None) -> int | None:
        """The global rank, where only the local one is known and the launcher's failure
        summary in the same source says which global rank that local rank was."""
        if rank is not None or local is None:
            return rank
        said = self.local_global.get((source, local), -1)
        return said if said >= 0 else None

    def _event(
        self, rank: int | None, local: int | None, pid: int | None, source: str, ev: TimelineEvent
    ) -> None:
        if len(self.events) < 20_000:  # bounded; grouped per rank in result()
            self.events.append((rank, local, pid, source, ev))

    def _drop_spliced(self) -> None:
        """logs32: another job's Slurm lines spliced into this run's log, which went on
        after them, are not this run's failure (factrules_logs32.SplicedSlurm)."""
        for source, (since, _, _) in self.spliced.foreign.items():
            self.unknown.retract(source, since)
        inside = self.spliced.inside
        for sid in list(self.per_id):
            kept = [h for h in self.per_id[sid] if not inside(h.source, h.lineno)]
            if kept:
                self.per_id[sid] = kept
            else:
                del self.per_id[sid]
        self.events = [e for e in self.events if not inside(e[3], e[4].lineno)]

    def result(self) -> LogDiagnosis:
        if self.spliced.foreign:
            self._drop_spliced()
        if any(t in self.per_id for t in ("WATCHDOG", "WATCHDOG-WORK", "WATCHDOG-BARE")):
            for who, (op, line) in self.watchdog_at.items():
                self.collective.setdefault(who, op)
                self.watchdog_lines.setdefault(who, line)
        for who, line in self.dump_waits.items():  # gpu8: a watchdog timeout another rank
            if who not in self.collective:  # reported (logs/dumpsignal.py)
                self.collective[who] = UNNAMED_OP
                self.watchdog_lines.setdefault(who, line)
        firsts = [(hits[0].order, hits[0].source, hits[0].match) for hits in self.per_id.values()]
        root = root_cause(sorted(firsts, key=lambda x: x[0]))
        first_hits = {hits[0].match.signature.id: hits[0] for hits in self.per_id.values()}
        findings = [self._finding(sid) for sid in self.per_id]
        root_id = root[2].signature.id if root and root[2].signature.severity != "info" else None

        def importance(f: Finding) -> tuple[int, int, int, int]:
            h = first_hits[f.id]
            sig = h.match.signature
            return (
                0 if f.id == root_id else 1,
                _SEVERITY_ORDER[sig.severity],
                1 if sig.secondary else 0,
                h.order,
            )

        findings.sort(key=importance)
        first = findings[0] if findings and findings[0].id == root_id else None
        root_order = first_hits[root_id].order if root_id is not None else None
        root_secondary = root_id is not None and first_hits[root_id].match.signature.secondary
        self.hints.update(self.stacks.hints())
        for held in self.retries.unrecovered():
            self.unknown.add(*held, hard=False)
        first, findings = conclude(
            self, first, findings, root_order, root_secondary, self.pid_rank
        )
        hits = sorted((h for hs in self.per_id.values() for h in hs), key=lambda h: h.order)
        return LogDiagnosis(
            source=self.source,
            first=first,
            findings=tuple(findings),
            hits=tuple(hits),
            timelines=self._timelines(),
            lines_read=self.lines_read,
            bytes_read=self.bytes_read,
            problems=tuple(self.problems),
        )

    def _finding(self, sid: str) -> Finding:
        hits = self.per_id[sid]
        h = hits[0]
        sig = h.match.signature
        count = self.counts[sid]
        ranks = sorted(self.ranks_of.get(sid, ()))
        sources = sorted(self.sources_of.get(sid, ()))
        rank, local = h.rank, h.local_rank
        if h.pid is not None:  # what the whole log told about NCCL's pid
            rank = rank if rank is not None else self.pid_rank.get((h.source, h.pid))
            local = local if local is not None else self.pid_local.get((h.source, h.pid))
        rank = self._global(h.source, rank, local)
        if rank is None and len(ranks) == 1:
            rank = ranks[0]  # another line of this failure named its global rank
        if rank is None and local is None:  # gpu9: the one failed worker its agent reports
            rank = sole_worker(self.local_global, h.source, h.text)
        if rank is None and len(self.sources) == 1:
            rank = local  # one file: its local ranks are the only ranks there are
        said = f"{sig.title}: {h.where}"
        if len(ranks) > 1:
            said += ", ranks " + ", ".join(map(str, ranks[:8])) + (" …" if len(ranks) > 8 else "")
        elif rank is not None:
            said += f", rank {rank}"
        if count > 1:
            said += f" ({count} lines)"
        return signature_finding(
            h.match,
            sources,
            said,
            [f"{x.where}: {x.text.strip()[:400]}" for x in hits],
            severity=self._severity(sid, sig.severity, hits),  # type: ignore[arg-type]
            rank=rank,
            where=next((x.code for x in hits if x.code), None),
            lines=[x.where for x in hits],
        )

    def _severity(self, sid: str, severity: str, hits: list[LogHit]) -> str:
        """logs/warned.py: torch's warning before a rethrow, with nothing raised after."""
        if sid not in WARNED_THEN_RAISED:
            return severity  # (what follows walks every signature id: only for these)
        raised = bool(self.unknown.hard) or any(
            o != sid and h[0].match.signature.severity == "error" for o, h in self.per_id.items()
        )
        return warned_only(sid, severity, [h.text for h in hits], self.counts[sid], raised)

    def _timelines(self) -> tuple[RankTimeline, ...]:
        many = len(self.sources) > 1
        out: dict[str, RankTimeline] = {}
        for said_rank, said_local, pid, source, ev in self.events:
            rank, local = said_rank, said_local
            if pid is not None:  # NCCL's pid, resolved with what the whole log told
                rank = rank if rank is not None else self.pid_rank.get((source, pid))
                local = local if local is not None else self.pid_local.get((source, pid))
            rank = self._global(source, rank, local)
            key = _rank_key(rank, local, source, many)
            out.setdefault(key, RankTimeline(key)).add(ev)

        def sort_key(tl: RankTimeline) -> tuple[int, int, str]:
            parts = tl.key.split()
            if parts[0] == "rank":
                return (0, int(parts[1]), tl.key)
            if parts[0] == "local":
                return (1, int(parts[2]), tl.key)
            return (2, 0, tl.key)

        return tuple(sorted(out.values(), key=sort_key))


def merged(streams: Iterable[Iterator[Candidate]]) -> Iterator[Candidate]:
    """k-way merge of per-source candidate streams by time (a line without a time keeps
    its place after the previous line of its source); one pending line per source."""

    def keyed(index: int, stream: Iterator[Candidate]) -> Iterator[tuple[float, int, int, Candidate]]:
        last = float("-inf")
        for c in stream:
            if c.t is not None and c.t > last:
                last = c.t  # never backwards within a source: its order is kept
            yield (last, index, c.lineno, c)

    for item in heapq.merge(*(keyed(i, s) for i, s in enumerate(streams))):
        yield item[3]


def diagnose_candidates(
    stream: Iterable[Candidate], source: str, stalls: bool = True, lone: bool = True
) -> Diagnoser:
    d = Diagnoser(source, stalls, lone)
    for cand in stream:
        d.feed(cand)
    return d


def diagnose_lines(
    lines: Iterable[str], source: str = "<lines>", stalls: bool = True, lone: bool = True
) -> LogDiagnosis:
    """Classify lines held in memory (one source, in its order).  `stalls=False` for the
    logs of a job still running: that they stop where it waits says nothing yet."""
    counted = _Counted(lines)
    d = diagnose_candidates(from_lines(counted, source), source, stalls, lone)
    d.lines_read, d.bytes_read = counted.lines, counted.chars
    return d.result()


class _Counted:
    def __init__(self, lines: Iterable[str]) -> None:
        self._lines = lines
        self.lines = 0
        self.chars = 0

    def __iter__(self) -> Iterator[str]:
        items = [self._lines] if isinstance(self._lines, str) else self._lines
        for item in items:
            # One element may hold several lines (a pasted excerpt, a read() of a pipe).
            for line in item.splitlines() if "\n" in item else (item,):
                self.lines += 1
                self.chars += len(line) + 1
                yield line
