"""`ddptui diagnose` on the real H100 captures (tests/fixtures/gpu-h100/): each failing
file gets its right first cause, the healthy ones no error finding."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddptui.cli import main
from ddptui.report.schema import ReportModel

GPU = Path(__file__).parent / "fixtures" / "gpu-h100"

FAILING = {
    "raw-torchrun/nproc2-on-1gpu.log": "ENV-ORDINAL",
    "raw-torchrun/ifname-ib9-missing.log": "BOOT-NOIF",
    "raw-torchrun/nccl-net-ib-without-ib.log": "NET-NOPLUGIN",
    "nccl-env/exclude_all.log": "BOOT-NOIF",
    "nccl-env/net_ib.log": "NET-NOPLUGIN",
    "nccl-env/net_bogus.log": "NET-NOPLUGIN",
    "nccl-env/cvd_missing.log": "ENV-NOGPU-VISIBLE",
    "nccl-env/cvd_empty.log": "ENV-NOGPU-VISIBLE",
    "job-hang/watchdog-timeout.log": "WATCHDOG",
    "ddptui/check-2nodes-1gpu.json": "ENV-DUPGPU",
}
HEALTHY = [
    "raw-torchrun/healthy-1gpu.log",
    "job-hang/healthy-loop.log",
    *(
        f"nccl-env/{name}.log"
        for name in (
            "ifname_exact_missing", "net_plugin", "algo", "proto", "p2p_level",
            "commid_unreach", "debug_file", "async_err", "blocking", "ib_hca",
            "socket_nthreads",
        )
    ),
    "ddptui/check-1node-nccl.json",
    "ddptui/check-1node-nccl.md",
]


def diagnose_json(*args: str) -> tuple[int, dict, str]:
    result = CliRunner().invoke(main, ["diagnose", *args, "--json", "-"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    doc = json.loads(result.stdout)
    return result.exit_code, doc, result.stderr


def test_every_capture_is_a_fixture() -> None:
    logs = {p.relative_to(GPU).as_posix() for p in GPU.rglob("*.log")}
    assert logs == {k for k in FAILING if k.endswith(".log")} | {
        h for h in HEALTHY if h.endswith(".log")
    }


@pytest.mark.parametrize("name", sorted(FAILING))
def test_failing_capture_gets_its_first_cause(name: str) -> None:
    code, doc, human = diagnose_json(str(GPU / name))
    assert code == 1
    first = doc["first_failure"]
    assert first["step"] == "logs"
    assert first["finding"] == FAILING[name]
    assert first["fix"]
    ReportModel.model_validate(doc)  # the same document `check` writes
    assert f"First cause: {FAILING[name]}" in human


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_capture_has_no_error_finding(name: str) -> None:
    code, doc, _ = diagnose_json(str(GPU / name))
    assert code == 0
    assert doc["first_failure"] is None
    findings = doc["steps"][0]["findings"]
    assert not [f for f in findings if f["severity"] == "error"], findings


def test_last_error_is_joined_with_the_cause_on_the_next_line() -> None:
    _, doc, _ = diagnose_json(str(GPU / "raw-torchrun/ifname-ib9-missing.log"))
    noif = next(f for f in doc["steps"][0]["findings"] if f["id"] == "BOOT-NOIF")
    joined = [e for e in noif["evidence"] if "Last error: Bootstrap : no socket interface found" in e]
    assert joined and joined[0].split(": ", 1)[0].endswith("ifname-ib9-missing.log:60")
    assert noif["rank"] == 0  # NCCL's pid 846 is local rank 0 (torchrun's failure line)


def test_the_users_frame_of_the_traceback_is_where() -> None:
    _, doc, human = diagnose_json(str(GPU / "raw-torchrun/nproc2-on-1gpu.log"))
    assert doc["first_failure"]["where"] == "ar_raw.py:4 in <module>"  # not torch's own frame
    assert "in code: ar_raw.py:4 in <module>" in human


def test_watchdog_timeout_names_the_collective() -> None:
    _, doc, human = diagnose_json(str(GPU / "job-hang/watchdog-timeout.log"))
    wd = next(f for f in doc["steps"][0]["findings"] if f["id"] == "WATCHDOG")
    assert "SeqNum=4, OpType=ALLREDUCE" in wd["evidence"][0]
    assert "collective 4 (ALLREDUCE) within 30000 ms" in wd["cause"]
    assert doc["first_failure"]["rank"] == 0
    assert "rank 0" in human  # the [rank0]: prefix


def test_a_missing_net_plugin_is_a_warning_not_a_failure() -> None:
    code, doc, human = diagnose_json(str(GPU / "nccl-env/net_plugin.log"))
    assert code == 0  # the job ran, on NCCL's own Socket transport
    warn = next(f for f in doc["steps"][0]["findings"] if f["id"] == "NET-PLUGIN-MISSING")
    assert warn["severity"] == "warning"
    assert "NCCL_NET_PLUGIN=nosuchplugin" in warn["cause"]
    assert "No failure found, but a warning: NET-PLUGIN-MISSING" in human


def test_an_interface_alias_is_a_warning() -> None:
    code, doc, _ = diagnose_json(str(GPU / "nccl-env/ifname_exact_missing.log"))
    assert code == 0
    warn = next(f for f in doc["steps"][0]["findings"] if f["id"] == "NET-IFNAME-ALIAS")
    assert "with eth0:1 it uses eth0" in warn["cause"]
    assert diagnose_json(str(GPU / "raw-torchrun/ifname-ib9-missing.log"))[1]["first_failure"][
        "finding"
    ] == "BOOT-NOIF"  # "set to ib9" is no alias


def test_duplicate_gpu_leads_over_its_consequences() -> None:
    _, doc, _ = diagnose_json(str(GPU / "ddptui/check-2nodes-1gpu.json"))
    ids = [f["id"] for f in doc["steps"][0]["findings"]]
    assert ids[0] == "ENV-DUPGPU"


def test_many_files_merge_into_one_diagnosis_with_a_timeline_per_rank() -> None:
    names = ["raw-torchrun/healthy-1gpu.log", "raw-torchrun/nproc2-on-1gpu.log"]
    code, doc, human = diagnose_json(*(str(GPU / n) for n in names))
    assert code == 1
    assert doc["first_failure"]["finding"] == "ENV-ORDINAL"
    assert [n["name"] for n in doc["nodes"]] == [str(GPU / n) for n in names]
    step = doc["steps"][0]
    assert step["nodes"][str(GPU / names[0])]["status"] == "pass"
    assert step["nodes"][str(GPU / names[1])]["status"] == "fail"
    keys = [tl["key"] for tl in step["data"]["timelines"]]
    assert "rank 0" in keys  # NCCL Init lines of the healthy run
    assert "Timeline per rank" in human


def test_cli_in_a_subprocess_exit_codes_and_markdown(tmp_path: Path) -> None:
    md = tmp_path / "r.md"
    run = subprocess.run(
        [sys.executable, "-m", "ddptui", "diagnose", str(GPU / "nccl-env/net_ib.log"),
         "--markdown", str(md)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert run.returncode == 1, run.stderr
    assert "First cause: NET-NOPLUGIN" in run.stdout
    assert "NET-NOPLUGIN" in md.read_text()
    ok = subprocess.run(
        [sys.executable, "-m", "ddptui", "diagnose", "-"],
        input=(GPU / "raw-torchrun/healthy-1gpu.log").read_text(),
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert "Nothing wrong found" in ok.stdout
