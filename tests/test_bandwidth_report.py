"""The allreduce bandwidth as the report shows it, on real H100 output.

tests/fixtures/gpu-bw/ holds one run on a lent H100 (NCCL 2.28.9, torch 2.11, one rank):
`ddptui check` on a one-node config (check-1node-nccl.json/.md), nccl-tests'
all_reduce_perf -b 1M -e 1G -f 4 -g 1 -w 5 -n 20 (nccl-tests.txt) and a plain torch loop
(plain-loop.txt), all on the same GPU in the same session. With one rank no data cross
a bus: busbw must read n/a (nccl-tests prints 0), and algbw must match nccl-tests'
out-of-place column where the copy, not torch's launch overhead, dominates.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from ddptui.report.html import render_html
from ddptui.report.json_report import tables
from ddptui.report.markdown import NONE, node_names, render_markdown, steps_of

FIXTURES = Path(__file__).parent / "fixtures" / "gpu-bw"
MIB = 1 << 20


def report() -> dict[str, Any]:
    return json.loads((FIXTURES / "check-1node-nccl.json").read_text())  # type: ignore[no-any-return]


def nccl_tests_out_of_place() -> dict[int, tuple[float, float]]:
    """{bytes: (time_us, algbw GB/s)} from nccl-tests' out-of-place columns."""
    rows = {}
    for line in (FIXTURES / "nccl-tests.txt").read_text().splitlines():
        f = line.split()
        if len(f) >= 8 and not line.startswith("#") and f[0].isdigit():
            rows[int(f[0])] = (float(f[5]), float(f[6]))
    return rows


def md_rows(md: str, header_start: str) -> list[list[str]]:
    lines = md.splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith(header_start))
    rows = []
    for ln in lines[first + 2 :]:
        if not ln.startswith("|"):
            break
        rows.append([c.strip() for c in ln.strip("|").split("|")])
    return rows


def test_one_rank_h100_busbw_is_na_and_algbw_matches_nccl_tests() -> None:
    rep = report()
    ar = rep["tables"]["allreduce"]
    assert ar["world_size"] == 1 and ar["backend"] == "nccl"
    (rank,) = ar["ranks"]
    assert rank["busbw_gbps"] is None and "n/a" in ar["busbw_note"]
    assert [p["bytes"] for p in ar["sizes"]] == [MIB << k for k in range(0, 11, 2)]
    ref = nccl_tests_out_of_place()
    assert sorted(ref) == [p["bytes"] for p in ar["sizes"]]
    for p in ar["sizes"]:
        assert p["busbw_gbps"] is None
        if p["bytes"] >= 256 * MIB:  # copy-bound: the same data movement as nccl-tests
            assert p["algbw_gbps"] == pytest.approx(ref[p["bytes"]][1], rel=0.03), p
    # The old sweep (DETAIL wrapper, in place) reported ~485 us at every size and
    # busbw = algbw; this one grows with the size as a copy does.
    times = [p["time_us"] for p in ar["sizes"]]
    assert times[-1] > 10 * times[0]
    sweep = rep["steps"][-1]["data"]["bandwidth"][0]["sweep"]
    assert all(
        s["debug"] == "OFF" and s["ok"] and (s["warmup"], s["iters"]) == (5, 20) for s in sweep
    )
    assert "busbw n/a (one rank)" in rep["steps"][-1]["nodes"]["gpu0"]["summary"]


def test_markdown_and_html_say_na_for_one_rank_and_show_the_sweep() -> None:
    md = render_markdown(report())
    rank_rows = md_rows(md, "| rank | node | busbw GB/s")
    assert rank_rows == [["0", "gpu0", "n/a (one rank)", "1505.946", NONE, ""]]
    assert "busbw n/a (one rank): no data cross a bus (nccl-tests prints 0)" in md
    sweep = md_rows(md, "| size | time µs")
    assert [r[0] for r in sweep] == ["1 MiB", "4 MiB", "16 MiB", "64 MiB", "256 MiB", "1 GiB"]
    assert sweep[-1] == ["1 GiB", "713.0", "1505.949", "n/a (one rank)"]
    html = render_html(report())
    assert html.count("n/a (one rank)") >= 7  # the rank row, the line and six sizes
    assert "0.000" not in md  # never nccl-tests' 0 for a busbw that does not exist


