"""The exclude list: the nodes a resubmission should skip (`sbatch --exclude=...`).

The rule is data-driven:
- a finding of severity error names bad nodes, unless it names every node of the run
  (then the cause is cluster-wide: a wrong MASTER_PORT, a missing library everywhere,
  not a bad node);
- a finding whose knowledge-base entry says `exclude: true` names bad nodes whatever its
  severity (a slow node or link from the fabric step); `exclude: false` never does.
Core layer; works on the report document, so check, job and diagnose share it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ddptui.diagnosis.kb import KbError, kb_entry
from ddptui.sources.hostlist import compress


def _kb_exclude(fid: str) -> bool | None:
    try:
        return kb_entry(fid).exclude
    except KbError:
        return None


def excluded_nodes(findings: Iterable[Mapping[str, Any]], all_nodes: Iterable[str]) -> list[str]:
    """Node names to exclude, in run order (see the module docstring for the rule)."""
    order = list(all_nodes)
    everyone = set(order)
    bad: set[str] = set()
    for f in findings:
        nodes = {str(n) for n in f.get("nodes") or ()} & everyone
        if not nodes:
            continue
        flag = _kb_exclude(str(f.get("id", "")))
        if flag is False:
            continue
        if flag is True or (
            f.get("severity") == "error" and not (nodes == everyone and len(everyone) > 1)
        ):
            bad |= nodes
    return [n for n in order if n in bad]


def exclude_expr(report: Mapping[str, Any]) -> str:
    """The report's `exclude`: a hostlist of the hosts of the excluded nodes ("" if none)."""
    nodes = report.get("nodes") or []
    host_of = {str(n.get("name")): str(n.get("host") or n.get("name")) for n in nodes}
    findings = [f for step in report.get("steps") or [] for f in step.get("findings") or []]
    names = excluded_nodes(findings, host_of)
    return compress(host_of[n] for n in names)
