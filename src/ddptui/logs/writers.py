"""Who wrote the lines a finding quotes: the rank the log itself says (lineinfo's
prefixes), the node from the host names in the lines (lineinfo's LineHead.host: NCCL's
prefix, pdsh/DeepSpeed, kubectl, slurmstepd), else from the job's layout (the
config's node order x nproc_per_node), else, for a file only one node has, that node.
When none of these tells, the file is named, never the node that happened to read it.
Pure core."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ddptui.diagnosis.finding import Finding
from ddptui.logs.diagnose import LogDiagnosis
from ddptui.logs.lineinfo import parse_head
from ddptui.logs.sharedfs import SharedFile


@dataclass(frozen=True)
class Layout:
    """What the config says about where ranks run."""

    order: tuple[str, ...] = ()  # node names in node-rank order
    nproc_per_node: int | None = None  # None: not a fixed number ("gpus")
    hostnames: Mapping[str, str] | None = None  # node -> the host name it reports

    def node_of_host(self, host: str) -> str | None:
        short = host.split(".", 1)[0]
        for node, name in (self.hostnames or {}).items():
            if name and (name == host or name.split(".", 1)[0] == short):
                return node
        return next((n for n in self.order if n in (host, short)), None)

    def node_of_rank(self, rank: int) -> str | None:
        if not self.nproc_per_node or not self.order:
            return None
        index = rank // self.nproc_per_node
        return self.order[index] if index < len(self.order) else None


@dataclass(frozen=True)
class Writer:
    rank: int | None
    node: str | None  # None: not known; the finding names its file
    how: str

    def to_dict(self) -> dict[str, object]:
        return {"rank": self.rank, "node": self.node, "how": self.how}


def writer_of(
    f: Finding, texts: Sequence[str], files: Mapping[str, SharedFile], layout: Layout
) -> Writer:
    hosts = {h for h in (parse_head(t, 2000)[0].host for t in texts) if h}
    if len(hosts) == 1:
        host = next(iter(hosts))
        node = layout.node_of_host(host)
        if node is not None:
            return Writer(f.rank, node, f"its lines name host {host}")
    own = {files[label].sightings[0].node for label in f.nodes if label in files}
    local = all(label in files and not files[label].shared and not files[label].network for label in f.nodes)
    if f.nodes and local and len(own) == 1:
        node = next(iter(own))
        return Writer(f.rank, node, f"its log is a file of {node} alone")
    if f.rank is not None:
        node = layout.node_of_rank(f.rank)
        if node is not None:
            return Writer(
                f.rank,
                node,
                f"the config's layout: {layout.nproc_per_node} rank(s) per node in node order",
            )
    if len(hosts) == 1:
        host = next(iter(hosts))
        return Writer(f.rank, None, f"its lines name host {host}, which is not a configured node")
    return Writer(f.rank, None, "not known: named by its file")


def attribute(
    diag: LogDiagnosis, files: Mapping[str, SharedFile], layout: Layout
) -> tuple[LogDiagnosis, dict[str, Writer]]:
    """The diagnosis with each finding's summary naming the node that wrote its lines
    (when it can be known), and the writers by finding id."""
    writers: dict[str, Writer] = {}
    findings = []
    for f in diag.findings:
        texts = [h.text for h in diag.hits if h.match.signature.id == f.id]
        w = writer_of(f, texts, files, layout)
        writers[f.id] = w
        named = any(label.startswith(f"{w.node}:") for label in f.nodes)
        if w.node is not None and not named:
            findings.append(replace(f, summary=f"{f.summary}; on {w.node} ({w.how})"))
        else:
            findings.append(f)
    first = next((f for f in findings if diag.first is not None and f.id == diag.first.id), None)
    return replace(diag, findings=tuple(findings), first=first), writers
