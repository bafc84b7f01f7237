"""The log-diagnosis knowledge base: signatures.yaml loaded, validated and applied to
log lines.  Core layer: stdlib and ruamel.yaml only."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

SIGNATURES_FILE: Final = Path(__file__).with_name("signatures.yaml")
STEPS: Final = frozenset({"port", "env", "allreduce"})
PHASES: Final = frozenset({"store", "boot", "net", "data", "teardown", "launch"})
SEVERITIES: Final = frozenset({"error", "warning", "info"})
# field: the sample is a line quoted in a public issue thread (a real user's log; most are
#        in tests/fixtures/corpus/ with their thread).
# source: the sample is the format string of a WARN/error site in the printing project's
#        source (tests/fixtures/source_sites/*.tsv) with its placeholders filled in.
SOURCES: Final = frozenset({"testbed", "reference", "gpu", "field", "source"})
# Lines are matched on their first MAX_LINE characters: every known signature sits near
# the start, and a runaway line (a tensor dump) must not cost more than a normal one.
MAX_LINE: Final = 8192
_REQUIRED: Final = (
    "id",
    "title",
    "step",
    "phase",
    "severity",
    "regex",
    "specificity",
    "secondary",
    "cause",
    "fix",
    "sample",
    "source",
)
_KEYS: Final = frozenset({*_REQUIRED, "not_regex"})
# {name} placeholders in cause/fix; braces around anything else (awk '{print $5}') stay text.
_PLACEHOLDER: Final = re.compile(r"\{(\w+)\}")
# root_cause tiers: (severity, secondary) in the order they are considered.
_TIERS: Final = (("error", False), ("error", True), ("warning", False), ("warning", True))
_INFO_TIER: Final = ("info", False)


class SignatureError(ValueError):
    """signatures.yaml is malformed; the message names the entry and the problem."""


@dataclass(frozen=True)
class Signature:
    """One known log line: how to recognise it, what it means, how to fix it."""

    id: str
    title: str
    step: str
    phase: str
    severity: str
    regex: re.Pattern[str]
    specificity: int
    secondary: bool
    cause: str
    fix: str
    sample: str
    source: str
    not_regex: re.Pattern[str] | None = None

    def match(self, line: str) -> Match | None:
        head = line[:MAX_LINE]
        m = self.regex.search(head)
        if m is None or (self.not_regex is not None and self.not_regex.search(head)):
            return None
        groups = {k: v for k, v in m.groupdict().items() if v is not None}
        return Match(self, line, groups)


@dataclass(frozen=True)
class Match:
    """A signature recognised on one line, with the regex's named groups that matched."""

    signature: Signature
    line: str
    groups: dict[str, str]

    def fix_text(self) -> str:
        """The fix with {placeholders} filled from the line; a missing one reads <name>."""
        return fill(self.signature.fix, self.groups)

    def cause_text(self) -> str:
        return fill(self.signature.cause, self.groups)


