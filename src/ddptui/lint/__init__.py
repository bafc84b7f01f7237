"""Static audit of training scripts for the classic DDP pitfalls (`ddptui lint`).

Pure core: Python's `ast` only; the script is parsed, never imported or run.
    from ddptui.lint import lint_paths
    result = lint_paths(["train.py"])   # LintResult: .findings, .problems, .exit_code
"""

from ddptui.lint.engine import RULE_IDS, lint_paths, lint_source
from ddptui.lint.model import LintFinding, LintInputError, LintResult

__all__ = ["RULE_IDS", "LintFinding", "LintInputError", "LintResult", "lint_paths", "lint_source"]
