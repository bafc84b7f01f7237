"""Reading scripts, running every rule, and turning what the rules saw into findings
whose title, cause and fix come from the knowledge base (kb/lint.yaml)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Final

from ddptui.diagnosis.kb import kb_entry, kb_finding
from ddptui.lint import (
    lint16,
    lint18,
    lint20,
    lint20_ckpt,
    lint23,
    lint26,
    lint26_diverge,
    lint26_wrapper,
    lint28,
    lint29,
    lint30,
    lint31,
    lint32,
    lint32_ckpt,
    lint33,
    lint37,
    lint39,
    lint40,
    lint40_io,
    lint47,
    lint48,
    lint50,
    rank_bound,
    rank_none,
    rules_accum,
    rules_amp,
    rules_branch_lint6,
    rules_closure,
    rules_data,
    rules_device_ctx,
    rules_eval_metric,
    rules_flag,
    rules_frameworks,
    rules_io,
    rules_lint6,
    rules_lint7,
    rules_lint10,
    rules_lint12,
    rules_lint13,
    rules_lint19,
    rules_loader_lint6,
    rules_loss_reduce,
    rules_model,
    rules_nosync,
    rules_notapplied,
    rules_poll,
    rules_project,
    rules_rank_attr,
    rules_reach,
    rules_save_wrapper,
    rules_seed,
    rules_set_device,
    rules_setup,
    rules_solo_pass,
    rules_stripped_load,
    rules_sync,
    rules_uneven,
    rules_unwrapped_train,
)
from ddptui.lint.families import forwarding_wrappers_only
from ddptui.lint.flow import Flow
from ddptui.lint.frameworks import framework_called, quiet_alternative
from ddptui.lint.lint13 import demoted
from ddptui.lint.lint26_anchor import built_here
from ddptui.lint.lint36 import dropped36
from ddptui.lint.model import (
    SEVERITY_ORDER,
    Hit,
    LintFinding,
    LintInputError,
    LintResult,
    Place,
)
from ddptui.lint.placement import places
from ddptui.lint.project import Module, Project, find_root, key, parse, read_source
from ddptui.lint.script import Script

__all__ = ["RULE_IDS", "lint_paths", "lint_project", "lint_source", "parse", "read_source"]

Rule = Callable[[Script, Flow], Iterable[Hit]]
RULES: Final[tuple[Rule, ...]] = (
    *rules_model.RULES,
    *rules_amp.RULES,
    *rules_data.RULES,
    *rules_uneven.RULES,
    *rules_sync.RULES,
    *rules_nosync.RULES,
    *rules_save_wrapper.RULES,
    *rules_io.RULES,
    *rules_project.RULES,
    *rules_reach.RULES,
    *rules_accum.RULES,
    *rules_setup.RULES,
    *rules_seed.RULES,
    *rules_flag.RULES,
    *rules_frameworks.RULES,
    *rules_set_device.RULES,
    *rules_lint6.RULES,
    *rules_loader_lint6.RULES,
    *rules_branch_lint6.RULES,
    *rules_lint7.RULES,
    *lint16.RULES,
    *lint18.RULES,
    *lint20.RULES,
    *lint20_ckpt.RULES,
    *lint23.RULES,
    *lint26.RULES,
    *lint26_diverge.RULES,
    *lint26_wrapper.RULES,
    *lint28.RULES,
    *lint29.RULES,
    *lint30.RULES,
    *lint31.RULES,
    *lint32.RULES,
    *lint32_ckpt.RULES,
    *lint33.RULES,
    *lint37.RULES,
    *lint39.RULES,
    *lint40.RULES,
    *lint40_io.RULES,
    *lint47.RULES,
    *lint48.RULES,
    *lint50.RULES,
    *rules_lint10.RULES,
    *rules_lint12.RULES,
    *rules_lint13.RULES,
    *rules_notapplied.RULES,
    *rules_poll.RULES,
    *rules_lint19.RULES,
    *rules_loss_reduce.RULES,
    *rules_closure.RULES,
    *rules_device_ctx.RULES,
    *rules_rank_attr.RULES,
    *rank_bound.RULES,
    *rank_none.RULES,
    *rules_unwrapped_train.RULES,
    *rules_eval_metric.RULES,
    *rules_solo_pass.RULES,
    *rules_stripped_load.RULES,
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
    "DDP-WRAPPER-ATTR",
    "DDP-INIT-BEFORE-SET-DEVICE",
    "DDP-WORLD-FROM-DEVICE-COUNT",
    "DDP-SAMPLER-SEED",
    "DDP-SYNCBN-AFTER-OPTIMIZER",
    "DDP-FORWARD-BYPASS",
    "DDP-NOT-APPLIED",
    "DDP-LOAD-MAP-LOCATION",
    "DDP-LOSS-ALL-REDUCED",
    "DDP-LOAD-INTO-WRAPPER",
    "DDP-SPAWN-ARGS",
    "DDP-RANK-ONLY-NAME",
    "DDP-EVAL-LOCAL-METRIC",
    "DDP-SOLO-PASS-TIMEOUT",
)
# `# ddptui: ignore` or `# ddptui: ignore[DDP-SEED, DDP-SAMPLER]` on the finding's line.
_IGNORE: Final = re.compile(r"#\s*ddptui:\s*ignore(?:\[([A-Z0-9, -]+)\])?")


def _hits(script: Script, notes: list[str]) -> Iterator[Hit]:
    """Every rule's hits. A rule that recurses past Python's limit on a project whose calls
    chain hundreds of functions deep loses its own hits only: the others still run, and the
    user gets a note instead of a traceback (issue 19's bad input)."""
    flow = Flow(script)
    for rule in RULES:
        try:
            hits = list(rule(script, flow))
        except RecursionError:
            _note(notes, _too_deep(script, rule.__name__))
            continue
        yield from hits


def _note(notes: list[str], note: str) -> None:
    if note not in notes:
        notes.append(note)


def _too_deep(script: Script, what: str) -> str:
    return (
        f"{script.entry.path}: one check ({what}) skipped: the project's functions call "
        "each other too deep to follow (hundreds of hops); what it finds is not given"
    )


def lint_source(text: str, path: str = "<script>") -> list[LintFinding]:
    """Findings for one script's source text alone (imports not followed), most severe
    first, then by line."""
    project = Project(Path(path).parent, "the script's folder")
    script = Script.build(project, project.index(path, parse(text, path), text), [])
    return _findings(script, [])


def _findings(script: Script, notes: list[str]) -> list[LintFinding]:
    lines = {m.tree: m.lines for m in script.modules}
    out: dict[tuple[str, str, int], LintFinding] = {}
    for hit in _hits(script, notes):
        mod = script.module_of(hit.node) if hit.node is not None else script.entry
        if (hit.id, mod.path, hit.line) in out or _ignored(lines.get(mod.tree, []), hit):
            continue
        try:
            found = _finding(script, hit, mod.path)
        except RecursionError:
            _note(notes, _too_deep(script, hit.id))
            continue
        if found is not None:
            out[(hit.id, mod.path, hit.line)] = found
    entry = script.path
    return sorted(
        out.values(),
        key=lambda x: (SEVERITY_ORDER[x.severity], x.file != entry, x.file, x.line, x.id),
    )


def _finding(script: Script, hit: Hit, path: str) -> LintFinding | None:
    """The finding a rule's hit becomes, or None where a later reading drops it."""
    if dropped36(script, hit):
        return None  # a reading real projects show to be false (lint36)
    if hit.id == "DDP-WRAPPER-ATTR" and forwarding_wrappers_only(script):
        return None  # the project's DDP subclass forwards attributes to the model
    built = (
        hit.id == "DDP-ALL-RANKS-IO" and hit.node is not None and built_here(script, hit.node)
    )
    if hit.node is not None and quiet_alternative(script, hit.node) and not built:
        return None  # a registered alternative that never runs distributed
    if (
        hit.id == "DDP-ALL-RANKS-IO"
        and hit.node
        and framework_called(script, hit.node)
        and not built
    ):
        return None  # a registered dataset's or model's method: the framework picks ranks
    severity, summary = demoted(script, hit)
    f = kb_finding(
        hit.id,
        (),
        summary,
        severity=severity,
        where=f"{path}:{hit.line}",
        facts={"line": hit.line, **hit.facts},
    )
    also = tuple(
        Place(script.module_of(n).path, line, label) for n, line, label in places(script, hit)
    )
    return LintFinding(
        f.id,
        f.severity,
        path,
        hit.line,
        kb_entry(hit.id).title,
        f.summary,
        f.cause,
        f.fix,
        also,
    )


def _ignored(lines: list[str], hit: Hit) -> bool:
    if not 0 < hit.line <= len(lines):
        return False
    m = _IGNORE.search(lines[hit.line - 1])
    if not m:
        return False
    return m.group(1) is None or hit.id in {x.strip() for x in m.group(1).split(",")}


def lint_project(entry: str, project: Project) -> tuple[list[LintFinding], list[Module], list[str]]:
    """Findings for one entry script and the project modules it imports (their files
    named per finding); the followed modules; notes (a module capped or skipped).
    LintInputError when the entry itself cannot be read or parsed."""
    mod, skipped = project.entry(entry)
    followed, capped = project.closure(mod)
    notes = []
    if skipped:
        notes.append(
            f"{entry}: {skipped} IPython line(s) (`!cmd`, `%magic`) of a notebook export skipped"
        )
    if capped:
        notes.append(
            f"{entry}: imports more than {len(followed)} project modules; the first "
            f"{len(followed)} were followed, the rest are not audited"
        )
    return _findings(Script.build(project, mod, followed), notes), followed, notes


def lint_paths(paths: Iterable[str | Path], root: str | Path | None = None) -> LintResult:
    """Audit these entry scripts (a directory: the .py files under it) with the project
    modules they import, under `root` (default: each script's nearest folder with .git,
    pyproject.toml or setup.py, else its own folder). Entry files that cannot be read or parsed are
    listed in `problems`; the others are still audited. Followed modules that cannot
    be parsed are notes."""
    files: list[str] = []
    for raw in paths:
        p = Path(raw)
        targets = sorted(str(x) for x in p.rglob("*.py")) if p.is_dir() else [str(raw)]
        files += targets if targets or not p.is_dir() else [str(raw)]
    projects: dict[Path, Project] = {}

    def project_of(entry: str) -> Project:
        base, why = (Path(root), "--root") if root is not None else find_root(Path(entry))
        if base.resolve() not in projects:
            projects[base.resolve()] = Project(base, why)
        return projects[base.resolve()]

    findings: dict[tuple[str, str, int], LintFinding] = {}
    problems: list[str] = []
    notes: list[str] = []
    followed: dict[str, str] = {}
    entries = {key(f) for f in files if Path(f).is_file()}
    for path in files:
        if Path(path).is_dir():
            problems.append(f"{path}: a directory with no .py file in it")
            continue
        try:
            project = project_of(path)
            found, mods, more = lint_project(path, project)
        except LintInputError as exc:
            problems.append(str(exc))
            continue
        notes += more
        for f in found:
            findings.setdefault((f.id, key(f.file), f.line), f)
        for m in mods:
            if key(m.path) not in entries:
                followed.setdefault(key(m.path), m.path)
    notes += [n for p in projects.values() for k, n in p.notes.items() if k not in entries]
    first = next(iter(projects.values()), None)
    return LintResult(
        tuple(files),
        tuple(findings.values()),
        tuple(problems),
        str(first.root) if first else None,
        first.root_why if first else "",
        tuple(followed.values()),
        tuple(notes),
    )
