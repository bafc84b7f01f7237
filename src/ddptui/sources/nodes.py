"""cluster.yaml's node sources: hostlist expressions in `nodes:`, and `hostfile:`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddptui.sources.hostfile import HostfileError, read_hostfile
from ddptui.sources.hostlist import HostlistError, expand, is_expression


def expand_node_entries(entries: list[Any]) -> list[Any]:
    """`- gpu[001-004]` or `- {host: "gpu[001-004]", user: alice}`: one entry per host
    (the other keys copied). A plain string entry is `{host: it}`. Entries that are
    neither are left for the schema to reject with their position."""
    out: list[Any] = []
    for i, raw in enumerate(entries):
        entry = {"host": raw} if isinstance(raw, str) else raw
        host = entry.get("host") if isinstance(entry, dict) else None
        if not isinstance(host, str) or not is_expression(host):
            out.append(entry)
            continue
        try:
            hosts = expand(host)
        except HostlistError as exc:
            raise ValueError(f"nodes[{i}].host: {exc}") from None
        if entry.get("name") is not None and len(hosts) > 1:
            raise ValueError(
                f"nodes[{i}]: `name:` cannot name the {len(hosts)} hosts of {host!r}; "
                "drop it (each node is named after its host)"
            )
        out.extend({**entry, "host": h} for h in hosts)
    return out


def hostfile_nodes(data: dict[str, Any], base: Path | None) -> dict[str, Any]:
    """The config dict with `nodes:` read from its `hostfile:` (relative to the config
    file). Equal `slots=N` on every line set nproc_per_node when the config does not."""
    path = Path(data["hostfile"]).expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    try:
        entries = read_hostfile(path)
    except HostfileError as exc:
        raise ValueError(str(exc)) from None
    out = dict(data)
    out["nodes"] = [{"host": e.host} for e in entries]
    slots = {e.slots for e in entries}
    if "nproc_per_node" not in out and len(slots) == 1 and None not in slots:
        out["nproc_per_node"] = slots.pop()
    return out
