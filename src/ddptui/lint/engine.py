"""Reading scripts, running every rule, and turning what the rules saw into findings
whose title, cause and fix come from the knowledge base (kb/lint.yaml)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Final

from ddptui.diagnosis.kb import kb_entry, kb_finding
from ddptui.lint import rules_data, rules_io, rules_model, rules_sync
from ddptui.lint.flow import Flow
from ddptui.lint.model import SEVERITY_ORDER, Hit, LintFinding, LintInputError, LintResult
from ddptui.lint.script import Script

Rule = Callable[[Script, Flow], Iterable[Hit]]
RULES: Final[tuple[Rule, ...]] = (
    *rules_model.RULES,
    *rules_data.RULES,
    *rules_sync.RULES,
    *rules_io.RULES,
)
# Every id a rule can emit (a test checks each has exactly one knowledge-base entry).
RULE_IDS: Final = (
    "DDP-DATAPARALLEL",
    "DDP-WRAP-BEFORE-TO",
    "DDP-SAMPLER",
    "DDP-SET-EPOCH",
    "DDP-BATCHNORM",
    "DDP-LOSS-DEVICE",
    "DDP-HARDCODED-DEVICE",
    "DDP-SEED",
    "DDP-NO-SYNC",
    "DDP-FIND-UNUSED",
    "DDP-NCCL-TUNING",
    "DDP-SAVE-WRAPPER",
    "DDP-CKPT-BARRIER",
    "DDP-ALL-RANKS-IO",
    "DDP-RANK-SEED",
    "DDP-SHUFFLE-SAMPLER",
    "DDP-MIXED-COLLECTIVES",
    "DDP-UNEVEN-BATCH",
    "DDP-RANK-DIVERGENCE",
    "DDP-AUTOCAST-SCALER",
    "DDP-SHARDED-WORLD",
)
MAX_BYTES: Final = 5_000_000
# `# ddptui: ignore` or `# ddptui: ignore[DDP-SEED, DDP-SAMPLER]` on the finding's line.
_IGNORE: Final = re.compile(r"#\s*ddptui:\s*ignore(?:\[([A-Z0-9, -]+)\])?")


def read_source(path: str) -> str:
    """The text of a Python file; LintInputError says why it cannot be audited."""
    p = Path(path)
    try:
        if p.is_dir():
            raise LintInputError(f"{path}: is a directory (give the .py files in it)")
        data = p.read_bytes()
    except OSError as exc:
        raise LintInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise LintInputError(
            f"{path}: {len(data)} bytes is too large for a training script "
            f"(limit {MAX_BYTES}); is this the right file?"
        )
    if b"\0" in data:
        raise LintInputError(f"{path}: a binary file, not Python source")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
        raise LintInputError(
            f"{path}: not UTF-8 text ({exc}); save it as UTF-8 or declare its coding"
        ) from None


def parse(text: str, path: str) -> ast.Module:
    try:
        with warnings.catch_warnings():  # "invalid escape sequence" is not ours to report
            warnings.simplefilter("ignore")
            return ast.parse(text, filename=path)
    except SyntaxError as exc:
        where = f"{path}:{exc.lineno or 1}:{(exc.offset or 0) or 1}"
        suffix = Path(path).suffix
        hint = (
            f"a {suffix} file is not a training script"
            if suffix and suffix not in (".py", ".pyw")
            else "check it with `python -m py_compile`"
        )
        raise LintInputError(
            f"{where}: not valid Python ({exc.msg}); `ddptui lint` audits Python training "
            f"scripts ({hint})"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise LintInputError(f"{path}: cannot be parsed as Python: {exc}") from None


def _hits(script: Script) -> Iterator[Hit]:
    flow = Flow(script)
    for rule in RULES:
        yield from rule(script, flow)


def lint_source(text: str, path: str = "<script>") -> list[LintFinding]:
    """Findings for one script's source text, most severe first, then by line."""
    script = Script.parse(path, parse(text, path))
    lines = text.splitlines()
    out: dict[tuple[str, int], LintFinding] = {}
    for hit in _hits(script):
        if (hit.id, hit.line) in out or _ignored(lines, hit):
            continue
        f = kb_finding(
            hit.id,
            (),
            hit.summary,
            severity=hit.severity,
            where=f"{path}:{hit.line}",
            facts={"line": hit.line, **hit.facts},
        )
        out[(hit.id, hit.line)] = LintFinding(
            f.id, f.severity, path, hit.line, kb_entry(hit.id).title, f.summary, f.cause, f.fix
        )
    return sorted(out.values(), key=lambda x: (SEVERITY_ORDER[x.severity], x.line, x.id))


def _ignored(lines: list[str], hit: Hit) -> bool:
    if not 0 < hit.line <= len(lines):
        return False
    m = _IGNORE.search(lines[hit.line - 1])
    if not m:
        return False
    return m.group(1) is None or hit.id in {x.strip() for x in m.group(1).split(",")}


def lint_paths(paths: Iterable[str | Path]) -> LintResult:
    """Audit these files (a directory: the .py files under it). Files that cannot be
    read or parsed are listed in `problems`; the others are still audited."""
    files: list[str] = []
    findings: list[LintFinding] = []
    problems: list[str] = []
    for raw in paths:
        p = Path(raw)
        targets = sorted(str(x) for x in p.rglob("*.py")) if p.is_dir() else [str(raw)]
        if p.is_dir() and not targets:
            problems.append(f"{raw}: a directory with no .py file in it")
        for path in targets:
            files.append(path)
            try:
                findings += lint_source(read_source(path), path)
            except LintInputError as exc:
                problems.append(str(exc))
    return LintResult(tuple(files), tuple(findings), tuple(problems))
