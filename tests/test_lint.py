"""`ddptui lint`: every fixture script yields exactly the findings it declares
(`# expect: ID` on the line, `# expect: none` for none), correct scripts never get an
error, and every id a rule can emit has its knowledge-base entry."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.diagnosis.kb import KB_DIR, kb_entry, parse_kb
from ddptui.lint import RULE_IDS, lint_paths, lint_source

FIXTURES = Path(__file__).parent / "fixtures" / "lint"
SCRIPTS = sorted(FIXTURES.glob("*.py"))
_EXPECT = re.compile(r"#.*\bexpect:\s*(none|[A-Z0-9-]+(?:\s*,\s*[A-Z0-9-]+)*)")


def expected(path: Path) -> set[tuple[str, int]]:
    """(id, line) pairs declared in a fixture."""
    out: set[tuple[str, int]] = set()
    for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = _EXPECT.search(line)
        if m and m.group(1) != "none":
            out |= {(i.strip(), no) for i in m.group(1).split(",") if i.strip()}
    return out


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_fixture_gets_exactly_its_declared_findings(path: Path) -> None:
    found = {(f.id, f.line) for f in lint_source(path.read_text(encoding="utf-8"), path.name)}
    assert found == expected(path)


def test_fixture_set_covers_every_pitfall_alone_in_pairs_and_correct_styles() -> None:
    assert len(SCRIPTS) >= 30
    declared = [expected(p) for p in SCRIPTS]
    covered = {i for d in declared for i, _ in d}
    assert covered == set(RULE_IDS)
    assert sum(1 for d in declared if len({i for i, _ in d}) >= 2) >= 5  # pairs
    correct = [p for p in SCRIPTS if p.name.startswith("ok_")]
    assert len(correct) >= 8
    styles = " ".join(p.read_text(encoding="utf-8") for p in correct)
    for style in ("mp.spawn", "import lightning", "from accelerate", "LOCAL_RANK"):
        assert style in styles


def test_correct_scripts_have_no_error_finding() -> None:
    result = lint_paths([p for p in SCRIPTS if p.name.startswith("ok_")])
    assert result.problems == ()
    assert [f for f in result.findings if f.severity == "error"] == []
    assert result.exit_code == 0


def test_every_rule_id_has_one_lint_kb_entry_and_findings_read_whole() -> None:
    files = sorted(KB_DIR.glob("lint*.yaml"))  # lint.yaml, then one file per round
    entries = [e for p in files for e in parse_kb(p.read_text(encoding="utf-8"), p.name)]
    assert sorted(e.id for e in entries) == sorted(RULE_IDS)
    for rid in RULE_IDS:
        assert kb_entry(rid).source in {p.name for p in files}
    result = lint_paths(SCRIPTS)
    for f in result.findings:
        # every {placeholder} the rule's text uses was filled with a fact from the script
        assert "<" not in re.sub(r"<[^>]*>\s*=|->|<=|< ", "", f.why + f.fix), (f.id, f.why, f.fix)
        assert f.title and f.summary and f.fix.strip()


def test_findings_carry_severity_file_line_and_a_code_fix() -> None:
    path = FIXTURES / "bad_no_sampler.py"
    (f,) = lint_paths([path]).findings
    assert (f.id, f.severity, f.file, f.line) == ("DDP-SAMPLER", "error", str(path), 13)
    assert "DistributedSampler(data" in f.fix  # the dataset's own name is filled in
    assert "whole dataset" in f.why


def test_follows_names_through_helpers_classes_and_returns() -> None:
    # the loader reaches the loop through a helper's return and a function parameter
    src = (FIXTURES / "bad_no_sampler.py").read_text(encoding="utf-8")
    assert [f.id for f in lint_source(src)] == ["DDP-SAMPLER"]
    # with a sampler passed in, what is left is the epoch loop that never calls
    # set_epoch: the loop over train() calls, one function away from the batches
    fixed = src.replace("shuffle=True)", "sampler=DistributedSampler(data))").replace(
        "import DataLoader, TensorDataset",
        "import DataLoader, TensorDataset\nfrom torch.utils.data.distributed import "
        "DistributedSampler",
    )
    assert [(f.id, f.line) for f in lint_source(fixed)] == [("DDP-SET-EPOCH", 33)]


def test_ignore_comment_silences_one_finding() -> None:
    src = (FIXTURES / "bad_find_unused.py").read_text(encoding="utf-8")
    quiet = src.replace("# expect: DDP-FIND-UNUSED", "# ddptui: ignore[DDP-FIND-UNUSED]")
    assert lint_source(quiet) == []
    other = src.replace("# expect: DDP-FIND-UNUSED", "# ddptui: ignore[DDP-SEED]")
    assert [f.id for f in lint_source(other)] == ["DDP-FIND-UNUSED"]


def test_not_distributed_scripts_are_left_alone() -> None:
    src = (
        "import torch\nmodel = torch.nn.Linear(2, 2).to('cuda:0')\n"
        "torch.save(model.state_dict(), 'm.pt')\n"
        "loader = torch.utils.data.DataLoader(range(10), shuffle=True)\n"
    )
    assert lint_source(src) == []


def test_lint_is_pure_core_nothing_heavy_is_imported() -> None:
    code = "import sys, ddptui.lint; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    roots = {m.split(".")[0] for m in out.stdout.split()}
    assert not roots & {"torch", "textual", "asyncssh", "click", "pydantic"}


def test_any_python_is_audited_without_a_crash(tmp_path: Path) -> None:
    # ddptui's own sources and some of the standard library: odd constructs (match, async,
    # walrus, decorators, nested classes) must never break the audit
    import ast as stdlib_ast
    import asyncio
    import concurrent.futures

    import ddptui

    roots = [Path(ddptui.__file__).parent, Path(asyncio.__file__).parent]
    files = [p for r in roots for p in sorted(r.rglob("*.py"))[:30]]
    files.append(Path(stdlib_ast.__file__))
    files.append(Path(concurrent.futures.__file__).with_name("process.py"))
    result = lint_paths(files, root=tmp_path)  # each file alone (imports: test_lint_project)
    assert result.problems == ()
    assert len(result.files) == 62


def test_too_deep_an_expression_is_an_input_problem_not_a_crash(tmp_path: Path) -> None:
    deep = tmp_path / "generated.py"
    deep.write_text("x = " + "+".join(["1"] * 5000) + "\n")
    result = lint_paths([deep])
    assert result.exit_code == 2
    assert "cannot be parsed as Python" in result.problems[0]
