"""Real output from one lent H200 (NCCL 2.28.9, torch 2.11; tests/fixtures/gpu-h200/).

- xr/: two ranks in two network and UTS namespaces (hosts gpu01, gpu02) sharing the one
  GPU (NCCL takes different host names for different hosts), one cross-host fault per
  case, made by xr_cases.sh: the cross-rank and interface rules on real NCCL lines.
- check-2hosts.json: `ddptui check` on two `host: local` nodes with different
  NCCL_HOSTID: a real two-rank NCCL allreduce, fabric pair and DDP run (over NET/Socket).
- check-1rank.json, nccl-tests.txt, plain-*.txt: the sweep beside nccl-tests and a plain
  loop, same GPU, same session.
- xr2/: settings that must match (NCCL_PROTO, NCCL_BUFFSIZE, NCCL_ALGO) differing between
  the two hosts, and a host without a GPU.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ddptui.cli import main
from ddptui.report.markdown import render_markdown
from ddptui.report.schema import ReportModel

H200 = Path(__file__).parent / "fixtures" / "gpu-h200"
MIB = 1 << 20

# case -> (first cause, other findings that must be present)
CASES = {
    "lo": ("AR-BOOT-LOOPBACK", ["BOOT-CONN"]),  # gpu01 bootstraps on lo
    "fam": ("LOGS-IF-FAMILY", []),  # gpu01 on IPv6, gpu02 has IPv6 off
    "net": ("LOGS-IF-NETWORK", []),  # gpu02's NCCL on 192.168.77.0/24, unreachable
    "world": ("ENV-DUPRANK-NRANKS", ["ENV-WORLDSIZE"]),  # gpu02 told WORLD_SIZE=3
    "ver": ("BOOT-VERSION", ["AR-NCCL-VERSION"]),  # gpu02 loads NCCL 2.28.3
}


# xr2/ (a third call, run5.sh): settings that must match, and a host without a GPU
CASES2 = {
    "proto": ("LOGS-NCCL-ENV-DIFFERS", ["NET-SOCKET-TRUNC"]),  # LL against Simple
    "buff": ("LOGS-NCCL-ENV-DIFFERS", ["NET-SOCKET-TRUNC"]),  # 1 MiB against the default
    "algo": ("LOGS-NCCL-ENV-DIFFERS", []),  # Ring against Tree: a hang, no error line
    "cvd": ("ENV-NOGPU-VISIBLE", ["C10D-CLIENTS-JOINED"]),  # gpu02 sees no GPU
}


def diagnose(case: str, folder: str = "xr") -> tuple[int, dict[str, Any]]:
    files = [str(H200 / folder / f"{case}-rank{r}.log") for r in (0, 1)]
    result = CliRunner().invoke(main, ["diagnose", *files, "--json", "-"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(result.stdout)


def test_every_capture_is_a_case() -> None:
    cases = {p.name.rpartition("-rank")[0] for p in (H200 / "xr").glob("*.log")}
    assert cases == set(CASES) | {"ok"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_cross_host_fault_gets_its_cause(case: str) -> None:
    code, doc = diagnose(case)
    lead, also = CASES[case]
    assert code == 1
    assert doc["first_failure"]["finding"] == lead, doc["first_failure"]
    ids = {f["id"] for f in doc["steps"][0]["findings"]}
    assert set(also) <= ids, ids


def test_every_second_capture_is_a_case() -> None:
    cases = {p.name.rpartition("-rank")[0] for p in (H200 / "xr2").glob("*.log")}
    assert cases == set(CASES2)


@pytest.mark.parametrize("case", sorted(CASES2))
def test_settings_that_must_match_and_a_missing_gpu(case: str) -> None:
    code, doc = diagnose(case, "xr2")
    lead, also = CASES2[case]
    assert code == 1
    assert doc["first_failure"]["finding"] == lead, doc["first_failure"]
    ids = {f["id"] for f in doc["steps"][0]["findings"]}
    assert set(also) <= ids, ids


def test_a_must_match_setting_names_both_values() -> None:
    _, doc = diagnose("buff", "xr2")
    first = doc["first_failure"]
    assert "NCCL_BUFFSIZE" in first["summary"]
    assert "1048576 on rank 0 (gpu01)" in first["summary"] and "unset on rank 1 (gpu02)" in first["summary"]


def test_the_interface_that_failed_leads_not_a_second_nics_link_local() -> None:
    # gpu02's NCCL_SOCKET_IFNAME=eth1 also matches eth1p (a prefix), whose only address
    # is link-local; the connect that failed went to eth1's 192.168.77.2
    _, doc = diagnose("net")
    first = doc["first_failure"]
    assert "10.0.0.0/8 on gpu01" in first["summary"] and "192.168.0.0/16 on gpu02" in first["summary"]
    assert "familys" not in json.dumps(doc)
    _, fam = diagnose("fam")
    assert "different families" in fam["first_failure"]["summary"]


def test_healthy_two_host_run_has_no_error() -> None:
    code, doc = diagnose("ok")
    assert code == 0 and doc["first_failure"] is None
    assert not [f for f in doc["steps"][0]["findings"] if f["severity"] == "error"]


def plain(name: str) -> dict[int, dict[str, float]]:
    rows = {}
    for line in (H200 / name).read_text().splitlines():
        if line.startswith("PLAIN "):
            r = json.loads(line[6:])
            rows[r["bytes"]] = r
    return rows


def sweep(report: str) -> dict[int, dict[str, Any]]:
    doc = json.loads((H200 / report).read_text())
    ar = next(s for s in doc["steps"] if s["id"] == "allreduce")
    return {p["bytes"]: p for p in ar["data"]["bandwidth"][0]["sweep"]}


def test_two_rank_nccl_check_passes_every_step_and_matches_the_plain_loop() -> None:
    doc = json.loads((H200 / "check-2hosts.json").read_text())
    status = {s["id"]: s["status"] for s in doc["steps"]}
    assert status == {
        "ssh": "pass", "inventory": "pass", "ping": "pass", "port": "pass",
        "env": "warn", "allreduce": "pass", "fabric": "pass", "ddp": "pass",
    }
    ar = doc["tables"]["allreduce"]
    assert ar["world_size"] == 2 and ar["backend"] == "nccl"
    ours, ref = sweep("check-2hosts.json"), plain("plain-2hosts-rank0.txt")
    assert sorted(ours) == sorted(ref) == [MIB << k for k in range(0, 11, 2)]
    for size in (256 * MIB, 1024 * MIB):  # bandwidth-bound: the same figure
        assert ours[size]["busbw_gbps"] == pytest.approx(ref[size]["busbw_gbps"], rel=0.03)
    fabric = next(s for s in doc["steps"] if s["id"] == "fabric")
    assert "1 pair" in fabric["nodes"]["gpuA"]["summary"]


def test_one_rank_h200_sweep_matches_nccl_tests_where_copy_bound() -> None:
    ref = {}
    for line in (H200 / "nccl-tests.txt").read_text().splitlines():
        f = line.split()
        if len(f) >= 8 and not line.startswith("#") and f[0].isdigit():
            ref[int(f[0])] = float(f[6])  # out-of-place algbw
    ours = sweep("check-1rank.json")
    assert sorted(ref) == sorted(ours)
    for size in (256 * MIB, 1024 * MIB):
        assert ours[size]["busbw_gbps"] is None
        assert ours[size]["algbw_gbps"] == pytest.approx(ref[size], rel=0.03)


# --- job/: a two-rank NCCL job on the one GPU (one torchrun, a host id per rank): rank 1
# leaves the loop after 3 allreduces, rank 0 waits in the 4th; HANG_TIMEOUT=30 with the
# flight recorder; `ddptui job` while it hung and after the watchdog took it down.
JOB = H200 / "job"


def test_two_rank_watchdog_log_names_the_rank_that_never_enqueued_the_collective() -> None:
    # only rank 0 times out; rank 1's dump line says its last enqueued work was #3
    result = CliRunner().invoke(main, ["diagnose", str(JOB / "job.log"), "--json", "-"])
    doc = json.loads(result.stdout)
    first = doc["first_failure"]
    assert result.exit_code == 1
    assert first["finding"] == "LOGS-NOT-IN-COLLECTIVE" and first["rank"] == 1, first
    assert "SeqNum 4" in first["summary"] and "up to #3" in first["summary"]


def test_flight_recorder_dumps_of_both_ranks_name_the_missing_rank() -> None:
    dumps = [a for r in (0, 1) for a in ("--fr-dump", str(JOB / "fr" / f"rank_{r}"))]
    result = CliRunner().invoke(main, ["job", *dumps, "--json", "-"])
    doc = json.loads(result.stdout)
    (step,) = doc["steps"]
    fr = next(f for f in step["findings"] if f["id"] == "JOB-FR-TIMEOUT")
    assert "#4" in fr["summary"] and "rank(s) 1 never enqueued it" in fr["summary"]


def test_the_report_of_the_look_at_the_hung_job_renders_the_diverged_rank() -> None:
    # the JSON `ddptui job` wrote on the GPU machine while the job hung (NCCL: rank 0 spins
    # at the next synchronize, not inside all_reduce), rendered by today's Markdown writer
    doc = json.loads((JOB / "job-hung.json").read_text())
    ReportModel.model_validate(doc)
    md = render_markdown(doc)
    assert "JOB-HUNG-DIVERGED" in md
    assert "evaluate_only_on_rank1" in md and "synchronize" in md


# torchrun/: two-rank torchrun jobs with one fault each (jcase.py)
TORCHRUN = {
    "oom": ("RANK-CUDA-OOM", 1),  # rank 1 out of GPU memory; rank 0's allreduce fails after
    "mismatch": ("DESYNC-MISMATCH", None),  # broadcast on rank 1, all_reduce on rank 0 (DETAIL)
    "evalwait": ("LOGS-NOT-IN-COLLECTIVE", 0),  # rank 0 evaluates while rank 1 times out
}


@pytest.mark.parametrize("case", sorted(TORCHRUN))
def test_two_rank_torchrun_fault_names_the_rank_at_fault(case: str) -> None:
    log = str(H200 / "torchrun" / f"{case}.log")
    result = CliRunner().invoke(main, ["diagnose", log, "--json", "-"])
    first = json.loads(result.stdout)["first_failure"]
    lead, rank = TORCHRUN[case]
    assert result.exit_code == 1
    assert first["finding"] == lead, first
    if rank is not None:
        assert first["rank"] == rank, first

