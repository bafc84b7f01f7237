"""The floors as a check: pyproject.toml's import-linter contracts hold on the tree, and a
planted violation (an import inside a function, the kind a module-level scan misses)
breaks them. scripts/test runs the same `lint-imports` in CI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True
    )


def test_the_tree_keeps_its_floors() -> None:
    out = lint_imports(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def test_a_planted_violation_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "probes", tmp_path / "probes")
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    core = tmp_path / "src" / "ddptui" / "lint" / "model.py"
    core.write_text(core.read_text() + "\n\ndef _peek() -> None:\n    from ddptui.ui import app\n")
    probe = tmp_path / "probes" / "echo.py"
    probe.write_text(probe.read_text() + "\nimport ddptui.config\n")
    out = lint_imports(tmp_path)
    assert out.returncode != 0
    assert "ddptui.lint is not allowed to import ddptui.ui" in out.stdout, out.stdout
    assert "probes is not allowed to import ddptui" in out.stdout, out.stdout
    assert "2 broken" in out.stdout, out.stdout
