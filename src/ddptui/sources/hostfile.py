"""Hostfiles: MPI / DeepSpeed `host slots=N`, MPICH `host:N`, or one host per line.

    # comment               blank lines and comments are ignored
    gpu-node-01 slots=8     OpenMPI / DeepSpeed (max_slots=M is accepted too)
    gpu-node-02:8           MPICH / hydra
    gpu-node-03             one host per line
    gpu[04-06] slots=8      a hostlist expression stands for each of its hosts

A cluster source: it yields hosts (in file order = node rank) and their slots; how
they are reached (SSH with every ~/.ssh/config rule, srun) is the transport's business.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ddptui.sources.hostlist import HostlistError, expand

_HOST = re.compile(r"^[A-Za-z0-9_.\-\[\],:@%]+$")  # names, IPs, IPv6 in brackets, hostlists
_KV = re.compile(r"^(slots|max_slots|max-slots)=(\d+)$")


class HostfileError(ValueError):
    """A hostfile that cannot be used; str() names file:line and what is wrong."""


@dataclass(frozen=True)
class HostEntry:
    host: str
    slots: int | None = None


def parse_hostfile(text: str, source: str = "<hostfile>") -> list[HostEntry]:
    entries: list[HostEntry] = []
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        host, slots = words[0], None
        where = f"{source}:{lineno}"
        if ":" in host and host.count(":") == 1 and host.rsplit(":", 1)[1].isdigit():
            host, count = host.rsplit(":", 1)
            slots = int(count)
        if not _HOST.match(host) or host.startswith("-"):
            raise HostfileError(
                f"{where}: {raw.strip()!r} is not a host line "
                "(expected `host`, `host slots=N` or `host:N`)"
            )
        for word in words[1:]:
            m = _KV.match(word)
            if m is None:
                raise HostfileError(
                    f"{where}: unexpected {word!r} after {host!r} "
                    "(only slots=N and max_slots=N may follow a host)"
                )
            if m.group(1) == "slots":
                slots = int(m.group(2))
        if slots is not None and slots < 1:
            raise HostfileError(f"{where}: slots must be at least 1 (got {slots})")
        try:
            hosts = expand(host) if "[" in host else [host]
        except HostlistError as exc:
            raise HostfileError(f"{where}: {exc}") from None
        for h in hosts:
            if h in seen:
                raise HostfileError(
                    f"{where}: host {h!r} is listed twice (first on line {seen[h]})"
                )
            seen[h] = lineno
            entries.append(HostEntry(h, slots))
    if not entries:
        raise HostfileError(f"{source}: no hosts in the file (only comments or blank lines)")
    return entries


def read_hostfile(path: str | Path) -> list[HostEntry]:
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise HostfileError(f"{p}: no such hostfile") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise HostfileError(f"{p}: cannot read the hostfile: {exc}") from None
    return parse_hostfile(text, str(p))