def test_tables_rebuilt_from_the_steps_match_the_saved_ones() -> None:
    """An older reader (tables missing) derives the same allreduce table from the steps."""
    rep = report()
    derived = tables(steps_of(rep), node_names(rep))["allreduce"]
    assert derived == rep["tables"]["allreduce"]


def test_several_ranks_take_the_slowest_rank_per_size_as_nccl_tests() -> None:
    rep = copy.deepcopy(report())
    step = rep["steps"][-1]
    row = step["data"]["bandwidth"][0]
    other = copy.deepcopy(row) | {"rank": 1}
    # Rank 1 took twice as long at 1 GiB; world size 2: busbw = algbw x 2(n-1)/n = algbw.
    for r, t in ((row, 500.0), (other, 1000.0)):
        r["sweep"] = [{"bytes": 1 << 30, "time_us": t, "algbw_gbps": 0, "busbw_gbps": 0}]
        r["busbw_gbps"] = r["algbw_gbps"] = (1 << 30) / t / 1e3
    step["data"]["bandwidth"] = [row, other]
    step["data"]["world_size"] = 2
    derived = tables(steps_of(rep), node_names(rep))["allreduce"]
    (size,) = derived["sizes"]
    assert size["time_us"] == 1000.0
    assert size["algbw_gbps"] == size["busbw_gbps"] == pytest.approx(1073.7418, rel=1e-6)
    assert derived["busbw_note"] is None


def test_plain_loop_and_nccl_tests_fixtures_agree_at_one_gib() -> None:
    """The three measurements of the same GPU in the same session agree where the data
    movement dominates (1 GiB): ddptui, a plain torch loop, nccl-tests."""
    plain = [
        json.loads(ln.split(" ", 1)[1])
        for ln in (FIXTURES / "plain-loop.txt").read_text().splitlines()
    ]
    ours = {p["bytes"]: p for p in report()["tables"]["allreduce"]["sizes"]}
    ref = nccl_tests_out_of_place()
    top = 1 << 30
    plain_top = next(p for p in plain if p["bytes"] == top)
    for algbw in (plain_top["algbw_gbps"], ours[top]["algbw_gbps"]):
        assert algbw == pytest.approx(ref[top][1], rel=0.02)


def test_nvml_capture_from_the_same_session_shows_v2_without_reserved() -> None:
    text = (FIXTURES / "nvml-memory.txt").read_text()
    v1 = int(re.search(r"meminfo v1 used (\d+)", text)[1])  # type: ignore[index]
    v2 = int(re.search(r"meminfo v2 used (\d+)", text)[1])  # type: ignore[index]
    assert (v1, v2) == (503316480, 0)
    samples = report()["metrics"]["nodes"]["gpu0"]["samples"]
    smi = (FIXTURES / "nvidia-smi-during-check.csv").read_text().splitlines()[1:]
    # Idle at the start: ddptui (NVML v2) and nvidia-smi both say 0, not v1's 480 MiB.
    assert samples[0]["gpus"][0]["mem_used"] == 0
    assert smi[0].split(", ")[1] == "0 MiB"
    assert report()["metrics"]["nodes"]["gpu0"]["hello"]["gpu_mem_api"] == "v2"


def test_worker_and_plain_loop_agree_with_and_without_ddptuis_forced_env() -> None:
    """launch-overhead.txt: the bare loop, the worker bare, and both under ddptui's forced
    environment move 256 MiB and 1 GiB at the same speed (within 1%): the sweep carries
    no wrapper any more, whatever TORCH_DISTRIBUTED_DEBUG says."""
    by_size: dict[int, list[float]] = {}
    for line in (FIXTURES / "launch-overhead.txt").read_text().splitlines():
        if line.startswith("#"):
            continue
        rec = json.loads(line.split(" ", 2)[2])
        by_size.setdefault(rec["bytes"], []).append(rec["algbw_gbps"])
        if "debug" in rec:
            assert rec["debug"] == "OFF" and rec["ok"] is True
    for size in (256 * MIB, 1 << 30):
        assert len(by_size[size]) == 7
        assert max(by_size[size]) <= 1.01 * min(by_size[size]), by_size[size]
