"""The facts the rules over a log read (one record per process, the log's context) and
the rules added in round logs3: nodes that never launched, /dev/shm behind a bus error or
NCCL's system error, a log that stops where a job waits.  Core layer, stdlib only; the
rules file and the other predicates are factrules.py's."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from ddptui.diagnosis.evidence import parse_evidence
from ddptui.diagnosis.factrules_logs25 import fact_words

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules, Stall

Hit = tuple[list[int], list[str], str, dict[str, str]]  # ranks, evidence, summary, placeholders


@dataclass(frozen=True)
class Proc:
    """One process's facts as the rules see them (see logs/facts.py ProcFacts)."""

    rank: int | None
    host: str | None
    world_size: int | None
    nccl_version: str | None
    network: str | None
    interfaces: tuple[tuple[str, str, str], ...]  # (role, iface, addr)
    evidence: Mapping[str, str]
    ident: str  # host:pid, or the rank a launcher named
    source: str = ""
    collective: tuple[int, str] | None = None  # last (SequenceNumber, OpType) entered
    node_rank: int | None = None  # torchrun's node (group) rank its agent waits as
    net_plugin: str | None = None  # the NCCL net plugin loaded ("internal": none)
    store_count: tuple[int, int] | None = None  # store barrier (worker_count, world_size)
    nnodes: Mapping[str, int] = dataclasses.field(default_factory=dict)  # torchrun's min/max_nodes
    transports: frozenset[str] = frozenset()  # NCCL's channel transports (NET/IB, P2P, SHM)
    nccl_env: Mapping[str, str] = dataclasses.field(default_factory=dict)  # "set by environment"
    init_complete: bool = False  # NCCL said "Init COMPLETE" for it
    comms: frozenset[str] = frozenset()  # gpu11: the NCCL commIds it started or completed
    # gpu11: commId -> (nranks, "where: line") of a communicator it started, never completed
    comm_pending: Mapping[str, tuple[int, str]] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class Context:
    procs: tuple[Proc, ...]
    present: Mapping[str, str]  # finding id -> severity of the line findings
    labelled: bool  # srun --label or several files: the log holds a whole job's output
    collective: Mapping[int, str]  # rank -> the collective its watchdog timed out in
    watchdog_lines: Mapping[int, str]  # rank -> that line ("where: text")
    ended: str | None = None  # a line saying the run ended, before any watchdog timeout
    named_ranks: frozenset[int] = frozenset()  # ranks another rank's line says it waits for
    progress: tuple[int, str, str] | None = None  # last progress bar before a timeout: s, label, line
    timeout_ms: int | None = None  # the collective timeout the watchdog lines state
    hints: Mapping[str, str] = dataclasses.field(default_factory=dict)  # name -> first line
    stopped: tuple[tuple[Stall, str], ...] = ()  # steps sources stopped in: (step, "where: text")
    # c10d: (name it was given, address it tried, port) -> the lines saying so
    c10d_pairs: Mapping[tuple[str, str, str], list[str]] = dataclasses.field(default_factory=dict)
    # NCCL's intra-node edges (P2P, SHM): (rank, device, peer rank, device, "where: line")
    local_edges: tuple[tuple[int, int, int, int, str], ...] = ()
    watchdog_unranked: str | None = None  # the first watchdog line naming no rank ("where: text")
    gpus: Mapping[str, str] = dataclasses.field(default_factory=dict)  # GPU model -> "where: line"
    gloo_waits: Mapping[int, str] = dataclasses.field(default_factory=dict)  # rank -> gloo timeout line
    lone: bool = True  # the lines are a whole log (not one rank's share): lone_waiter may judge
    bench_repeated: tuple[str, ...] = ()  # logs11: two nccl-tests summaries, no header between
    bench_headers: tuple[str, ...] = ()  # logs13: two nccl-tests headers, nothing of the first between
    # logs14: rank -> (the last work it enqueued, "where: line"), as torch's ProcessGroupNCCL
    # states it when it dumps or fails
    enqueued: Mapping[int, tuple[int, str]] = dataclasses.field(default_factory=dict)
    # logs14 (round logs14): lines where a process says it is rank 0 of a world of 1, and
    # the launcher's command line asking for N processes (N, "where: line")
    world_of_one: tuple[str, ...] = ()
    launch_n: tuple[int, str] | None = None
    # logs16: c10d's "The hostname of the client socket cannot be retrieved" lines, in
    # order: (source, "where: text")
    rdns: tuple[tuple[str, str], ...] = ()
    # gpu11: rank -> the first line of an error finding about that rank that quotes its own
    # Python exception ("[rank1]: RuntimeError: ..."): that rank did not finish normally
    raised: Mapping[int, str] = dataclasses.field(default_factory=dict)

    @property
    def hosts(self) -> list[str]:
        return sorted({p.host for p in self.procs if p.host})


