"""The end of a diagnosis: honest unknowns and the rules over facts.  Core layer.

A failure line no signature knows (factrules.yaml `failure_lines`) is kept per rank (its
first one); when nothing known explains the failure, LOGS-UNRECOGNIZED quotes them and
names the rank that failed first.  The facts every rank stated (logs/facts.py) go through
factrules.yaml; a fact finding that explains the leading finding (ranking.yaml) leads.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Final, Protocol

from ddptui.diagnosis.evidence import parse_evidence, parse_place
from ddptui.diagnosis.factcontext import Context, Proc
from ddptui.diagnosis.factmodel import UNRECOGNIZED
from ddptui.diagnosis.factrules import (
    explained,
    fact_findings,
    load_factrules,
    outranks_line,
)
from ddptui.diagnosis.factrules_gpu7 import taken_down
from ddptui.diagnosis.factrules_logs22 import quiet_alone
from ddptui.diagnosis.factrules_logs23 import ib_open_in_use
from ddptui.diagnosis.factrules_logs25 import FAILURE, PLAIN, WARNING, unknown_words
from ddptui.diagnosis.factrules_logs29 import self_requeue
from ddptui.diagnosis.factrules_logs30 import slurm_wrapper_alone
from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.kb import kb_finding
from ddptui.diagnosis.ranking import load_ranking
from ddptui.diagnosis.signatures import secondary_ids
from ddptui.logs.appexc import APP_EXCEPTION, app_exception
from ddptui.logs.facts import FactCollector
from ddptui.logs.stalls import StallWatch


class _Hit(Protocol):
    """A classified line as conclude() reads it (logs/diagnose.py's LogHit)."""

    @property
    def order(self) -> int: ...
    @property
    def t(self) -> float | None: ...
    @property
    def source(self) -> str: ...
    @property
    def rank(self) -> int | None: ...
    @property
    def text(self) -> str: ...
    @property
    def where(self) -> str: ...


class Diagnoser(Protocol):
    """What conclude() reads of the diagnosis in progress (logs/diagnose.py's Diagnoser,
    which calls it: a Protocol here keeps this module below that one)."""

    @property
    def per_id(self) -> Mapping[str, Sequence[_Hit]]: ...
    @property
    def facts(self) -> FactCollector: ...
    @property
    def unknown(self) -> Unknowns: ...
    @property
    def sources(self) -> set[str]: ...
    @property
    def prefix_ranks(self) -> set[int]: ...
    @property
    def collective(self) -> dict[int, str]: ...
    @property
    def watchdog_lines(self) -> dict[int, str]: ...
    @property
    def ended(self) -> str | None: ...
    @property
    def named_ranks(self) -> set[int]: ...
    @property
    def enqueued(self) -> dict[int, tuple[int, str]]: ...
    @property
    def progress(self) -> tuple[int, str, str] | None: ...
    @property
    def timeout_ms(self) -> int | None: ...
    @property
    def hints(self) -> dict[str, str]: ...
    @property
    def stalls(self) -> StallWatch: ...
    @property
    def watchdog_unranked(self) -> str | None: ...
    @property
    def gloo_waits(self) -> dict[int, str]: ...
    @property
    def lone(self) -> bool: ...
    @property
    def rdns(self) -> Sequence[tuple[str, str]]: ...

MAX_KEYS: Final = 1024
_HEADING: Final = {
    (True, False): "Unrecognized failure",
    (False, False): "Unrecognized warnings",
    (False, True): "Lines that read like a failure",  # logs33
}
MAX_PLAIN: Final = 2000  # logs33: longer lines (a tensor dump, a config) are not read for words
# logs9: a rank's own Python exception (its last traceback line) that no signature knows: it
# outranks a consequence line (a secondary signature) even when that line came first (a
# frame of the traceback, a launcher's report printed earlier)
OWN_EXCEPTION: Final = re.compile(r"(?:^|[\]>|:]\s?)\s*(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)(?:: .*|\s*$)")
SHOWN: Final = 8
_GLOBAL_KEY: Final = re.compile(r"^rank (\d+)$")  # a FirstError key naming a global rank


@dataclass(frozen=True)
class FirstError:
    key: str  # "rank 3", "local rank 1 (a.log)", or the source
    order: int
    t: float | None
    where: str
    text: str
    frame: str | None = None  # "train.py:88 in step": the user's frame of its traceback


class Unknowns:
    """The first unrecognized failure line of each rank, hard and soft apart."""

    def __init__(self) -> None:
        self.hard: dict[str, FirstError] = {}
        self.soft: dict[str, FirstError] = {}
        self.plain: dict[str, FirstError] = {}  # logs33: failure words, read last
        self.count = 0

    def add(
        self,
        key: str,
        order: int,
        t: float | None,
        where: str,
        text: str,
        hard: bool,
        frame: str | None = None,
    ) -> None:
        self.count += 1
        kept = self.hard if hard else self.soft
        if (key in kept and order < kept[key].order) or (key not in kept and len(kept) < MAX_KEYS):
            kept[key] = FirstError(key, order, t, where, text.strip()[:300], frame)  # the earliest

    def read_edges(
        self, source: str, edges: Sequence[tuple[int, str]], order: int, t: float | None
    ) -> None:
        """The first line among a source's first and last lines (logs/scan.py `_Edges`)
        that says a failure in plain words (factrules.yaml failure_lines.plain), kept for
        a log in which nothing else is found (logs33)."""
        rules = load_factrules()
        if not rules.plain or source in self.plain or len(self.plain) >= MAX_KEYS:
            return
        for lineno, text in edges:
            if len(text) > MAX_PLAIN or (rules.benign is not None and rules.benign.search(text)):
                continue
            if any(rx.search(text) for rx in rules.plain):
                where = f"{source}:{lineno}"
                self.plain[source] = FirstError(source, order, t, where, text.strip()[:300])
                return

    def retract(self, source: str, since: int) -> None:
        """Forget the first lines of `source` kept from order `since` on (logs30: a
        traceback that turned out to be teardown)."""
        for kept in (self.hard, self.soft, self.plain):
            for key in [k for k, e in kept.items() if e.order >= since and parse_place(e.where).source == source]:
                del kept[key]

    def firsts(self, hard: bool) -> list[FirstError]:
        return sorted((self.hard if hard else self.soft).values(), key=lambda e: e.order)


def _at(t: float | None) -> str:
    """The time of a first failure line for the summary; nothing without a time stamp."""
    if t is None:
        return ""
    return " at " + datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _first_lines(errors: list[FirstError]) -> str:
    """Each rank's first failure line, as the findings' {first_lines} quote them."""
    shown = "; ".join(f"{e.key}: {e.text[:160]!r} ({e.where})" for e in errors[:SHOWN])
    if len(errors) > SHOWN:
        shown += f"; and {len(errors) - SHOWN} more"
    return shown


def _sources(errors: list[FirstError]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(parse_place(e.where).source or e.where for e in errors))


def _quoted(errors: list[FirstError]) -> tuple[str, ...]:
    """The evidence: each rank's first failure line with its place."""
    return tuple(f"{e.where}: {e.text}" for e in errors[:SHOWN])


def _global_rank(key: str) -> int | None:
    """The global rank a FirstError key names ("rank 3"), if it names one (gpu8)."""
    return int(m[1]) if (m := _GLOBAL_KEY.match(key)) is not None else None


def unrecognized(errors: list[FirstError], count: int, hard: bool, plain: bool = False) -> Finding:
    first = errors[0]
    return kb_finding(
        UNRECOGNIZED,
        _sources(errors),
        f"{_HEADING[(hard, plain)]}: {first.where}, "
        f"{first.key} first{_at(first.t)}",
        _quoted(errors),
        severity="error" if hard else "warning",
        rank=_global_rank(first.key),
        facts=unknown_words(PLAIN if plain else FAILURE if hard else WARNING, count),  # logs25
        first_lines=_first_lines(errors),
        first=f"{first.key}{_at(first.t)} ({first.where})",
    )


def _the_unknown(
    d: Diagnoser,
    first: Finding | None,
    hard: list[FirstError],
    soft: list[FirstError],
    since: int | None,
) -> Finding | None:
    """The failure lines no known cause explains, as a finding of their own: a rank's own
    exception (logs39) or an honest unknown; None when what leads explains them."""
    if hard and (
        first is None
        or first.severity != "error"
        or (since is not None and hard[0].order < since)
        or (since is not None and any(OWN_EXCEPTION.search(h.text) for h in hard))
    ):
        return _own_exception(hard, unrecognized(hard, d.unknown.count, True))  # logs39
    if soft and not hard and first is None:
        return unrecognized(soft, d.unknown.count, False)
    if hard and first is not None and explained(APP_EXCEPTION, [first.id]):
        return _own_exception(hard, None)  # logs39: a rank raised, its peers waited
    return None


def _own_exception(hard: list[FirstError], unknown: Finding | None) -> Finding | None:
    """LOGS-APP-EXCEPTION in place of an honest unknown whose first failure line is a
    Python exception the code raised itself (logs/appexc.py); with no unknown (a
    consequence leads: a peer's watchdog timeout), the earliest such line among the ranks'
    first failure lines.  The unknown otherwise."""
    said = None
    for first in hard[:1] if unknown is not None else hard:
        said = app_exception(first.text)
        if said is not None:
            break
    if said is None:
        return unknown
    kind, message = said
    raised = f"{kind}: {message}" if message else kind
    frame = f" in {first.frame}" if first.frame else ""
    return kb_finding(
        APP_EXCEPTION,
        _sources(hard),
        f"{first.key} raised {kind}{frame} ({first.where}{_at(first.t)})",
        _quoted(hard),
        rank=_global_rank(first.key),
        where=first.frame,
        exception=raised[:300],
        who=first.key,
        frame=frame,
        raised_at=f"{first.where}{_at(first.t)}",
        first_lines=_first_lines(hard),
    )


def _uncovered(unknown: Finding | None, lead: Finding | None) -> Finding | None:
    """LOGS-UNRECOGNIZED, unless another lead quotes every line it quotes ("file:line:
    text"): then nothing is left unexplained and the user is not told of an unknown."""
    if unknown is None or lead is None or lead is unknown or not unknown.evidence:
        return unknown

    def wheres(f: Finding) -> set[str]:
        return {q.place or q.text for q in map(parse_evidence, f.evidence)}

    return None if wheres(unknown) <= wheres(lead) else unknown


def _past_wrappers(
    d: Diagnoser, first: Finding | None, findings: list[Finding], hard: list[FirstError]
) -> tuple[Finding | None, list[FirstError]]:
    """A wrapper only says a failure happened: a line that says more leads; with none, the
    failure is an honest unknown quoting each rank's first error line (wrappers included)."""
    wrappers = load_factrules().wrappers
    if first is not None and taken_down(first.id, first.evidence):  # gpu7: a worker taken
        said = (f for f in findings if f.severity == "error" and f.id not in wrappers)
        better = next((f for f in said if f.id != first.id), None)  # down: what says more
        return (better or first), hard
    if first is None or first.id not in wrappers:
        return first, hard
    better = next((f for f in findings if f.severity == "error" and f.id not in wrappers), None)
    if better is not None:
        return better, hard
    if slurm_wrapper_alone(first, len(hard) + len(d.unknown.soft)):  # logs30: nothing else
        return first, hard
    return None, hard or _wrapper_lines(d, wrappers)


def _wrapper_lines(d: Diagnoser, wrappers: frozenset[str]) -> list[FirstError]:
    """The first wrapper line of each rank, as failure lines of their own."""
    out: dict[str, FirstError] = {}
    for sid, hits in d.per_id.items():
        if sid not in wrappers:
            continue
        for h in hits:
            key = f"rank {h.rank}" if h.rank is not None else h.source
            if key not in out or h.order < out[key].order:
                out[key] = FirstError(key, h.order, h.t, h.where, h.text.strip()[:300])
    return sorted(out.values(), key=lambda e: e.order)


def _rank_ident(rank: int | None, host: str | None) -> str:
    """A process known by the rank it announced: the host it ran on, and which of several
    processes announcing that rank it is (facts.py marks the n-th as `host#n`)."""
    base, _, n = (host or "").partition("#")
    where = f" on {base}" if base else ""
    return f"rank {rank} (process {n}{where})" if n else f"rank {rank}{where}"


def _raised(findings: list[Finding], hard: Sequence[FirstError]) -> dict[int, str]:
    """rank -> the first line that is that rank's own Python exception: quoted by an error
    finding about it, or its first unrecognized failure line (gpu11: a rank that destroyed
    its process group, or exited, after raising did not finish normally)."""
    out: dict[int, str] = {}
    for f in findings:
        if f.severity != "error" or f.rank is None or f.rank in out:
            continue
        said = next((e for e in f.evidence if OWN_EXCEPTION.search(parse_evidence(e).text)), None)
        if said is not None:
            out[f.rank] = said
    for e in hard:
        rank = _global_rank(e.key)
        if rank is not None and OWN_EXCEPTION.search(e.text):
            out.setdefault(rank, f"{e.where}: {e.text}")
    return out


def _procs(d: Diagnoser, pid_rank: dict[tuple[str, int], int]) -> tuple[Proc, ...]:
    out = []
    for p in d.facts.processes(pid_rank):
        ident = f"{p.host or p.source}:{p.pid}" if p.pid is not None else _rank_ident(p.rank, p.host)
        out.append(
            Proc(
                p.rank, p.host, p.world_size, p.nccl_version, p.network, tuple(p.interfaces),
                dict(p.evidence), ident, p.source, p.collective, p.node_rank, p.net_plugin,
                p.store_count,
                dict(p.nnodes),
                frozenset(p.transports),
                dict(p.nccl_env),
                p.init_complete,
                frozenset(p.comm_ids),
                dict(p.comm_pending),
            )
        )
    return tuple(out)


def _loopback(fid: str) -> bool:
    """ranking.yaml says this finding is an error only across hosts (LOOPBACK-ON-ONE-HOST)."""
    return any(r.when == "one_host" and r.matches(fid) for r in load_ranking().topology)


def _loopback_alone(
    lead: Finding | None, findings: list[Finding], unknown: Finding | None
) -> tuple[Finding | None, list[Finding]]:
    """Round 7 (blind J, vllm-metal#171): a loopback finding that is the log's only error
    (gloo's loopback fallback with nothing failing after it) is torch's warning in a world
    on one host, not a fault: a warning."""
    if lead is None or unknown is not None or not _loopback(lead.id):
        return lead, findings
    if any(f.severity == "error" and f.id != lead.id for f in findings):
        return lead, findings
    out = [dataclasses.replace(f, severity="warning") if f.id == lead.id else f for f in findings]
    return out[findings.index(lead)], out


def _consequence_since(
    d: Diagnoser, first: Finding | None, root_order: int | None, root_secondary: bool
) -> int | None:
    """Where the leading consequence (a `secondary` signature: the root, or the finding a
    wrapper gave way to) was first said; None when the lead is no consequence."""
    if root_secondary:
        return root_order
    if first is None or first.id not in secondary_ids() or not d.per_id.get(first.id):
        return None
    return d.per_id[first.id][0].order


def _plain_words(unknown: Unknowns, rest: list[Finding]) -> tuple[Finding | None, list[Finding]]:
    """A log nothing leads: when only infos were found and a line they do not quote says a
    failure in plain words, that line leads (logs33: never a ✔ for it)."""
    if any(f.severity != "info" for f in rest):
        return None, rest
    quoted = {parse_evidence(e).place for f in rest for e in f.evidence}
    said = sorted((e for e in unknown.plain.values() if e.where not in quoted), key=lambda e: e.order)
    if not said:
        return None, rest
    lead = unrecognized(said, len(said), False, plain=True)
    return lead, [lead, *rest]


def conclude(
    d: Diagnoser,
    first: Finding | None,
    findings: list[Finding],
    root_order: int | None,
    root_secondary: bool,
    pid_rank: dict[tuple[str, int], int],
) -> tuple[Finding | None, list[Finding]]:
    """(the leading finding, every finding most important first) with the unknowns and
    the facts' findings added."""
    first, findings = ib_open_in_use(first, findings, d.hints)  # logs23
    hard, soft = d.unknown.firsts(True), d.unknown.firsts(False)
    first, hard = _past_wrappers(d, first, findings, hard)
    # a consequence leads (the root, or the finding a wrapper gave way to, gpu8): a failure
    # line printed before it, or a rank's own exception, outranks it
    since = _consequence_since(d, first, root_order, root_secondary)
    unknown = _the_unknown(d, first, hard, soft, since)
    lead = unknown or first
    if lead is not None:  # a cause the log states leads what it explains (ranking.yaml)
        lead = next(
            (f for f in findings if f.severity == "error" and outranks_line(f.id, lead.id)), lead
        )
    lead, findings = _loopback_alone(lead, findings, unknown)
    lead, findings = quiet_alone(lead, findings, unknown)  # logs22
    lead, findings = self_requeue(lead, findings, d.hints)  # logs29
    present = {f.id: f.severity for f in findings}
    if unknown is not None:
        present[unknown.id] = unknown.severity
    ctx = Context(
        _procs(d, pid_rank),
        present,
        labelled=len(d.sources) > 1 or len(d.prefix_ranks) > 1,
        collective=d.collective,
        watchdog_lines=d.watchdog_lines,
        ended=d.ended,
        named_ranks=frozenset(d.named_ranks),
        progress=d.progress,
        timeout_ms=d.timeout_ms,
        hints=d.hints,
        stopped=tuple((s.stall, s.where) for s in d.stalls.stopped),
        c10d_pairs=d.facts.c10d_pairs,
        local_edges=tuple(d.facts.local_edges),
        watchdog_unranked=d.watchdog_unranked,
        gpus=d.facts.gpus,
        gloo_waits=d.gloo_waits,
        lone=d.lone,
        bench_repeated=d.facts.bench_repeated,
        bench_headers=d.facts.bench_headers,
        enqueued=d.enqueued,
        world_of_one=tuple(d.facts.world_of_one),
        launch_n=d.facts.launch_n,
        rdns=tuple(d.rdns),
        raised=_raised(findings, d.unknown.firsts(True)),
    )
    facts = [f for f in fact_findings(ctx) if f.id not in present]
    for f in facts:
        if lead is not None and f.severity != "info" and explained(f.id, [lead.id]):
            lead = f
            break
    else:
        if lead is None:
            lead = next((f for f in facts if f.severity == "error"), None)
        if lead is None:  # a log that stops where a job waits (the stall rules), or a
            # fact that must not be called clean (factrules.yaml not_clean): say so
            rules = load_factrules()
            stall_ids = {r.id for r in rules.rules if r.when.startswith("stalled")}
            stall_ids.update(rules.not_clean)
            lead = next((f for f in facts if f.id in stall_ids and f.severity != "info"), None)
    if lead is None:  # an info line that must not be called clean leads as a warning
        keep = load_factrules().not_clean
        quiet = next((f for f in findings if f.id in keep), None)
        if quiet is not None:
            lead = dataclasses.replace(quiet, severity="warning")
            findings = [lead if f is quiet else f for f in findings]
    unknown = _uncovered(unknown, lead)
    extra = [x for x in (unknown, *facts) if x is not None]
    rest = [f for f in [*extra, *findings] if f is not lead]
    if lead is None:
        return _plain_words(d.unknown, rest)
    return lead, [lead, *rest]
