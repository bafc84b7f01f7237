"""One file, one read: what every node said it would read (probes/_fileid.py), grouped
into the files that are really one file seen from several nodes, and which node reads
each.  Pure core, stdlib only.

What makes two sightings one file:
  - the same kernel (boot id) and the same (st_dev, inode): one object in one kernel.
    This is any local filesystem (ext4, xfs, tmpfs, overlay) seen from several "nodes"
    on one machine (containers, namespaces: the testbed); two machines' /tmp never match.
  - a network filesystem (nfs, lustre, gpfs, beegfs, ceph, ...) of the same type and
    mount source with the same inode: st_dev is per client mount (it differs between
    nodes) but the inode number is the server's;
  - a network filesystem whose clients name the server differently (`nfs1:/home` and
    `10.0.0.5:/home`): the same inode, size, mtime and hashes of the first and last
    4 KiB.
Anything else is a file of its own, kept once per node that has it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Sighting:
    """One file as one node saw it."""

    node: str
    path: str
    size: int
    mtime_ns: int
    ino: int
    dev: str
    fstype: str
    source: str
    network: bool
    boot: str
    head: str
    tail: str

    @classmethod
    def from_record(cls, node: str, rec: Mapping[str, Any]) -> Sighting | None:
        """From the probe's `seen` record; None when it is not one."""
        try:
            return cls(
                node,
                str(rec["path"]),
                int(rec["size"]),
                int(rec["mtime_ns"]),
                int(rec["ino"]),
                str(rec.get("dev") or ""),
                str(rec.get("fstype") or "?"),
                str(rec.get("source") or ""),
                bool(rec.get("network")),
                str(rec.get("boot") or ""),
                str(rec.get("head") or ""),
                str(rec.get("tail") or ""),
            )
        except (KeyError, TypeError, ValueError):
            return None

    def identity_keys(self) -> list[tuple[str, ...]]:
        """Each key another sighting of the same file shares."""
        out: list[tuple[str, ...]] = []
        if self.boot:
            out.append(("kernel", self.boot, self.dev, str(self.ino)))
        if self.network:
            out.append(("netfs", self.fstype, self.source, str(self.ino)))
            out.append(
                ("content", str(self.ino), str(self.size), str(self.mtime_ns), self.head, self.tail)
            )
        return out


@dataclass
class SharedFile:
    """One file and every node that sees it; `reader` reads it."""

    sightings: list[Sighting]
    reader: str = ""

    @property
    def nodes(self) -> list[str]:
        return sorted({s.node for s in self.sightings})

    @property
    def shared(self) -> bool:
        return len(self.nodes) > 1

    @property
    def network(self) -> bool:
        return any(s.network for s in self.sightings)

    @property
    def size(self) -> int:
        return max(s.size for s in self.sightings)

    def on(self, node: str) -> Sighting:
        return next(s for s in self.sightings if s.node == node)

    @property
    def path(self) -> str:
        return self.on(self.reader).path if self.reader else self.sightings[0].path

    @property
    def changing(self) -> bool:
        """The nodes saw different sizes, times or ends: written to while looked at."""
        seen = {(s.size, s.mtime_ns, s.tail) for s in self.sightings}
        return len(seen) > 1

    @property
    def label(self) -> str:
        """How the report names it: the file alone when it is on a shared filesystem (the
        node that reads it is not the one that wrote it), NODE:PATH when it is one
        node's own file."""
        if self.shared or self.network:
            return self.path
        return f"{self.reader or self.sightings[0].node}:{self.path}"

    def where(self) -> str:
        """"nfs4 srv:/home; seen on n0, n1, n2, read once on n1"."""
        s = self.on(self.reader) if self.reader else self.sightings[0]
        fs = f"{s.fstype} {s.source}".strip()
        seen = ", ".join(self.nodes)
        return f"{fs}; seen on {seen}, read once on {self.reader}"


@dataclass
class Plan:
    """The files to read and who reads what."""

    files: list[SharedFile] = field(default_factory=list)

    def assigned(self, node: str) -> list[SharedFile]:
        return [f for f in self.files if f.reader == node]

    @property
    def bytes_seen(self) -> int:
        """What reading every sighting would cost (the old way)."""
        return sum(s.size for f in self.files for s in f.sightings)

    @property
    def bytes_planned(self) -> int:
        return sum(f.size for f in self.files)


def group(sightings: Iterable[Sighting]) -> list[SharedFile]:
    """Sightings that are one file, together (union by any shared key), in the order
    they first came."""
    items = list(sightings)
    parent = list(range(len(items)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[tuple[str, ...], int] = {}
    for i, s in enumerate(items):
        for key in s.identity_keys():
            j = owner.setdefault(key, i)
            a, b = find(i), find(j)
            if a != b:
                parent[max(a, b)] = min(a, b)
    groups: dict[int, list[Sighting]] = {}
    for i, s in enumerate(items):
        groups.setdefault(find(i), []).append(s)
    out = []
    for members in groups.values():
        # A node that matched one file under two paths (a symlink, two globs) reads it once.
        by_node: dict[str, Sighting] = {}
        for s in members:
            by_node.setdefault(s.node, s)
        out.append(SharedFile(list(by_node.values())))
    return out


def plan(sightings: Iterable[Sighting], order: Sequence[str]) -> Plan:
    """Group, then give each file to one node that sees it: biggest files first, each to
    the least loaded of the nodes that saw it at its largest (a live log is read where it
    is most complete), ties by config order."""
    files = group(sightings)
    rank = {n: i for i, n in enumerate(order)}
    load = dict.fromkeys(order, 0)
    for f in sorted(files, key=lambda f: -f.size):
        best = [s.node for s in f.sightings if s.size == f.size]
        f.reader = min(best, key=lambda n: (load.get(n, 0), rank.get(n, len(rank)), n))
        load[f.reader] = load.get(f.reader, 0) + f.size
    return Plan(files)
