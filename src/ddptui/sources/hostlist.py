"""Slurm hostlist expressions, our own (python-hostlist is GPL, ClusterShell LGPL).

    expand("gpu[001-003,070]")      -> ["gpu001", "gpu002", "gpu003", "gpu070"]
    expand("a[1-2]-ib[0-1],b")      -> ["a1-ib0", "a1-ib1", "a2-ib0", "a2-ib1", "b"]
    compress(["gpu001", "gpu002"])  -> "gpu[001-002]"

Same grammar as Slurm's (`scontrol show hostnames`): comma-separated items at bracket
depth 0; each `[...]` holds comma-separated numbers or `lo-hi` ranges, zero padding kept
from `lo`; several brackets in one item multiply (the first varies slowest). Pure; no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_HOSTS = 1_000_000  # a typo like gpu[1-99999999] is an error, not a memory hog

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_TAIL_NUM = re.compile(r"^(.*?)(\d+)$")


class HostlistError(ValueError):
    """An expression that does not parse; str() says what and where."""


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets; brackets must balance and never nest."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            if depth:
                raise HostlistError(f"{text!r}: nested '[' at position {i + 1}")
            depth = 1
        elif ch == "]":
            if not depth:
                raise HostlistError(f"{text!r}: ']' without '[' at position {i + 1}")
            depth = 0
        elif ch == "," and not depth:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"{text!r}: '[' is never closed")
    items.append(text[start:])
    return items


def _bracket_values(expr: str, body: str) -> list[str]:
    values: list[str] = []
    for part in body.split(","):
        m = _RANGE.match(part.strip())
        if m is None:
            raise HostlistError(
                f"{expr!r}: [{body}] must hold numbers or ranges like 001-064 (got {part!r})"
            )
        lo, hi = m.group(1), m.group(2)
        if hi is None:
            values.append(lo)
            continue
        if int(hi) < int(lo):
            raise HostlistError(f"{expr!r}: range {part} goes backwards")
        if int(hi) - int(lo) >= MAX_HOSTS:
            raise HostlistError(f"{expr!r}: range {part} is larger than {MAX_HOSTS} hosts")
        width = len(lo)
        values.extend(str(n).zfill(width) for n in range(int(lo), int(hi) + 1))
    return values


def _expand_item(expr: str, item: str) -> list[str]:
    parts = re.split(r"(\[[^\]]*\])", item)
    out = [""]
    for part in parts:
        if part.startswith("["):
            values = _bracket_values(expr, part[1:-1])
            if len(out) * len(values) > MAX_HOSTS:
                raise HostlistError(f"{expr!r}: more than {MAX_HOSTS} hosts")
            out = [o + v for o in out for v in values]
        else:
            out = [o + part for o in out]
    return out


def expand(expr: str) -> list[str]:
    """Every host of a hostlist expression, in order (duplicates kept, as Slurm does)."""
    text = expr.strip()
    if not text:
        raise HostlistError("empty hostlist expression")
    if any(ch.isspace() for ch in text):
        raise HostlistError(f"{expr!r}: whitespace inside a hostlist (separate hosts with ',')")
    hosts: list[str] = []
    for item in _split_top(text):
        if not item:
            raise HostlistError(f"{expr!r}: empty item (two commas in a row, or a trailing one)")
        hosts.extend(_expand_item(expr, item))
        if len(hosts) > MAX_HOSTS:
            raise HostlistError(f"{expr!r}: more than {MAX_HOSTS} hosts")
    return hosts


def is_expression(text: str) -> bool:
    """Whether text needs expanding (it has a bracket or a comma)."""
    return "[" in text or "," in text


def compress(hosts: Iterable[str]) -> str:
    """A hostlist expression for hosts: one bracket per prefix and padding width, in the
    order each first appears; duplicates dropped. `gpu099,gpu100` share width 3 (as
    Slurm writes them); `n9,n10` are unpadded (`n[9-10]`)."""
    hosts = list(dict.fromkeys(hosts))
    split: list[tuple[str, str] | None] = []
    padded: set[tuple[str, int]] = set()
    for host in hosts:
        m = _TAIL_NUM.match(host)
        if m is None or "[" in host or "," in host:
            split.append(None)
            continue
        split.append((m.group(1), m.group(2)))
        if m.group(2).startswith("0") and len(m.group(2)) > 1:
            padded.add((m.group(1), len(m.group(2))))
    groups: dict[tuple[str, int], list[int]] = {}
    order: list[tuple[str, int] | str] = []
    for host, parts in zip(hosts, split, strict=True):
        if parts is None:
            order.append(host)
            continue
        prefix, digits = parts
        width = len(digits) if (prefix, len(digits)) in padded else 0
        key = (prefix, width)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(digits))
    out: list[str] = []
    for entry in order:
        if isinstance(entry, str):
            out.append(entry)
            continue
        prefix, width = entry
        nums = sorted(set(groups[entry]))
        if len(nums) == 1:
            out.append(f"{prefix}{str(nums[0]).zfill(width)}")
        else:
            out.append(f"{prefix}[{_ranges(nums, width)}]")
    return ",".join(out)


def _ranges(nums: list[int], width: int) -> str:
    parts: list[str] = []
    start = prev = nums[0]
    for n in [*nums[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        lo, hi = str(start).zfill(width), str(prev).zfill(width)
        parts.append(lo if start == prev else f"{lo}-{hi}")
        if n is not None:
            start = prev = n
    return ",".join(parts)
