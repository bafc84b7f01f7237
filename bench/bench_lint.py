#!/usr/bin/env python3
"""Precision and recall of `ddptui lint` per pitfall over the fixture scripts
(tests/fixtures/lint: each declares its findings with `# expect: ID` on the line), and
the audit's CPU time per file (CPU, not wall: this machine is shared). A finding counts
as right only with the right id on the right line.

Usage:
    .venv/bin/python bench/bench_lint.py [--extra DIR ...] [--blind DIR ...]
                                         [--project-files N] [--repeat 5]
--extra DIR audits every .py file under DIR as well and counts the error findings on
them (for a folder of scripts known to be correct, e.g. public DDP examples: each error
there is a false alarm).
--blind DIR scores a batch of real projects kept out of this repository: DIR holds a
manifest.yaml (cases: id, repo, commit, evidence_url, entry, correct, pitfalls: [{id,
kind, file, line}]) and one folder per case id with the project's files. Each entry is
audited from its case folder, as a user types `ddptui lint ENTRY`. A pitfall is found
when a finding has its id in its file, at line when also within +-1 line (a multi-line
statement) of the finding's line or of one of its second places in that file (`also`:
`called from`, `rank-only branch at`...); `NEW` pitfalls (kinds no rule had when the batch was collected) count as
missed unless `--new-ok ID,...` names ids added for them since. Reported: recall,
at-line rate (and the same counted on each finding's own line alone, as a scorer that
reads only `line` would), error findings and infos per correct case.
--project-files N times the audit of a generated project of N modules that the entry
imports in a chain (the whole-project bound: under 10 s for 200). Prints Markdown.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_lint import SCRIPTS, expected  # noqa: E402

from ddptui.diagnosis.kb import kb_entry  # noqa: E402
from ddptui.lint import RULE_IDS, lint_paths, lint_source  # noqa: E402
from ddptui.lint.engine import read_source  # noqa: E402
from ddptui.lint.project import MAX_MODULES  # noqa: E402


def score(repeat: int) -> tuple[Counter[str], Counter[str], Counter[str], list[float]]:
    kb_entry("DDP-SEED")  # load the knowledge base once, outside the timings
    tp: Counter[str] = Counter()
    fp: Counter[str] = Counter()
    fn: Counter[str] = Counter()
    times: list[float] = []
    for path in SCRIPTS:
        text = path.read_text(encoding="utf-8")
        runs = []
        for _ in range(repeat):
            t0 = time.process_time()
            found = {(f.id, f.line) for f in lint_source(text, path.name)}
            runs.append(time.process_time() - t0)
        times.append(min(runs))
        want = expected(path)
        for fid, _ in found & want:
            tp[fid] += 1
        for fid, _ in found - want:
            fp[fid] += 1
        for fid, _ in want - found:
            fn[fid] += 1
    return tp, fp, fn, times


def pct(num: int, den: int) -> str:
    return f"{100 * num / den:.0f}%" if den else "n/a"


def blind(batch: Path, new_ok: frozenset[str] = frozenset()) -> None:
    """Score one blind batch (see the module docstring)."""
    man: dict[str, Any] = YAML(typ="safe").load(
        (batch / "manifest.yaml").read_text(encoding="utf-8")
    )
    total = found = at_line = at_own = correct = corr_errors = corr_infos = 0
    per: Counter[str] = Counter()
    per_found: Counter[str] = Counter()
    misses: list[str] = []
    off: list[str] = []
    cpu = 0.0
    here = Path.cwd()
    for case in man["cases"]:
        os.chdir(batch / case["id"])
        try:
            t0 = time.process_time()
            result = lint_paths([case["entry"]])
            cpu += time.process_time() - t0
        finally:
            os.chdir(here)
        if case.get("correct"):
            correct += 1
            corr_errors += len(result.errors)
            corr_infos += sum(1 for f in result.findings if f.severity == "info")
            continue
        for p in case["pitfalls"]:
            total += 1
            per[p["id"]] += 1
            ids = new_ok if p["id"] == "NEW" else {p["id"]}
            hits = [
                f
                for f in result.findings
                if f.id in ids and Path(f.file).as_posix().endswith(p["file"])
            ]
            found += bool(hits)
            per_found[p["id"]] += bool(hits)
            placed = any(  # at its own line or one of its second places (`also`)
                abs(line - int(p["line"])) <= 1
                for f in hits
                for file, line in f.lines()
                if Path(file).as_posix().endswith(p["file"])
            )
            at_line += placed
            at_own += any(abs(f.line - int(p["line"])) <= 1 for f in hits)
            if hits and not placed:
                lines = ",".join(str(f.line) for f in hits)
                off.append(f"{case['id']}: {p['id']} {p['file']}:{p['line']} (said at {lines})")
            if not hits:
                misses.append(f"{case['id']}: {p['id']} {p['file']}:{p['line']}")
    print(
        f"\nblind batch {batch.name}: {len(man['cases'])} cases, {total} pitfalls: found "
        f"{found} ({pct(found, total)}), at the line {at_line} ({pct(at_line, total)}; "
        f"{at_own} by the finding's own line alone); "
        f"{correct} correct cases: {corr_errors} error findings, "
        f"{corr_infos / max(correct, 1):.1f} infos per case; {cpu:.1f} s CPU"
    )
    print("  per id found/total: " + ", ".join(f"{k} {per_found[k]}/{v}" for k, v in per.items()))
    for m in misses:
        print(f"  missed {m}")
    for m in off:
        print(f"  not at the line {m}")


def project_time(n: int) -> None:
    """CPU time of one entry that imports a chain of `n` generated modules."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "pkg").mkdir()
        (root / "pkg" / "__init__.py").write_text("")
        body = (ROOT / "tests" / "fixtures" / "lint" / "ok_trainer_class.py").read_text()
        for i in range(n):
            nxt = f"from pkg.m{i + 1} import helper{i + 1}\n" if i + 1 < n else ""
            (root / "pkg" / f"m{i}.py").write_text(
                nxt + body + f"\n\ndef helper{i}(x):\n    return x\n"
            )
        (root / "train.py").write_text("from pkg.m0 import helper0\n" + body)
        t0 = time.process_time()
        result = lint_paths([root / "train.py"], root=root)
        elapsed = time.process_time() - t0
        lines = sum(len(p.read_text().splitlines()) for p in root.rglob("*.py"))
    print(
        f"\ngenerated project: {n} modules imported in a chain ({lines} lines); "
        f"{len(result.followed)} followed and audited (cap {MAX_MODULES}) in {elapsed:.2f} s CPU"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--extra", action="append", default=[], metavar="DIR")
    ap.add_argument("--blind", action="append", default=[], metavar="DIR")
    ap.add_argument("--new-ok", default="", metavar="ID,...")
    ap.add_argument("--project-files", type=int, default=0, metavar="N")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    tp, fp, fn, times = score(args.repeat)
    print(
        f"{len(SCRIPTS)} fixture scripts, {sum(tp.values()) + sum(fn.values())} planted "
        "findings (id and line must both match)\n"
    )
    print("| pitfall | planted | found right | false | precision | recall |")
    print("|---|---:|---:|---:|---:|---:|")
    for rid in RULE_IDS:
        planted = tp[rid] + fn[rid]
        print(
            f"| {rid} | {planted} | {tp[rid]} | {fp[rid]} | "
            f"{pct(tp[rid], tp[rid] + fp[rid])} | {pct(tp[rid], planted)} |"
        )
    all_tp, all_fp, all_fn = sum(tp.values()), sum(fp.values()), sum(fn.values())
    print(
        f"| **all** | {all_tp + all_fn} | {all_tp} | {all_fp} | "
        f"{pct(all_tp, all_tp + all_fp)} | {pct(all_tp, all_tp + all_fn)} |"
    )
    lines = [len(p.read_text(encoding="utf-8").splitlines()) for p in SCRIPTS]
    print(
        f"\nCPU time per file (best of {args.repeat}): median "
        f"{statistics.median(times) * 1000:.1f} ms, max {max(times) * 1000:.1f} ms "
        f"({statistics.median(lines):.0f} lines median, {max(lines)} max)"
    )

    for folder in args.extra:
        files = sorted(str(p) for p in Path(folder).rglob("*.py"))
        t0 = time.process_time()
        result = lint_paths(files)
        elapsed = time.process_time() - t0
        errors = result.errors
        by_sev = Counter(f.severity for f in result.findings)
        size = sum(
            len(read_source(f).splitlines())
            for f in files
            if not any(f in p for p in result.problems)
        )
        print(
            f"\n{folder}: {len(files)} files ({size} lines) in {elapsed:.2f} s CPU; "
            f"{len(result.problems)} unparsable; findings: "
            + ", ".join(f"{n} {s}" for s, n in sorted(by_sev.items()))
            + "; "
            + f"files with an error finding: {len({f.file for f in errors})}"
        )
        for f in errors:
            print(f"  {f.file}:{f.line}: {f.id}: {f.summary}")

    for batch in args.blind:
        blind(Path(batch).resolve(), frozenset(i for i in args.new_ok.split(",") if i))
    if args.project_files:
        project_time(args.project_files)


if __name__ == "__main__":
    main()
