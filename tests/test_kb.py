"""The finding knowledge base: every id the code can emit has exactly one entry, every
fact a template names is filled by every call site, and a malformed file is a clear
error naming the file and the entry."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from ddptui.diagnosis.kb import (
    KB_DIR,
    KbEntry,
    KbError,
    kb_entry,
    kb_finding,
    load_kb,
    merge,
    parse_kb,
    read_kb_files,
)
from ddptui.diagnosis.signatures import load_signatures

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*(ROOT / "src" / "ddptui").rglob("*.py"), *(ROOT / "probes").glob("*.py")])
ID = re.compile(r"^[A-Z][A-Z0-9]*(?:-[A-Z0-9]+)+$")
# Call names that build a finding from a literal id (kb_finding and the env audit's
# wrapper, which passes its facts on); "finding" is the old text-in-Python builder.
BUILDERS = {"kb_finding", "_make"}
# Keywords of kb_finding that are not facts.
NOT_FACTS = {"severity", "lines", "evidence"}
FILLED_BY_CALL = {"id", "nodes"}  # filled from kb_finding's own arguments


@dataclass(frozen=True)
class Site:
    """One call in the source that emits a finding id."""

    path: str
    line: int
    func: str
    id: str | None  # the literal id; None for an f-string (see prefix)
    prefix: str  # an f-string's literal start, e.g. "PORT-PAIR-"
    keywords: frozenset[str]
    open_facts: bool  # **kwargs or facts=: the facts cannot be read statically

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.func}({self.id or self.prefix + '...'!r})"


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _sites() -> list[Site]:
    out = []
    for path in SOURCES:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        rel = str(path.relative_to(ROOT))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            func = _name(node.func)
            if func not in BUILDERS | {"finding"}:
                continue
            first = node.args[0]
            kws = frozenset(k.arg for k in node.keywords if k.arg is not None)
            open_facts = any(k.arg is None for k in node.keywords) or "facts" in kws
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                if ID.match(first.value):
                    out.append(Site(rel, node.lineno, func, first.value, "", kws, open_facts))
            elif isinstance(first, ast.JoinedStr):
                head = first.values[0] if first.values else None
                prefix = head.value if isinstance(head, ast.Constant) else ""
                if isinstance(prefix, str) and re.match(r"^[A-Z][A-Z0-9]*-", prefix):
                    out.append(Site(rel, node.lineno, func, None, prefix, kws, open_facts))
    return out


SITES = _sites()


def test_the_shipped_knowledge_base_loads() -> None:
    kb = load_kb()
    assert {"NODE-LOST", "AR-HANG", "ENV-NCCL-DIFF", "PORT-REFUSED"} <= set(kb)
    assert kb["PORT-REFUSED"].source == "signatures.yaml"
    assert kb["NODE-LOST"].source == "checklist.yaml"
    # An id lives in one place: a kb file and signatures.yaml never share one.
    in_files = {e.id for group in read_kb_files() for e in group}
    assert not in_files & {s.id for s in load_signatures()}


def test_scan_finds_the_call_sites() -> None:
    """The scan itself works: it sees known sites (else every check below is vacuous)."""
    ids = {s.id for s in SITES}
    assert {"NODE-LOST", "AR-HANG", "STEP-TIMEOUT", "ENV-NCCL-DIFF", "AR-BOOT-LOOPBACK"} <= ids


def test_no_finding_text_written_in_python() -> None:
    """finding("ID", ...) writes cause and fix in code; kb_finding("ID", ...) takes them
    from the knowledge base. Only kb.py may build a Finding by hand."""
    offenders = [str(s) for s in SITES if s.func == "finding"]
    assert not offenders, (
        "finding text written in Python; put it in src/ddptui/diagnosis/kb/*.yaml and call "
        f"kb_finding(): {offenders}"
    )


KB_MODULE = "src/ddptui/diagnosis/kb.py"


def finding_builds(path: str, text: str) -> list[str]:
    """Calls in text that build a Finding by hand (Finding(...), finding(...))."""
    return [
        f"{path}:{node.lineno}"
        for node in ast.walk(ast.parse(text, path))
        if isinstance(node, ast.Call) and _name(node.func) in ("Finding", "finding")
    ]


def test_findings_are_built_only_by_the_knowledge_base() -> None:
    """Every Finding comes from kb.py (kb_finding, signature_finding): a Finding(...) or
    finding(...) anywhere else in src writes or copies cause and fix around the KB."""
    planted = "from x import Finding\nf = Finding('A-B', 'error', (), 's', 'c', 'f')\n"
    assert finding_builds("planted.py", planted) == ["planted.py:2"]  # the scan sees one
    offenders = [
        hit
        for path in SOURCES
        if (rel := str(path.relative_to(ROOT))) != KB_MODULE
        for hit in finding_builds(rel, path.read_text(encoding="utf-8"))
    ]
    assert not offenders, f"build findings with kb_finding()/signature_finding(): {offenders}"


def test_every_emitted_id_has_an_entry() -> None:
    kb = load_kb()
    missing = [str(s) for s in SITES if s.id is not None and s.id not in kb]
    assert not missing, f"ids with no knowledge-base entry: {missing}"
    dangling = [
        str(s) for s in SITES if s.id is None and not any(i.startswith(s.prefix) for i in kb)
    ]
    assert not dangling, f"f-string ids whose prefix no entry has: {dangling}"


def _families() -> set[str]:
    return {i.split("-")[0] for i in load_kb()}


def test_every_id_constant_in_the_code_has_an_entry() -> None:
    """Ids kept in tables (ssh's CATALOG, inventory's SKEW_RULES) reach kb_finding as
    variables: every string constant shaped like an id of a known family must be known."""
    kb, families = load_kb(), _families()
    unknown = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                v = node.value
                if ID.match(v) and v.split("-")[0] in families and v not in kb:
                    unknown.append(f"{path.relative_to(ROOT)}:{node.lineno}: {v}")
    assert not unknown, f"id-shaped constants with no entry: {unknown}"


def test_every_call_site_fills_every_placeholder() -> None:
    kb = load_kb()
    gaps = []
    for s in SITES:
        if s.id is None or s.open_facts or s.func == "finding" or s.id not in kb:
            continue
        needed = kb[s.id].placeholders - FILLED_BY_CALL
        missing = needed - (s.keywords - NOT_FACTS)
        if missing:
            gaps.append(f"{s}: does not fill {sorted(missing)}")
    assert not gaps, gaps


def test_checklist_entries_are_all_used() -> None:
    """No dead knowledge in the checklist's file: each entry is emitted somewhere."""
    used = {s.id for s in SITES}
    text = "\n".join(p.read_text(encoding="utf-8") for p in SOURCES)
    (checklist,) = [g for g in read_kb_files() if g and g[0].source == "checklist.yaml"]
    dead = [e.id for e in checklist if e.id not in used and f'"{e.id}"' not in text]
    assert not dead, dead


