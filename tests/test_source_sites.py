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
# Keyed by the file name's start (project-version).
FLOORS = {"nccl-v2.21": 0.44, "nccl-v2.28": 0.38, "gloo": 0.07, "torch-2.13.0-py": 0.17, "torch-2.13.0-cpp": 0.12}


def test_every_project_has_its_sites() -> None:
    projects = {read(p)[0]["project"] for p in FILES}
    assert {"nccl", "gloo", "torch"} <= projects, projects
    assert {p.stem for p in FILES} >= {"torch-2.13.0-cpp", "torch-2.13.0-py"}


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
    floor = next(v for k, v in FLOORS.items() if path.stem.startswith(k))
    assert covered / total >= floor, f"{path.stem}: {covered}/{total} is under the floor {floor}"


def test_torch_cpp_sites_read_each_way_torch_builds_a_message() -> None:
    """The C++ walker on a made-up transcription: a throw with fmt::format becomes the
    Python exception line, a LOG stream joins its pieces, a TORCH_CHECK_WITH drops its
    type and condition, values are named by their expression, and a site macro's own
    definition is not a site."""
    from source_sites import printed, torch_cpp_sites

    text = "\n".join(
        [
            "//@ Store::waitAll",
            '  C10_THROW_ERROR(DistStoreError, fmt::format("Waited {} seconds for {} peers", secs, numPeers));',
            "//@ Watcher::loop",
            '  LOG(ERROR) << logPrefix() << "Lost " << count << " peers of rank " << rank_;',
            "//@ Comm::init",
            '  TORCH_CHECK_WITH(DistBackendError, ok, "Comm init failed on rank ", rank_, ": ", reason);',
            '#define C10D_WARNING(...) LOG(WARNING) << "[c10d] " << format(__VA_ARGS__)',
        ]
    )
    sites = list(torch_cpp_sites("torch/csrc/x/Demo.cpp.sites", text))
    assert [s.where for s in sites] == [
        "torch/csrc/x/Demo.cpp:Store::waitAll",
        "torch/csrc/x/Demo.cpp:Watcher::loop",
        "torch/csrc/x/Demo.cpp:Comm::init",
    ]
    assert [s.fmt for s in sites] == [
        "torch.distributed.DistStoreError: Waited {secs} seconds for {numPeers} peers",
        "{logPrefix()}Lost {count} peers of rank {rank_}",
        "torch.distributed.DistBackendError: Comm init failed on rank {rank_}: {reason}",
    ]
    assert printed("torch", sites[1].fmt) == "[PG ID 0 PG GUID 0 Rank 0] Lost 1 peers of rank 1"
