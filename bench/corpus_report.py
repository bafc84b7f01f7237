#!/usr/bin/env python3
"""Right-cause rate of ddptui's log diagnosis on real users' logs: every excerpt in
tests/fixtures/corpus/ (failure logs pasted in public issue threads, each with the cause
the thread established) is diagnosed, and the first cause is compared with that cause.

Usage:
    .venv/bin/python bench/corpus_report.py            # Markdown table (for the README)
    .venv/bin/python bench/corpus_report.py --misses   # also list every miss
    # the knowledge base as it was at a git revision (signature root cause, no log
    # pipeline), on the whole corpus or only on the excerpts added after that revision:
    .venv/bin/python bench/corpus_report.py --kb-at efac99d
    .venv/bin/python bench/corpus_report.py --kb-at a6a373a --only-added-after
    # one corpus file only, e.g. the round-2 excerpts scored with the KB before round 2:
    .venv/bin/python bench/corpus_report.py --kb-at 5860623 --only round2.yaml
    # every file marked "# held-out against: REV": its rate with REV's KB, then with today's
    .venv/bin/python bench/corpus_report.py --heldout
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "corpus"))

from score import CORPUS_DIR, Excerpt, load_corpus, markdown, score  # noqa: E402


def _git_show(rev: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def diagnose_with_kb_at(rev: str) -> Callable[[Iterable[str]], str | None]:
    """First cause by the signature KB file as it was at `rev` (classify_lines and
    root_cause of today's code over that revision's signatures.yaml)."""
    from ddptui.diagnosis import signatures as sigmod

    sigs = sigmod.parse_signatures(_git_show(rev, "src/ddptui/diagnosis/signatures.yaml"))

    def first(lines: Iterable[str]) -> str | None:
        matches = sigmod.classify_lines(
            ((float(i), "corpus", line) for i, line in enumerate(lines)), sigs
        )
        root = sigmod.root_cause(matches)
        return None if root is None else root[2].signature.id

    return first


def corpus_at(rev: str) -> set[str]:
    """Excerpt ids the corpus had at `rev`."""
    listing = subprocess.run(
        ["git", "-C", str(ROOT), "ls-tree", "--name-only", rev, "tests/fixtures/corpus/"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    with tempfile.TemporaryDirectory() as tmp:
        for path in listing:
            if path.endswith(".yaml"):
                Path(tmp, Path(path).name).write_text(_git_show(rev, path), encoding="utf-8")
        return {e.id for e in load_corpus(Path(tmp))}


HELDOUT_MARK = re.compile(r"^# held-out against: (\w+)", re.MULTILINE)


def heldout_report(excerpts: list[Excerpt]) -> str:
    """One line per corpus file marked '# held-out against: REV': how many of its excerpts
    the knowledge base at REV (before anyone looked at them) named right, and today's."""
    out = []
    for path in sorted(CORPUS_DIR.glob("*.yaml")):
        m = HELDOUT_MARK.search(path.read_text(encoding="utf-8")[:2000])
        if m is None:
            continue
        rev = m.group(1)
        mine = [e for e in excerpts if e.source == path.name]
        before = sum(v.outcome == "right" for v in score(mine, diagnose_with_kb_at(rev)))
        now = sum(v.outcome == "right" for v in score(mine))
        n = len(mine)
        out.append(
            f"held-out {path.stem}: {before}/{n} right before tuning (KB at {rev}), "
            f"{now}/{n} with today's KB"
        )
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--misses", action="store_true", help="list wrong and missing causes")
    parser.add_argument("--kb-at", metavar="REV", help="use signatures.yaml as of git REV")
    parser.add_argument(
        "--only-added-after",
        action="store_true",
        help="with --kb-at: only the excerpts added to the corpus after REV",
    )
    parser.add_argument(
        "--only",
        metavar="FILE",
        action="append",
        help="only the excerpts of this corpus file (e.g. round2.yaml); repeatable",
    )
    parser.add_argument(
        "--heldout",
        action="store_true",
        help="the held-out figures of the files marked '# held-out against: REV'",
    )
    args = parser.parse_args()
    excerpts: list[Excerpt] = load_corpus()
    if args.heldout:
        print(heldout_report(excerpts))
        return 0
    if args.only:
        excerpts = [e for e in excerpts if e.source in args.only]
        if not excerpts:
            parser.error(f"no excerpts in {', '.join(args.only)}")
    diagnose = None
    if args.kb_at:
        diagnose = diagnose_with_kb_at(args.kb_at)
        if args.only_added_after:
            old = corpus_at(args.kb_at)
            excerpts = [e for e in excerpts if e.id not in old]
    verdicts = score(excerpts, diagnose)
    print(markdown(verdicts))
    if args.misses:
        print()
        for v in verdicts:
            if v.outcome != "right":
                e = v.excerpt
                print(f"{v.outcome:5} {e.id:34} got {v.got!s:24} want {'|'.join(e.expected)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
