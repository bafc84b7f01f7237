"""Shared by the tests on real GPU captures (tests/test_gpu_launch.py, test_gpu_fail8.py):
diagnose a case's per-node files together, as a user would paste them, through the CLI,
and check its first cause."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from ddptui.cli import main

# one case: (its files, the first cause, the rank it names (None: not one rank), ids also there)
Case = tuple[tuple[str, ...], str, int | None, tuple[str, ...]]


def diagnose_in(folder: Path, *files: str) -> tuple[int, dict[str, Any]]:
    """(exit code, report JSON) of `ddptui diagnose FILES --json -`."""
    paths = [str(folder / f) for f in files]
    result = CliRunner().invoke(main, ["diagnose", *paths, "--json", "-"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(result.stdout)


def assert_case(folder: Path, case: Case) -> None:
    """The case's files lead with its cause (and rank), exit 1, its other ids present."""
    files, lead, rank, also = case
    code, doc = diagnose_in(folder, *files)
    assert code == 1
    first = doc["first_failure"]
    assert first["finding"] == lead, first
    if rank is not None:
        assert first["rank"] == rank, first
    ids = {f["id"] for f in doc["steps"][0]["findings"]}
    assert set(also) <= ids, ids
