"""Whole-project rules on real projects' code, cut down (tests/fixtures/lint_real/: one
folder per case, its repository and fix cited in the files): each case gets exactly
the findings its files declare (`# expect: ID`), at their file and line."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_lint_project import declared  # the fixtures' `# expect:` comments, one reading

from ddptui.lint import lint_paths

CASES = sorted(p.parent for p in (Path(__file__).parent / "fixtures" / "lint_real").glob("*/ENTRY"))


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
