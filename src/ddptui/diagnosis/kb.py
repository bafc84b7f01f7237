"""The finding knowledge base: kb/*.yaml loaded, validated and used to build findings.

Every finding id has exactly one entry (title, severity, cause, fix) either in a
kb/*.yaml file or, for ids that name a log line, in signatures.yaml.  Code passes the
facts; the text lives here.  Core layer: stdlib and ruamel.yaml only."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ddptui.diagnosis.finding import Finding, Severity
from ddptui.diagnosis.signatures import SIGNATURES_FILE, Match, fill, load_signatures

KB_DIR: Final = Path(__file__).with_name("kb")
SEVERITIES: Final = ("error", "warning", "info")
_REQUIRED: Final = ("id", "title", "severity", "cause", "fix")
_KEYS: Final = frozenset({*_REQUIRED, "topic", "exclude"})
_ID: Final = re.compile(r"^[A-Z0-9]+(?:-[A-Z0-9]+)*$")
# {name} placeholders, as in signatures.yaml; braces around anything else stay text.
PLACEHOLDER: Final = re.compile(r"\{(\w+)\}")
# kb_finding's own parameters that no template can use ({id}, {nodes}, {rank} and
# {where} may: they are filled from the finding's own id, nodes, rank and where).
RESERVED: Final = frozenset({"summary", "evidence", "severity", "lines", "facts"})


class KbError(ValueError):
    """A knowledge-base file is malformed; the message names the file, entry and problem."""


@dataclass(frozen=True)
class KbEntry:
    """The knowledge about one finding id."""

    id: str
    title: str
    severity: Severity
    cause: str
    fix: str
    source: str  # the file it came from ("checklist.yaml", "signatures.yaml")
    topic: str | None = None
    exclude: bool | None = None  # the report's exclude list: True always, False never

    @property
    def placeholders(self) -> frozenset[str]:
        """The {names} its cause and fix expect as facts."""
        return frozenset(PLACEHOLDER.findall(self.cause) + PLACEHOLDER.findall(self.fix))


def _text(where: str, entry: Mapping[str, Any], key: str) -> str:
    value = entry[key]
    if not isinstance(value, str) or not value.strip():
        raise KbError(f"{where}: {key} must be a non-empty string")
    if value.count("{") != value.count("}"):
        # "{name" or "name}": a placeholder that would be printed as text.
        raise KbError(f"{where}: {key} has unbalanced braces; write placeholders as {{name}}")
    reserved = sorted(set(PLACEHOLDER.findall(value)) & RESERVED)
    if reserved:
        raise KbError(
            f"{where}: {key} uses {{{reserved[0]}}}, a name kb_finding() keeps for itself; "
            "rename the placeholder"
        )
    return value


def _one(entry: object, index: int, source: str) -> KbEntry:
    if not isinstance(entry, dict):
        raise KbError(
            f"{source}: entry {index + 1}: expected a mapping, got {type(entry).__name__}"
        )
    where = f"{source}: {entry.get('id', f'entry {index + 1}')}"
    missing = [k for k in _REQUIRED if k not in entry]
    if missing:
        raise KbError(f"{where}: missing keys {', '.join(missing)}")
    unknown = sorted(str(k) for k in set(entry) - _KEYS)
    if unknown:
        raise KbError(
            f"{where}: unknown keys {', '.join(unknown)} (allowed: {', '.join(sorted(_KEYS))})"
        )
    fid = entry["id"]
    if not isinstance(fid, str) or not _ID.match(fid):
        raise KbError(f"{where}: id must be UPPER-KEBAB-CASE like 'NODE-LOST', got {fid!r}")
    if entry["severity"] not in SEVERITIES:
        raise KbError(
            f"{where}: severity {entry['severity']!r} is not one of {', '.join(SEVERITIES)}"
        )
    topic = entry.get("topic")
    if topic is not None and not isinstance(topic, str):
        raise KbError(f"{where}: topic must be a string")
    exclude = entry.get("exclude")
    if exclude is not None and not isinstance(exclude, bool):
        raise KbError(f"{where}: exclude must be true or false")
    return KbEntry(
        id=fid,
        title=_text(where, entry, "title"),
        severity=entry["severity"],
        cause=_text(where, entry, "cause"),
        fix=_text(where, entry, "fix"),
        source=source,
        topic=topic,
        exclude=exclude,
    )


def parse_kb(text: str, source: str) -> tuple[KbEntry, ...]:
    """Entries from one file's YAML text, validated (KbError names file and entry)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        doc = YAML(typ="safe").load(text)
    except YAMLError as exc:
        raise KbError(f"{source}: not valid YAML: {exc}") from exc
    entries = doc.get("findings") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise KbError(f"{source}: expected a top-level 'findings:' list")
    if isinstance(doc, dict) and set(doc) - {"findings"}:
        extra = ", ".join(sorted(str(k) for k in set(doc) - {"findings"}))
        raise KbError(f"{source}: unknown top-level keys {extra} (only 'findings:')")
    out = tuple(_one(e, i, source) for i, e in enumerate(entries))
    seen: set[str] = set()
    for e in out:
        if e.id in seen:
            raise KbError(f"{source}: {e.id}: duplicate id in this file")
        seen.add(e.id)
    return out


