#!/usr/bin/env python3
"""Right-cause rate of ddptui's log diagnosis on real users' logs: every excerpt in
tests/fixtures/corpus/ (failure logs pasted in public issue threads, each with the cause
the thread established) is diagnosed, and the first cause is compared with that cause.

Usage:
    .venv/bin/python bench/corpus_report.py            # Markdown table (for the README)
    .venv/bin/python bench/corpus_report.py --misses   # also list every miss
    # the whole diagnosis (code and knowledge) as it was at a git revision, run from a
    # `git archive` of that revision's src/, on the whole corpus or only on the excerpts
    # added after that revision:
    .venv/bin/python bench/corpus_report.py --kb-at efac99d
    .venv/bin/python bench/corpus_report.py --kb-at a6a373a --only-added-after
    # one corpus file only, e.g. the round-2 excerpts scored with the KB before round 2:
    .venv/bin/python bench/corpus_report.py --kb-at 5860623 --only round2.yaml
    # every file marked "# held-out against: REV": its rate with REV's KB, then with today's
    .venv/bin/python bench/corpus_report.py --heldout
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "corpus"))

from score import CORPUS_DIR, Excerpt, Got, figures, load_corpus, markdown, score  # noqa: E402


def _git_show(rev: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


# Run inside a revision's src/: diagnose every excerpt read from stdin (JSON), print
# {id: [first cause id, any error finding]}.  Revisions before the log pipeline existed
# fall back to the signature knowledge base's root cause.
_CHILD = """
import json, sys
todo = json.load(sys.stdin)
out = {}
try:
    from ddptui.logs.diagnose import diagnose_lines
except ImportError:
    diagnose_lines = None
    from ddptui.diagnosis.signatures import classify_lines, root_cause
for eid, lines in todo.items():
    if diagnose_lines is not None:
        d = diagnose_lines(lines, source="corpus")
        first = None if d.first is None else d.first.id
        out[eid] = [first, any(f.severity == "error" for f in d.findings)]
    else:
        root = root_cause(classify_lines((float(i), "corpus", x) for i, x in enumerate(lines)))
        first = None if root is None else root[2].signature.id
        out[eid] = [first, first is not None]
print(json.dumps(out))
"""


def diagnose_with_kb_at(rev: str, excerpts: list[Excerpt]) -> Callable[[Iterable[str]], Got]:
    """The diagnosis of git revision `rev` (its code and its knowledge base), run once on
    every excerpt in a child process over `git archive REV src/`."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev, "src/"],
        capture_output=True,
        check=True,
    ).stdout
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        env = {**os.environ, "PYTHONPATH": str(Path(tmp, "src"))}
        todo = {e.id: list(e.lines) for e in excerpts}
        done = subprocess.run(
            [sys.executable, "-c", _CHILD],
            input=json.dumps(todo),
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp,
            check=True,
        ).stdout
    said = {k: Got(v[0], bool(v[1])) for k, v in json.loads(done).items()}
    by_lines = {tuple(e.lines): said[e.id] for e in excerpts}
    return lambda lines: by_lines[tuple(lines)]


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
        before = figures(score(mine, diagnose_with_kb_at(rev, mine)))
        now = figures(score(mine))

        def said(f: dict[str, float | int]) -> str:
            text = f"{f['right']}/{f['failing']} right, {f['called-clean']} called clean"
            if f["healthy"]:
                text += f", {f['false-alarm']}/{f['healthy']} healthy with an error"
            return text

        out.append(
            f"held-out {path.stem}: {said(before)} before tuning (code and KB at {rev}); "
            f"{said(now)} today"
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
        if args.only_added_after:
            old = corpus_at(args.kb_at)
            excerpts = [e for e in excerpts if e.id not in old]
        diagnose = diagnose_with_kb_at(args.kb_at, excerpts)
    verdicts = score(excerpts, diagnose)
    print(markdown(verdicts))
    if args.misses:
        print()
        for v in verdicts:
            if v.outcome not in ("right", "healthy-silent"):
                e = v.excerpt
                want = "|".join(e.expected) or "(healthy: no error)"
                print(f"{v.outcome:14} {e.id:34} got {v.got!s:24} want {want}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
