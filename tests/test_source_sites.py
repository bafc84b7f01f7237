"""Coverage of the knowledge base from the sources (tests/fixtures/source_sites/*.tsv,
written by bench/source_sites.py from NCCL's, gloo's and torch's sources): every WARN /
error / enforce site with its format string and what a line printed from it is
diagnosed as.  The recorded mapping must be today's (rerun `bench/source_sites.py remap`
after a signature change); the figures are printed and must not fall."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from source_sites import GENERIC, SITES_DIR, classify, coverage, read

from ddptui.diagnosis.signatures import load_signatures

FILES = sorted(SITES_DIR.glob("*.tsv"))
# Measured when the files were written (sites mapped to a specific entry / all sites);
# a signature change that loses sites fails here.
FLOORS = {"nccl": 0.30, "gloo": 0.02, "torch": 0.03}


def test_every_project_has_its_sites() -> None:
    projects = {read(p)[0]["project"] for p in FILES}
    assert {"nccl", "gloo"} <= projects, projects


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_recorded_mapping_is_todays(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    meta, sites = read(path)
    assert sites, path.name
    known = {s.id for s in load_signatures()}
    stale = []
    for s in sites:
        now = classify(meta["project"], s.fmt)
        if now != s.mapped:
            stale.append(f"{s.where}: recorded {s.mapped}, now {now}")
        mapped = s.mapped.split(":", 1)[1] if s.mapped.startswith(f"{GENERIC}:") else s.mapped
        assert mapped == GENERIC or mapped in known, s
    assert not stale, "rerun bench/source_sites.py remap:\n" + "\n".join(stale[:20])
    covered, total = coverage(sites)
    with capsys.disabled():
        print(f"\n{meta['project']} {meta['version']}: {covered}/{total} sites map to a specific entry")
    assert covered / total >= FLOORS[meta["project"]]