def fill(template: str, groups: Mapping[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: groups.get(m.group(1), f"<{m.group(1)}>"), template)


def _compile(sid: str, key: str, pattern: object) -> re.Pattern[str]:
    if not isinstance(pattern, str) or not pattern:
        raise SignatureError(f"{sid}: {key} must be a non-empty string")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise SignatureError(f"{sid}: {key} does not compile: {exc}") from exc


def _text(sid: str, entry: Mapping[str, Any], key: str) -> str:
    value = entry[key]
    if not isinstance(value, str) or not value.strip():
        raise SignatureError(f"{sid}: {key} must be a non-empty string")
    return value


def _one(entry: object, index: int) -> Signature:
    if not isinstance(entry, dict):
        raise SignatureError(f"entry {index}: expected a mapping, got {type(entry).__name__}")
    sid = str(entry.get("id", f"entry {index}"))
    missing = [k for k in _REQUIRED if k not in entry]
    if missing:
        raise SignatureError(f"{sid}: missing keys {', '.join(missing)}")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise SignatureError(f"{sid}: unknown keys {', '.join(unknown)}")
    for key, allowed in (
        ("step", STEPS),
        ("phase", PHASES),
        ("severity", SEVERITIES),
        ("source", SOURCES),
    ):
        if entry[key] not in allowed:
            raise SignatureError(f"{sid}: {key} {entry[key]!r} is not one of {sorted(allowed)}")
    if not isinstance(entry["specificity"], int) or isinstance(entry["specificity"], bool):
        raise SignatureError(f"{sid}: specificity must be an integer")
    if not isinstance(entry["secondary"], bool):
        raise SignatureError(f"{sid}: secondary must be true or false")
    regex = _compile(sid, "regex", entry["regex"])
    not_regex = _compile(sid, "not_regex", entry["not_regex"]) if "not_regex" in entry else None
    sig = Signature(
        id=_text(sid, entry, "id"),
        title=_text(sid, entry, "title"),
        step=entry["step"],
        phase=entry["phase"],
        severity=entry["severity"],
        regex=regex,
        specificity=entry["specificity"],
        secondary=entry["secondary"],
        cause=_text(sid, entry, "cause"),
        fix=_text(sid, entry, "fix"),
        sample=_text(sid, entry, "sample"),
        source=entry["source"],
        not_regex=not_regex,
    )
    for key in ("cause", "fix"):
        for name in _PLACEHOLDER.findall(getattr(sig, key)):
            if name not in regex.groupindex:
                raise SignatureError(f"{sid}: {key} uses {{{name}}}, which is not a regex group")
    if sig.match(sig.sample) is None:
        raise SignatureError(f"{sid}: sample does not match its own regex: {sig.sample!r}")
    return sig


def parse_signatures(text: str) -> tuple[Signature, ...]:
    """Signatures from YAML text, validated (SignatureError names the first problem)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        doc = YAML(typ="safe").load(text)
    except YAMLError as exc:
        raise SignatureError(f"not valid YAML: {exc}") from exc
    entries = doc.get("signatures") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise SignatureError("expected a top-level 'signatures:' list")
    sigs = tuple(_one(e, i) for i, e in enumerate(entries))
    seen: set[str] = set()
    for sig in sigs:
        if sig.id in seen:
            raise SignatureError(f"{sig.id}: duplicate id")
        seen.add(sig.id)
    return sigs


@functools.lru_cache(maxsize=1)
def load_signatures() -> tuple[Signature, ...]:
    """The shipped knowledge base, parsed once per process."""
    try:
        text = SIGNATURES_FILE.read_text(encoding="utf-8")
    except OSError as exc:
        raise SignatureError(f"cannot read {SIGNATURES_FILE}: {exc}") from exc
    return parse_signatures(text)


@functools.lru_cache(maxsize=1)
def secondary_ids() -> frozenset[str]:
    """The ids of the shipped signatures marked `secondary` (a consequence of a failure)."""
    return frozenset(sig.id for sig in load_signatures() if sig.secondary)


def classify_line(line: str, signatures: Iterable[Signature] | None = None) -> Match | None:
    """The most specific signature on `line`: highest specificity, then non-secondary,
    then file order."""
    best: Match | None = None
    best_key = (0, False)
    for sig in load_signatures() if signatures is None else signatures:
        if best is not None and sig.specificity < best_key[0]:
            continue  # cannot win: skip the regex
        m = sig.match(line)
        if m is None:
            continue
        key = (sig.specificity, not sig.secondary)
        if best is None or key > best_key:
            best, best_key = m, key
    return best


def classify_lines(
    lines: Iterable[tuple[float, str, str]],
    signatures: Iterable[Signature] | None = None,
) -> list[tuple[float, str, Match]]:
    """(time, origin, line) -> (time, origin, match) for the lines a signature knows, in
    time order (stable for equal times)."""
    sigs = load_signatures() if signatures is None else tuple(signatures)
    out = []
    for t, origin, line in lines:
        m = classify_line(line, sigs)
        if m is not None:
            out.append((t, origin, m))
    out.sort(key=lambda item: item[0])
    return out


def root_cause(
    matches: list[tuple[float, str, Match]],
) -> tuple[float, str, Match] | None:
    """The first failure: among non-secondary errors the earliest (ties: the more
    specific).  Only when there is none: secondary errors, then warnings, then
    non-secondary info, each earliest first.  Secondary info lines are never a cause."""
    order = {id(sig): i for i, sig in enumerate(load_signatures())}
    for tier in (*_TIERS, _INFO_TIER):
        pool = [
            item
            for item in matches
            if (item[2].signature.severity, item[2].signature.secondary) == tier
        ]
        if pool:
            return min(
                pool,
                key=lambda item: (
                    item[0],
                    -item[2].signature.specificity,
                    order.get(id(item[2].signature), len(order)),
                ),
            )
    return None