def merge(groups: Iterable[tuple[KbEntry, ...]]) -> dict[str, KbEntry]:
    """One table from several files; an id in two files is an error naming both."""
    table: dict[str, KbEntry] = {}
    for group in groups:
        for e in group:
            if e.id in table:
                raise KbError(
                    f"{e.source}: {e.id}: already defined in {table[e.id].source}; "
                    "an id has exactly one entry"
                )
            table[e.id] = e
    return table


def _signature_entries() -> tuple[KbEntry, ...]:
    return tuple(
        KbEntry(s.id, s.title, s.severity, s.cause, s.fix, SIGNATURES_FILE.name)  # type: ignore[arg-type]
        for s in load_signatures()
    )


def read_kb_files(directory: Path = KB_DIR) -> list[tuple[KbEntry, ...]]:
    out = []
    for path in sorted(directory.glob("*.yaml")):
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise KbError(f"{path.name}: cannot read: {exc}") from exc
        out.append(parse_kb(text, path.name))
    return out


@functools.lru_cache(maxsize=1)
def _kb_files() -> dict[str, KbEntry]:
    """The entries of kb/*.yaml, parsed and checked once per process."""
    return merge(read_kb_files())


@functools.lru_cache(maxsize=1)
def load_kb() -> dict[str, KbEntry]:
    """Every entry of kb/*.yaml and signatures.yaml, parsed and checked once per process
    (the kb files' table is kb_entry's too: read once whichever asks first)."""
    return merge([tuple(_kb_files().values()), _signature_entries()])


def kb_entry(id: str) -> KbEntry:
    """The entry for `id`; KbError when the knowledge base has none. The kb/*.yaml files
    answer first: `ddptui lint` needs only theirs, and parsing signatures.yaml too cost it
    a third of a second; an id both define is refused by load_kb (and its test)."""
    found = _kb_files().get(id)
    if found is not None:
        return found
    try:
        return load_kb()[id]
    except KeyError:
        raise KbError(
            f"{id}: no knowledge-base entry; add one to src/ddptui/diagnosis/kb/*.yaml"
        ) from None


def kb_finding(
    id: str,
    nodes: Iterable[str],
    summary: str,
    evidence: Iterable[str] = (),
    *,
    severity: Severity | None = None,
    rank: int | None = None,
    where: str | None = None,
    lines: Iterable[str] = (),
    facts: Mapping[str, object] | None = None,
    **named: object,
) -> Finding:
    """A Finding for `id`: cause and fix from its entry with {placeholders} filled from
    `facts` and the keyword arguments, {id}, {nodes}, {rank} and {where} from those
    arguments (a missing one reads <name>),
    severity the entry's unless given."""
    entry = kb_entry(id)
    node_names = tuple(nodes)
    values = {k: str(v) for k, v in {**(facts or {}), **named}.items()}
    values |= {"id": id, "nodes": ", ".join(node_names)}
    if rank is not None:
        values["rank"] = str(rank)
    if where is not None:
        values["where"] = where
    return Finding(
        id,
        severity or entry.severity,
        node_names,
        summary,
        fill(entry.cause, values).strip(),  # an empty trailing {detail} leaves no space
        fill(entry.fix, values).strip(),
        tuple(evidence),
        rank,
        where,
        tuple(lines),
    )


def signature_finding(
    match: Match,
    nodes: Iterable[str],
    summary: str,
    evidence: Iterable[str] = (),
    *,
    severity: Severity | None = None,
    rank: int | None = None,
    where: str | None = None,
    lines: Iterable[str] = (),
) -> Finding:
    """A Finding for a log line a signature recognised: its id, cause and fix are the
    signature's (signatures.yaml), filled from the line's named groups; severity the
    signature's unless given (an unknown one reads info)."""
    sig = match.signature
    own: Severity = sig.severity if sig.severity in SEVERITIES else "info"  # type: ignore[assignment]
    return Finding(
        sig.id,
        severity or own,
        tuple(nodes),
        summary,
        match.cause_text(),
        match.fix_text(),
        tuple(evidence),
        rank,
        where,
        tuple(lines),
    )