def span(ranks: Sequence[int]) -> str:
    shown = ", ".join(map(str, ranks[:12]))
    return shown + (f" … ({len(ranks)} in all)" if len(ranks) > 12 else "")


def ranks_said(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + span(ranks)


def who(p: Proc) -> str:
    """A process as a finding names it: its rank (and host), else its host:pid."""
    return f"rank {p.rank}" + (f" ({p.host})" if p.host else "") if p.rank is not None else p.ident


def values_said(groups: Mapping[str, Sequence[Proc]]) -> str:
    """What each group of processes states: "2.28.9 on rank 0 (gpu01); 2.28.3 on rank 1"."""
    return "; ".join(
        f"{v} on {', '.join(dict.fromkeys(who(p) for p in ps[:4]))}" for v, ps in groups.items()
    )


def missing_nodes(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """torchrun's agents state the node count (min_nodes = max_nodes) and their node rank;
    with two or more agents in the log, the node ranks none of them holds never joined."""
    agents = [p for p in ctx.procs if p.nnodes]
    counts = {(p.nnodes.get("min_nodes"), p.nnodes.get("max_nodes")) for p in agents}
    if len(counts) != 1:
        return None
    low, high = counts.pop()
    where = {p.host or p.source for p in ctx.procs if p.node_rank is not None}
    if low != high or high is None or not 2 <= len(where) < high or high > 4096:
        return None
    seen = sorted({p.node_rank for p in ctx.procs if p.node_rank is not None})
    missing = sorted(set(range(high)) - set(seen))
    if not missing:
        return None
    ev = [p.evidence.get("node_rank", "") for p in ctx.procs if p.node_rank is not None][:3]
    ev.append(agents[0].evidence.get("nnodes", ""))
    said = (
        f"{len(seen)} of {high} nodes launched torchrun (node ranks {span(seen)}); "
        f"node rank(s) {span(missing)} never joined"
    )
    fill = {"nnodes": str(high), "seen": span(seen), "missing": span(missing)}
    return [], [e for e in ev if e], said, fill


def one_host(ctx: Context) -> str | None:
    """Several ranks, every one on the same host: what says so."""
    ranked = [p for p in ctx.procs if p.rank is not None and p.host]
    if len({p.host for p in ctx.procs if p.host}) != 1 or not ranked:
        return None
    ranks = sorted({int(p.rank or 0) for p in ranked})
    if len(ranks) >= 2:
        return f"ranks {span(ranks)} all run on {ranked[0].host}"
    # NCCL connects the ranks of one node over P2P or SHM only, never the network
    carried = frozenset().union(*(p.transports for p in ctx.procs))
    if carried and carried <= {"P2P", "SHM"} and any((p.world_size or 0) >= 2 for p in ranked):
        return f"every rank on {ranked[0].host} (NCCL connects them over {'/'.join(sorted(carried))} only)"
    return None


def shm_context(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """A bus error (SIGBUS: a page of a /dev/shm file that cannot be backed) or NCCL's
    bare "unhandled system error", where the log shows where /dev/shm is small: a
    container (docker's container-id host name, docker or pod words), a /dev/shm path,
    every rank on one host (the only transport they use between them is SHM/P2P), or
    NCCL's own channel lines connecting ranks over SHM."""
    failure = ctx.hints.get("sigbus") or ctx.hints.get("system_error")
    if failure is None:
        return None
    where = ctx.hints.get("container") or ctx.hints.get("shm")
    said = "the job ran in a container" if ctx.hints.get("container") else "a /dev/shm path"
    if where is None and (one := one_host(ctx)) is not None:
        where, said = one, one
    if where is None and "sigbus" in ctx.hints and "nccl" in ctx.hints:
        where, said = ctx.hints["nccl"], "the bus error is in NCCL's code"
    shm = [p for p in ctx.procs if "SHM" in p.transports]
    if where is None and shm:
        where, said = shm[0].ident, f"NCCL connects ranks over SHM ({shm[0].ident})"
    if where is None and "sigbus" in ctx.hints:
        # a training process killed by SIGBUS and nothing else said: a page of a shared
        # memory file (NCCL's segments, DataLoader's tensors) that /dev/shm cannot back
        where, said = failure, "nothing else in the log explains a bus error in a training process"
    if where is None:
        return None
    kind = "a bus error (SIGBUS)" if "sigbus" in ctx.hints else "NCCL's unhandled system error"
    return [], [failure, where], f"{kind}, and {said}", {}


def stalled(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """A log that stops in a step it started (logs/stalls.py), nothing else said."""
    if not ctx.stopped or any(sev != "info" for sev in ctx.present.values()):
        return None
    st, where = ctx.stopped[0]
    q = parse_evidence(where)
    place, text = q.place, q.text
    ends = f"never followed by a line matching {st.done.pattern!r}" if st.done else "and nothing after it"
    shown = "; ".join(f"{w[:200]!r}" for _, w in ctx.stopped[:4])
    said = f"The log stops in {st.what}: {place}"
    fill = {
        **fact_words(f"it stops in {st.what}", "stop"),  # logs25
        "first_lines": f"none; the log stops in {st.what} ({ends}): a hang there, or a log cut there: {shown}",
        "first": f"{place} ({text[:120]!r})",
    }
    return [], [w for _, w in ctx.stopped[:4]], said, fill


def stalled_one_host(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """Stopped at the first collective (or benchmark step) after init, every rank on one
    host: GPU peer traffic through an IOMMU or PCIe ACS, what single-host hangs threads
    establish most."""
    hit = stalled(rules, rule, ctx)
    one = one_host(ctx)
    if hit is None or one is None or not ctx.stopped[0][0].first_step:
        return None
    return [], hit[1], f"{hit[2]}; {one}", {}


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def name_elsewhere(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """c10d was given a number and connected to a name (a reverse lookup), or a short name
    and connected to a longer one (a search domain or an /etc/hosts alias)."""
    for (name, addr, port), ev in ctx.c10d_pairs.items():
        if addr == name or _ip(addr) is not None:
            continue
        if _ip(name) is not None:
            how = (
                f"the address {name} was looked up backwards to the name {addr} (/etc/hosts "
                "or reverse DNS), and c10d connected to what that name resolves to"
            )
        elif "." not in name and addr.startswith(name + "."):
            how = (
                f"the short name {name} was completed to {addr} (a DNS search domain or an "
                "/etc/hosts alias), a name of another network"
            )
        else:
            continue
        said = f"c10d was given ({name}, {port}) and tried {addr}:{port}"
        return [], ev, said, {"name": name, "addr": addr, "port": port, "how": how}
    return None



# A progress bar of the training loop itself runs while collectives complete; only a bar of
# other work (tokenising, loading, evaluating, or no label at all) says a rank was elsewhere.
_TRAINING: Final = re.compile(r"(?i)\b(?:epoch|train\w*|step|iter\w*|batch)")


def busy_bar(ctx: Context) -> tuple[str, str, str] | None:
    """A progress bar of other work that had run about as long as the collective timeout
    when the watchdog fired: the rank printing it was doing that instead.  (who, what ran
    how long, the line)."""
    if ctx.progress is None or not ctx.timeout_ms:
        return None
    seconds, label, line = ctx.progress
    if _TRAINING.search(label) or seconds < 0.8 * ctx.timeout_ms / 1000:
        return None
    ran = f"{seconds // 60} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"
    what = f"{label!r}" if label else "a progress bar"
    who = (
        f"the rank printing {what} (it had run {ran} when the watchdog fired, about the "
        f"{ctx.timeout_ms / 60000:g}-minute timeout)"
    )
    return who, f"{what} had run {ran}", line


def local_across_hosts(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """NCCL connects two ranks over an intra-node transport (P2P/IPC, SHM) that its own
    numbering puts on different hosts: ranks are laid out in blocks of one host's GPUs
    (rank = first rank of its host + its device), so rank r on device d belongs to the
    host whose first rank is r - d; two such hosts, each a multiple of the GPUs per host
    the log shows, joined by P2P or SHM, are two machines NCCL took for one."""
    edges = ctx.local_edges
    if not edges:
        return None
    per_host = 1 + max(max(d1, d2) for _, d1, _, d2, _ in edges)
    for r1, d1, r2, d2, line in edges:
        a, b = r1 - d1, r2 - d2
        if d1 == d2 or a == b or min(a, b) < 0 or a % per_host or b % per_host:
            continue
        said = (
            f"NCCL joins rank {r1} (GPU {d1}, on the host of ranks {a}-{a + per_host - 1}) and "
            f"rank {r2} (GPU {d2}, ranks {b}-{b + per_host - 1}) over an intra-node transport"
        )
        return [r1, r2], [line], said, {}
    return None
