"""A glance at cluster.yaml before anything heavy loads: the cluster's name and its
nodes' names, read line by line from YAML's plain block style, so the very first frame
(drawn before Textual, pydantic and the YAML parser are imported) can show the node
columns. Only for drawing: the config is parsed and validated for real right after, and
anything this scan does not understand gives None (the frame then shows rows alone).
Ground floor: stdlib only."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_KEY = re.compile(r"^(?P<indent> *)(?P<dash>- +)?(?P<key>[A-Za-z_][\w-]*) *:(?: +(?P<value>.*))?$")
_PLAIN = re.compile(r"^[^\[\]{}&*!|>%@`#,]+$")  # a scalar this scan reads as it is
MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class Glance:
    name: str | None  # the cluster's `name:`
    nodes: tuple[str, ...]  # each node's display name (its `name:`, else its `host:`)


def glance_file(path: str) -> Glance | None:
    """The glance at the YAML file at path; None when it cannot be read or is not plain."""
    try:
        with Path(path).expanduser().open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_BYTES:
        return None
    return glance_text(data.decode("utf-8", errors="replace"))


def _scalar(value: str | None) -> str | None:
    """A plain or quoted scalar without its comment; None for anything else."""
    text = (value or "").strip()
    if text[:1] in ("'", '"'):
        quote = text[0]
        end = text.find(quote, 1)
        rest = text[end + 1 :].strip() if end > 0 else "?"
        if end < 0 or (rest and not rest.startswith("#")) or "\\" in text[:end]:
            return None
        return text[1:end]
    text = re.split(r"\s#", text, maxsplit=1)[0].strip()
    return text if text and _PLAIN.match(text) else None


class _NotPlain(Exception):
    """A line this scan does not read: the glance gives up (None)."""


def glance_text(text: str) -> Glance | None:
    """The glance at YAML text (see the module's docstring)."""
    try:
        name, nodes = _scan(text.splitlines())
    except _NotPlain:
        return None
    shown = [n.get("name") or n.get("host") for n in nodes]
    if not shown or None in shown:
        return None
    return Glance(name, tuple(s for s in shown if s is not None))


def _scan(lines: list[str]) -> tuple[str | None, list[dict[str, str | None]]]:
    """(the top-level name, each node's name and host) of block-style YAML lines."""
    name: str | None = None
    nodes: list[dict[str, str | None]] = []
    in_nodes = False
    item_indent = key_col = -1
    for raw in lines:
        line = raw.rstrip()
        stripped = line.lstrip(" ")
        if not stripped or stripped.startswith("#") or line.startswith(("---", "%")):
            continue
        indent = len(line) - len(stripped)
        m = _KEY.match(line)
        if indent == 0 and not stripped.startswith("-"):  # a top-level key
            if m is None or (m["key"] == "nodes" and _scalar(m["value"]) is not None):
                raise _NotPlain  # not a key, or nodes as a flow list or an alias
            in_nodes = m["key"] == "nodes"
            name = _scalar(m["value"]) if m["key"] == "name" else name
            continue
        if not in_nodes:
            continue
        if indent < item_indent or stripped.startswith("\t"):
            raise _NotPlain
        if stripped.startswith("-") and item_indent in (-1, indent):
            if m is None or not m["dash"]:
                raise _NotPlain  # an item that is not a mapping
            item_indent, key_col = indent, indent + len(m["dash"])
            nodes.append({})
        elif m is None or indent != key_col:
            continue  # nested deeper: a node's own settings
        if m["key"] in ("name", "host"):
            nodes[-1][m["key"]] = _scalar(m["value"])
    return name, nodes
