"""Whole-project rules on real projects' code, cut down (tests/fixtures/lint_real/: one
folder per case, its repository and fix cited in the files): each case gets exactly
the findings its files declare (`# expect: ID`), at their file and line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddptui.lint import lint_paths

CASES = sorted(p.parent for p in (Path(__file__).parent / "fixtures" / "lint_real").glob("*/ENTRY"))
_EXPECT = re.compile(r"#.*\bexpect:\s*([A-Z0-9-]+(?:\s*,\s*[A-Z0-9-]+)*)")


def declared(root: Path) -> set[tuple[str, str, int]]:
    out: set[tuple[str, str, int]] = set()
    for path in sorted(root.rglob("*.py")):
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            m = _EXPECT.search(line)
            if m:
                rel = str(path.relative_to(root))
                out |= {(i.strip(), rel, no) for i in m.group(1).split(",")}
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_real_project_gets_exactly_its_declared_findings(case: Path) -> None:
    entry = case / (case / "ENTRY").read_text(encoding="utf-8").strip()
    result = lint_paths([entry], root=case)
    found = {
        (f.id, str(Path(f.file).resolve().relative_to(case.resolve())), f.line)
        for f in result.findings
    }
    assert found == declared(case)
    assert result.problems == ()
