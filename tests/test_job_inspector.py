"""NCCL Inspector plugin output in `ddptui job`: the node-side reader finds the dump
directory from the ranks' own environment and parses the tail of each file (objects in
the plugin's documented v4.0 format: NCCL ext-profiler/inspector/README.md; no real
capture exists here, no GPU machine was lent), and the slow-rank finding quotes the
per-rank busbw."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ddptui.job.model import NodeView
from ddptui.job.slowrank import inspector_busbw
from ddptui.probeset import probes_dir


def _obj(rank: int, sn: int, busbw: float) -> dict[str, Any]:
    return {
        "header": {"id": "0x7f8c496ae9f661", "rank": rank, "n_ranks": 3, "nnodes": 3},
        "metadata": {"inspector_output_format_version": "v4.0", "hostname": "h", "pid": 1},
        "coll_perf": {
            "coll": "AllReduce",
            "coll_sn": sn,
            "coll_msg_size_bytes": 1 << 26,
            "coll_exec_time_us": 6197,
            "coll_algobw_gbs": 10.8,
            "coll_busbw_gbs": busbw,
        },
    }


def _reader() -> dict[str, Any]:
    space: dict[str, Any] = {"json": json, "os": os, "emitted": []}
    space["emit"] = lambda kind, **data: space["emitted"].append({"kind": kind, **data})
    exec((probes_dir() / "_inspector.py").read_text(), space)  # noqa: S102 - the probe lib
    return space


def test_reader_finds_the_dump_dir_and_parses_a_cut_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dump = tmp_path / "nccl-inspector-4242"
    dump.mkdir()
    text = "".join(json.dumps(_obj(1, sn, 20.0 + sn), indent=2) + "\n" for sn in range(5))
    (dump / "h-1.log").write_text(text[37:])  # a tail starts mid-object: skipped
    space = _reader()
    env = {
        "NCCL_INSPECTOR_ENABLE": "1",
        "SLURM_JOB_ID": "4242",
        "NCCL_PROFILER_PLUGIN": "/opt/nccl/libnccl-profiler-inspector.so",
    }
    monkeypatch.chdir(tmp_path)  # a relative dump dir is the rank's cwd's
    space["read_inspector"]([(os.getpid(), env)])
    (rec,) = space["emitted"]
    assert rec["rank"] == 1 and [c["sn"] for c in rec["colls"]] == [1, 2, 3, 4]
    assert rec["colls"][-1]["busbw_gbs"] == 24.0
    space["emitted"].clear()
    space["read_inspector"]([(os.getpid(), {"NCCL_INSPECTOR_ENABLE": "0"})])
    assert space["emitted"] == []  # not enabled: nothing read


def test_busbw_per_rank_from_the_records() -> None:
    recs = (
        {
            "kind": "inspector",
            "rank": 2,
            "colls": [{"coll": "AllReduce", "busbw_gbs": x} for x in (10.0, 12.0, 14.0)],
        },
    )
    view = NodeView(node="node2", inspector=recs)
    assert inspector_busbw([view]) == {2: (12.0, 3, "AllReduce")}
