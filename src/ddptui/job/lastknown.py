"""Where a config's job wrote its output, remembered per config, so that once the job is
gone (crashed, killed) `ddptui job` can still read its logs on the nodes."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

from ddptui.job.model import NodeView

MAX_PATHS = 8


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "ddptui" / "jobs"


def _file(config_path: str) -> Path:
    key = hashlib.sha256(str(Path(config_path).expanduser().resolve()).encode()).hexdigest()[:16]
    return state_dir() / f"{key}.json"


def load(config_path: str) -> dict[str, list[str]]:
    """{node: [log paths]} from the last look at a live job of this config; {} if none."""
    try:
        doc = json.loads(_file(config_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    if not isinstance(nodes, dict):
        return {}
    return {
        str(k): [str(p) for p in v if isinstance(p, str)][:MAX_PATHS]
        for k, v in nodes.items()
        if isinstance(v, list)
    }


def load_fr(config_path: str) -> dict[str, list[str]]:
    """{node: [flight recorder dump prefixes]} the job used the last time it was seen."""
    try:
        doc = json.loads(_file(config_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    fr = doc.get("fr") if isinstance(doc, dict) else None
    if not isinstance(fr, dict):
        return {}
    return {str(k): [str(v)] for k, v in fr.items() if isinstance(v, str) and v}


def save(config_path: str, views: Sequence[NodeView]) -> str | None:
    """Remember the output files of the ranks seen; the file written, or None."""
    nodes: dict[str, list[str]] = {}
    for v in views:
        paths = {
            o.path
            for r in v.ranks
            for o in (r.stdout, r.stderr)
            if o.kind == "file" and o.path and o.path.startswith("/")
        }
        paths |= {log.path for log in v.logs if log.path.startswith("/") and not log.error}
        if paths:
            nodes[v.node] = sorted(p.removesuffix(" (deleted)") for p in paths)[:MAX_PATHS]
    if not nodes:
        return None
    fr = {
        v.node: str(v.fr_config["prefix"])
        for v in views
        if v.fr_config and v.fr_config.get("prefix") and (v.fr_config.get("enabled") or v.fr)
    }
    target = _file(config_path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        tmp.write_text(
            json.dumps({"config": config_path, "nodes": nodes, "fr": fr}, indent=1),
            encoding="utf-8",
        )
        tmp.replace(target)
    except OSError:
        return None
    return str(target)
