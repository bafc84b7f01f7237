"""Rules over a log's facts added in round logs6 (issue 15): launchers that state each
process's global rank and the world (Lightning's "GLOBAL_RANK: r, MEMBER: m/N") in a log
that stops while they register.  Core layer, stdlib only; the rules file and the other
predicates are factrules.py's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddptui.diagnosis.factcontext import Context, Hit, ranks_said, span

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules

# the wait a registration stalls in (factrules.yaml stalls: its `what`)
_REGISTRATION = "process registration"


def registered_block_missing(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """The log stops while the processes register (Lightning's "All distributed processes
    registered" never came); the ranks that did announce themselves are exactly the first
    block 0..k-1 of a world of N (k < N, N a multiple of k): one node's processes.  The
    nodes that hold ranks k..N-1 never started theirs (python run without srun in an sbatch
    script, --nodes or --ntasks-per-node short of the Trainer's num_nodes x devices, a node
    launched with another world), and the first node waits for them."""
    if not any(_REGISTRATION in st.what for st, _ in ctx.stopped):
        return None
    ranked = [p for p in ctx.procs if p.rank is not None and p.world_size]
    worlds = {p.world_size for p in ranked}
    if len(worlds) != 1:
        return None
    world = int(worlds.pop() or 0)
    if any("#" in (p.host or "") for p in ranked):
        return None  # a rank announced twice: LOGS-DUP-RANK's case
    ranks = sorted({int(p.rank or 0) for p in ranked})
    k = len(ranks)
    if k < 2 or k >= world or world > 4096 or ranks != list(range(k)) or world % k:
        # gaps or a partial block: another rule's case; one process alone says nothing of
        # nodes (its own launcher may not have started the others on its node)
        return None
    nodes = world // k
    ev = [p.evidence.get("rank") or p.evidence.get("world", "") for p in ranked[:3]]
    ev.append(ctx.stopped[0][1])
    said = (
        f"ranks {span(ranks)} of a world of {world} registered and the log stops there: "
        f"ranks {span(list(range(k, world)))} (node rank(s) {span(list(range(1, nodes)))} of "
        f"{nodes} nodes of {k} processes) never did"
    )
    fill = {"nnodes": str(nodes), "seen": "0", "missing": span(list(range(1, nodes)))}
    return list(range(k, world)), [e for e in ev if e], said, fill


def independent_rank0(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """Processes on two or more hosts each state the same ranks 0..g-1 (nccl-tests' device
    list, torch's process-group options), and no world larger than g is stated: the
    launcher started one job per host side by side (mpirun of nccl-tests built without
    MPI=1, a script that ignores the launcher's rank, torchrun --standalone on each node)."""
    ranked = [p for p in ctx.procs if p.rank is not None]
    by_host: dict[str, set[int]] = {}
    for p in ranked:
        by_host.setdefault((p.host or "").partition("#")[0], set()).add(int(p.rank or 0))
    by_host.pop("", None)
    if len(by_host) < 2 or any(p.host is None for p in ranked):
        return None
    sets = {frozenset(r) for r in by_host.values()}
    if len(sets) != 1:
        return None
    each = sorted(sets.pop())
    g = len(each)
    if each != list(range(g)) or g > 4096 or any((p.world_size or g) != g for p in ranked):
        return None
    hosts = sorted(by_host)
    ev = [p.evidence.get("rank") or p.evidence.get("world", "") for p in ranked[:4]]
    said = f"{ranks_said(each)} stated on each of {len(hosts)} hosts ({', '.join(hosts[:6])})"
    fill = {"hosts": ", ".join(hosts[:12]), "count": str(len(hosts)), "ranks": span(each)}
    return each, [e for e in ev if e], said, fill
