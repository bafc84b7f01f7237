#!/usr/bin/env python3
"""Precision and recall of `ddptui lint` per pitfall over the fixture scripts
(tests/fixtures/lint: each declares its findings with `# expect: ID` on the line), and
the audit's CPU time per file (CPU, not wall: this machine is shared). A finding counts
as right only with the right id on the right line.

Usage:
    .venv/bin/python bench/bench_lint.py [--extra DIR ...] [--repeat 5]
--extra DIR audits every .py file under DIR as well and counts the error findings on
them (for a folder of scripts known to be correct, e.g. public DDP examples: each error
there is a false alarm). Prints Markdown.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_lint import SCRIPTS, expected  # noqa: E402

from ddptui.diagnosis.kb import kb_entry  # noqa: E402
from ddptui.lint import RULE_IDS, lint_paths, lint_source  # noqa: E402
from ddptui.lint.engine import read_source  # noqa: E402


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--extra", action="append", default=[], metavar="DIR")
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


if __name__ == "__main__":
    main()
