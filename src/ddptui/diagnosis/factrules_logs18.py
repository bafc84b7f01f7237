"""Rules over a log's facts added in round logs18 (issue 15, blind batch L's misses that
name an id), read from the printing program's own lines.

graph_file_set: NCCL prints every variable it reads from the environment or nccl.conf as
"NCCL_X set by environment to V" (misc/param.cc, NCCL_DEBUG=INFO).  NCCL_GRAPH_FILE makes
NCCL import its rings and trees from an XML file instead of searching them for the GPUs
and NICs it found (graph/search.cc ncclTopoCompute); a file written for another machine
(a cloud image's default in /etc/nccl.conf, NCCL#1240: Azure's ncv4 graph.xml) gives
graphs that do not fit the devices in use.  NCCL's maintainers: "This parameter should
never be set in production."  A warning (a paste may be healthy): it leads only where
nothing else in the log looks like a failure (factrules.yaml not_clean).
Core layer, stdlib only; the rules file and the other predicates are factrules.py's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddptui.diagnosis.factcontext import Context, Hit, who

if TYPE_CHECKING:
    from ddptui.diagnosis.factmodel import FactRule, FactRules

_VAR = "NCCL_GRAPH_FILE"


def graph_file_set(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """A process states NCCL_GRAPH_FILE set (to a file: an empty value is unset)."""
    procs = [p for p in ctx.procs if p.nccl_env.get(_VAR)]
    if not procs:
        return None
    path = procs[0].nccl_env[_VAR]
    said = (
        f"{who(procs[0])} runs with {_VAR}={path}: NCCL imports its rings and trees from that "
        "file instead of searching them for the GPUs and NICs it found"
    )
    ranks = [p.rank for p in procs if p.rank is not None]
    return ranks, [procs[0].evidence[f"env:{_VAR}"]], said, {"what": "graph", "file": path}
