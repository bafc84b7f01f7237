#!/usr/bin/env python3
"""Right-cause rate of ddptui's log diagnosis on real users' logs: every excerpt in
tests/fixtures/corpus/ (failure logs pasted in public issue threads, each with the cause
the thread established) is diagnosed, and the first cause is compared with that cause.

Usage:
    .venv/bin/python bench/corpus_report.py            # Markdown table (for the README)
    .venv/bin/python bench/corpus_report.py --misses   # also list every miss
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "corpus"))

from score import load_corpus, markdown, score  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--misses", action="store_true", help="list wrong and missing causes")
    args = parser.parse_args()
    verdicts = score(load_corpus())
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
