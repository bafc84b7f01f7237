"""`ddptui diagnose --slurm JOB '*:GLOB'` on a real Slurm with SSH refused: the logread
probe reaches the job's nodes through `srun --overlap`, filters the shared logs there
with the diagnosis' prefilter and sends only the lines it looks at; the diagnosis is the
local one, each file read once, and no step or probe is left in the job."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurmbed import SlurmCluster
from testbed import start_testbed

pytestmark = pytest.mark.testbed

FIX = Path(__file__).parent / "fixtures"


@pytest.fixture
def slurm_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SlurmCluster, str, Path]]:
    from conftest import _require_slurm

    _require_slurm()
    tb = start_testbed(2, stem="sfsl", subnet_base="10.86", workdir=tmp_path_factory.mktemp("sfsl"))
    try:
        with SlurmCluster(tb) as slurm:
            for i in range(tb.n):  # SSH refused: srun is the only way in
                tb.iptables(i, "-A", "INPUT", "-i", "eth0", "-p", "tcp", "--dport", "22",
                            "-j", "REJECT")  # fmt: skip
            yield slurm, slurm.allocate(2), tb.workdir
    finally:
        tb.down()


def _diagnose(args: list[str], env: dict[str, str] | None, out: Path) -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-m", "ddptui", "diagnose", *args, "--json", str(out)],
                          capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def test_shared_logs_filtered_on_the_nodes_through_srun_equal_the_local_diagnosis(slurm_job) -> None:  # type: ignore[no-untyped-def]
    slurm, job, work = slurm_job
    logs = work / "joblogs"
    logs.mkdir()
    for i, src in enumerate([FIX / "gpu-h100/job-hang/watchdog-timeout.log",
                             FIX / "logs/gloo_ifname_eth9.log", FIX / "logs/rank_skips_collective.log"]):
        shutil.copyfile(src, logs / f"{i}-{src.name}")
    # and a long healthy stretch: what crosses srun is the lines the diagnosis looks at
    steady = [x for x in (FIX / "gpu-h100/job-hang/healthy-loop.log").read_text().splitlines()
              if "NCCL INFO Channel" in x]
    (logs / "3-steady.log").write_text("\n".join(steady * (2_000_000 // len("".join(steady)))))
    files = sorted(str(p) for p in logs.glob("*.log"))
    here = _diagnose(files, None, work / "local.json")
    there = _diagnose(["--slurm", job, f"*:{logs}/*.log"], slurm.env, work / "slurm.json")

    def seen(doc: dict[str, object]) -> object:
        step = doc["steps"][0]  # type: ignore[index]
        return ([(f["id"], f.get("rank"), f["evidence"]) for f in step["findings"]],
                step["data"]["timelines"], step["data"]["lines"], step["data"]["bytes"])

    assert seen(there) == seen(here)
    data = there["steps"][0]["data"]  # type: ignore[index]
    assert sorted(f["label"] for f in data["files"]) == files
    assert sum(data["node_sent_bytes"].values()) < sum(f["bytes"] for f in data["files"]) / 4
    deadline = time.monotonic() + 15
    while [s for s in slurm.steps(job) if "ddptui" in s] and time.monotonic() < deadline:
        time.sleep(0.3)
    assert [s for s in slurm.steps(job) if "ddptui" in s] == []
