"""Shared by the tests on real GPU captures (tests/test_gpu_launch.py, test_gpu_fail8.py):
diagnose a case's per-node files together, as a user would paste them, through the CLI,
and check its first cause."""

from __future__ import annotations

import json
from collections.abc import Callable
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


def ids(doc: dict[str, Any]) -> dict[str, str]:
    """finding id -> severity, of a report's log step."""
    return {f["id"]: f["severity"] for f in doc["steps"][0]["findings"]}


def assert_healthy(folder: Path, *files: str) -> None:
    """A healthy run's files: exit 0, no first failure, nothing above an info."""
    code, doc = diagnose_in(folder, *files)
    assert code == 0
    assert doc["first_failure"] is None
    found = {i: s for i, s in ids(doc).items() if s != "info"}
    assert found == {}, found


def variant_in(
    folder: Path, tmp_path: Path, files: tuple[str, ...], keep: Callable[[str], str | None]
) -> tuple[int, dict[str, Any]]:
    """The files of `folder`, each line through `keep` (None drops it), diagnosed from
    tmp_path (a twin of a real capture with one fact changed)."""
    for name in files:
        lines = (folder / name).read_text().splitlines()
        out = [k for k in map(keep, lines) if k is not None]
        (tmp_path / name).write_text("\n".join(out) + "\n")
    return diagnose_in(tmp_path, *files)
