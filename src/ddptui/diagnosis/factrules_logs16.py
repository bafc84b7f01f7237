"""Rules over a log's facts added in round logs16 (issue 15's misses that name an id, and
logs no rule may call clean), read from the printing program's own lines.

rdns_slow: torch's c10d store (torch/csrc/distributed/c10d/socket.cpp) warns "The hostname
of the client socket cannot be retrieved. err=N" when getnameinfo() cannot name a client
that connected; healthy runs print it too, many at once (a burst in the same second, one
per rank).  The same warning from one process again and again, each at least RESOLVER_S
after the one before, is a reverse lookup that waits out the resolver's timeout for every
connection: the store accepts clients one lookup at a time, so start-up (and every later
store connection) slows by that much per client (pytorch#159007, fixed in c10d by PR
#159596, which stops looking names up after the first failure).  No id names that cause:
it is an honest unknown (a warning) that quotes the lines and says what they show, so the
log is not called clean.
Core layer, stdlib only; the rules file and the other predicates are factrules.py's."""

from __future__ import annotations

import re
from itertools import pairwise
from typing import TYPE_CHECKING, Final

from ddptui.diagnosis.evidence import parse_evidence
from ddptui.diagnosis.factcontext import Context, Hit
from ddptui.diagnosis.factrules_logs25 import fact_words

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules

# torch's glog-style prefix: "[W724 18:22:38.909218572 socket.cpp:200]" (level, month
# unpadded, day, time)
_GLOG: Final = re.compile(r"\[[WIEF](?P<mo>\d{1,2})(?P<d>\d\d) (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)(?:\.\d+)?\s")
# glibc's resolver waits 5 s per try, 2 tries (resolv.conf `timeout:5 attempts:2`): a
# failing lookup takes ~10 s.  Healthy testbed runs print the warning twice, 4 s apart
# (tests/fixtures/logs/healthy.log: one per rendezvous round), so the bar is above that.
RESOLVER_S: Final = 8
MIN_WARNINGS: Final = 3


def _seconds(text: str) -> int | None:
    m = _GLOG.search(text)
    if m is None:
        return None
    day = int(m["mo"]) * 31 + int(m["d"])
    return ((day * 24 + int(m["h"])) * 60 + int(m["m"])) * 60 + int(m["s"])


def rdns_slow(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """One process's c10d hostname warnings, three or more, each RESOLVER_S or more after
    the previous: every reverse lookup of a client waited out the DNS timeout."""
    by_source: dict[str, list[tuple[int, str]]] = {}
    for source, line in ctx.rdns:
        t = _seconds(parse_evidence(line).text)
        if t is not None:
            by_source.setdefault(source, []).append((t, line))
    for lines in by_source.values():
        if len(lines) < MIN_WARNINGS:
            continue
        gaps = [b[0] - a[0] for a, b in pairwise(lines)]
        if min(gaps) < RESOLVER_S:
            continue
        n, avg = len(lines), sum(gaps) / len(gaps)
        first = lines[0][1]
        said = (
            f"c10d's store could not name the clients that connected to it ({n} warnings, "
            f"{avg:.0f} s apart on average): each reverse lookup waited out the DNS timeout"
        )
        fill = {
            **fact_words(f"c10d warned {n} times that it cannot name a client"),  # logs25
            "first_lines": (
                f"none; c10d warned {n} times that it cannot retrieve a client's host name, "
                f"each warning {min(gaps)} s or more after the one before: its reverse DNS "
                "lookup (getnameinfo) of every client's address waits out the resolver's "
                "timeout, so start-up slows by that much per connection (make the nodes' "
                "addresses resolve in reverse: DNS PTR records or /etc/hosts entries; torch "
                f"after pytorch#159596 stops retrying): {first[:200]!r}"
            ),
            "first": parse_evidence(first).place,
        }
        return [], [ln for _, ln in lines[:4]], said, fill
    return None


_REGISTRATION: Final = "process registration"


def lightning_slurm_alone(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """Under Slurm (its own lines in the log: slurmstepd, srun), Lightning's "Initializing
    distributed: GLOBAL_RANK: 0, MEMBER: 1/N" (N > 1) is the only process that registered
    and the log stops in that registration (no "All distributed processes registered"):
    under Slurm, Lightning takes its world from the Slurm tasks (SLURM_NTASKS) and one
    process per task, so a world no task count fills (--ntasks-per-node other than
    Trainer(devices), --nodes other than num_nodes) waits for processes Slurm never
    starts (LAUNCH-LIGHTNING-SLURM).  Two or more registered processes that form one
    node's block are logs6's LOGS-MISSING-NODES."""
    if "slurm" not in ctx.hints or not any(_REGISTRATION in st.what for st, _ in ctx.stopped):
        return None
    ranked = [p for p in ctx.procs if p.rank is not None and p.world_size]
    worlds = {p.world_size for p in ranked}
    if len(worlds) != 1 or {p.rank for p in ranked} != {0}:
        return None
    world = int(worlds.pop() or 0)
    if not 1 < world <= 65536:
        return None
    line = ranked[0].evidence.get("rank") or ranked[0].evidence.get("world", "")
    said = (
        f"under Slurm, Lightning set up a world of {world} and only rank 0 registered; the "
        "log stops there (the others never started)"
    )
    fill = {
        "want": f"a world of {world} processes (its 'MEMBER: 1/{world}' line)",
        "have": "one process that registered (rank 0) while the others never did",
    }
    return [], [e for e in (line, ctx.hints["slurm"], ctx.stopped[0][1]) if e], said, fill