# --------------------------------------------------------------------------- kb_finding


def test_kb_finding_fills_facts_and_takes_the_entry_severity() -> None:
    f = kb_finding("NODE-PROBE-FAILED", ["n1"], "n1: broke", ["line"], step="ping", problem="x")
    assert (f.id, f.severity, f.nodes, f.evidence) == (
        "NODE-PROBE-FAILED",
        "error",
        ("n1",),
        ("line",),
    )
    assert f.cause == "The ping probe failed on this node: x."
    assert "<node>" in f.fix  # a fact not given reads <name>, visibly


def test_kb_finding_severity_override_and_own_fields() -> None:
    f = kb_finding("AR-HANG", ["a", "b"], "s", severity="info", rank=3, where="t.py:1 in f")
    assert (f.severity, f.rank, f.where) == ("info", 3, "t.py:1 in f")


def test_kb_finding_fills_facts_from_a_mapping_and_signature_groups() -> None:
    f = kb_finding("PORT-REFUSED", ["n0"], "s", facts={"host": "node0", "port": 29500})
    assert "nc -zv -w3 node0 29500" in f.fix and f.cause == kb_entry("PORT-REFUSED").cause


def test_unknown_id_is_a_clear_error() -> None:
    with pytest.raises(KbError, match=r"NO-SUCH-ID: no knowledge-base entry.*kb/\*\.yaml"):
        kb_finding("NO-SUCH-ID", [], "s")


# --------------------------------------------------------------------------- malformed files


GOOD = """\
findings:
- id: X-ONE
  title: 'One'
  severity: error
  cause: 'Because {why}.'
  fix: 'Do {what}.'
"""


def test_a_good_file_parses() -> None:
    (e,) = parse_kb(GOOD, "x.yaml")
    assert e == KbEntry("X-ONE", "One", "error", "Because {why}.", "Do {what}.", "x.yaml")
    assert e.placeholders == {"why", "what"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("findings: [", r"^bad\.yaml: not valid YAML"),
        ("signatures: []", r"^bad\.yaml: expected a top-level 'findings:' list"),
        ("findings: []\nextra: 1", r"^bad\.yaml: unknown top-level keys extra"),
        ("findings:\n- just text", r"^bad\.yaml: entry 1: expected a mapping, got str"),
        (GOOD.replace("  fix: 'Do {what}.'\n", ""), r"^bad\.yaml: X-ONE: missing keys fix"),
        (GOOD + "  hint: 'x'\n", r"^bad\.yaml: X-ONE: unknown keys hint \(allowed: "),
        (GOOD.replace("error", "fatal"), r"^bad\.yaml: X-ONE: severity 'fatal' is not one of"),
        (GOOD.replace("X-ONE", "x_one"), r"^bad\.yaml: x_one: id must be UPPER-KEBAB-CASE"),
        (GOOD.replace("{why}", "{why"), r"^bad\.yaml: X-ONE: cause has unbalanced braces"),
        (GOOD.replace("{what}", "{severity}"), r"^bad\.yaml: X-ONE: fix uses \{severity\}"),
        (GOOD.replace("'One'", "''"), r"^bad\.yaml: X-ONE: title must be a non-empty string"),
        (GOOD + GOOD.replace("findings:\n", ""), r"^bad\.yaml: X-ONE: duplicate id in this file"),
    ],
)
def test_a_malformed_file_names_file_entry_and_problem(text: str, message: str) -> None:
    with pytest.raises(KbError, match=message):
        parse_kb(text, "bad.yaml")


def test_an_id_in_two_files_names_both() -> None:
    a, b = parse_kb(GOOD, "a.yaml"), parse_kb(GOOD, "b.yaml")
    with pytest.raises(KbError, match=r"^b\.yaml: X-ONE: already defined in a\.yaml"):
        merge([a, b])


def test_an_id_in_a_kb_file_and_in_signatures_is_refused(tmp_path: Path) -> None:
    (tmp_path / "dup.yaml").write_text(GOOD.replace("X-ONE", "PORT-REFUSED"), encoding="utf-8")
    sig = tuple(e for e in load_kb().values() if e.source == "signatures.yaml")
    with pytest.raises(KbError, match=r"PORT-REFUSED: already defined in dup\.yaml"):
        merge([*read_kb_files(tmp_path), sig])


def test_every_shipped_file_has_the_findings_list() -> None:
    files = sorted(KB_DIR.glob("*.yaml"))
    assert any(p.name == "checklist.yaml" for p in files)
    for p in files:
        assert parse_kb(p.read_text(encoding="utf-8"), p.name), p.name
