"""ddptui on a real Slurm (slurmctld + one slurmd per testbed node), with SSH REFUSED
on every node: the nodes are reached through `srun --overlap` only.

One 4-node testbed with Slurm is shared by the module; each fault is undone by the
test that makes it. Runs real jobs (sbatch), never a mock of srun's output.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurmbed import SlurmCluster
from testbed import Testbed, start_testbed

pytestmark = pytest.mark.testbed


def _ours(job: str) -> list[str]:
    """srun processes on this (login) machine that ddptui started for `job`."""
    out = []
    for entry in Path("/proc").iterdir():
        pid = entry.name
        if not pid.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            argv
            and argv[0].endswith(b"srun")
            and job.encode() in argv
            and any(a.startswith(b"--job-name=ddptui-") for a in argv)
        ):
            out.append(pid)
    return out


class Bed:
    def __init__(self, tb: Testbed, slurm: SlurmCluster, job: str) -> None:
        self.tb, self.slurm, self.job = tb, slurm, job

    def ddptui(self, *args: str, env: dict[str, str] | None = None, timeout: float = 180,
               json_out: bool = True) -> tuple[int, str, dict[str, object]]:  # fmt: skip
        out = self.tb.workdir / "report.json"
        out.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "ddptui", *args]
        if json_out:
            argv += ["--json", str(out)]
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout,
            env=env if env is not None else self.slurm.env,
        )  # fmt: skip
        text = proc.stdout + proc.stderr
        assert "Traceback" not in text, text
        report = json.loads(out.read_text()) if json_out and out.exists() else {}
        return proc.returncode, text, report

    def probes_on_nodes(self) -> list[str]:
        """Processes on the nodes that ddptui's probes started (their interpreter runs
        STAGE0; torchrun and its ranks, `:rank`, are their children, in the same step)."""
        found = []
        for i in range(self.tb.n):
            for pid in self.tb.pids(i):
                try:
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                if b"ddptui allreduce worker" in argv:
                    found.append(f"node{i}:{pid}:rank")
                elif b"sys.stdin.buffer.readline" in argv or b"torchrun" in argv:
                    found.append(f"node{i}:{pid}:{argv[:80]!r}")
        return found

    def wait_all_respond(self, timeout: float = 60) -> None:
        """A test that froze or drained a node leaves it NOT_RESPONDING until slurmctld's
        next ping answers; srun does not start a step there meanwhile."""
        deadline = time.monotonic() + timeout
        while "NOT_RESPONDING" in (nodes := self.slurm.scontrol("show", "node", "-o")):
            assert time.monotonic() < deadline, nodes
            time.sleep(0.5)

    def assert_nothing_left(self) -> None:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            steps = [s for s in self.slurm.steps(self.job) if "ddptui" in s]
            probes = self.probes_on_nodes()
            if not steps and not probes and not _ours(self.job):
                return
            time.sleep(0.3)
        assert not steps, f"ddptui's steps still in the job: {steps}"
        assert not probes, f"probes left on the nodes: {probes}"
        assert not _ours(self.job), "srun processes left on the login side"


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    from conftest import _require_slurm

    _require_slurm()
    tb = start_testbed(4, stem="ddsl", subnet_base="10.83", workdir=tmp_path_factory.mktemp("sl"))
    try:
        with SlurmCluster(tb) as slurm:
            for i in range(tb.n):  # SSH refused everywhere: srun is the only way in
                tb.iptables(i, "-A", "INPUT", "-i", "eth0", "-p", "tcp", "--dport", "22",
                            "-j", "REJECT")  # fmt: skip
            job = slurm.allocate(4)
            yield Bed(tb, slurm, job)
    finally:
        tb.down()


def test_healthy_job_passes_through_srun_without_ssh(bed: Bed) -> None:
    drained = bed.slurm.node_names[1]  # draining: its jobs run on; ddptui says so
    bed.slurm.scontrol("update", f"nodename={drained}", "state=drain", "reason=bad-dimm")
    try:
        rc, text, report = bed.ddptui(
            "check", "--slurm", bed.job, "--python", sys.executable,
            "--steps", "ssh,inventory,ping,port,env",
        )  # fmt: skip
    finally:
        bed.slurm.scontrol("update", f"nodename={drained}", "state=resume")
    assert rc == 0, text
    assert f"{drained}" in text and "DRAIN (bad-dimm)" in text
    names = [n["name"] for n in report["nodes"]]  # type: ignore[union-attr]
    assert names == bed.slurm.node_names  # Slurm's order
    ssh = next(s for s in report["steps"] if s["id"] == "ssh")  # type: ignore[union-attr]
    for node in ssh["nodes"].values():
        assert node["summary"].startswith(f"reached with srun --overlap (job {bed.job}, step ")
        assert node["data"]["transport"] == "srun"
    assert report["exclude"] == "" and "exclude:" not in text
    bed.assert_nothing_left()


def test_fabric_rounds_reach_every_node_through_srun(bed: Bed) -> None:
    """The fabric step's long-lived workers take one command per round on stdin: through
    one srun step (stdin broadcast to every node) every pair of the 4 nodes is measured."""
    bed.wait_all_respond()  # the test before drains and resumes a node
    rc, text, report = bed.ddptui(
        "check", "--slurm", bed.job, "--python", sys.executable, "--steps", "ssh,fabric",
        "--no-metrics",
    )  # fmt: skip
    assert rc == 0, text
    fabric = next(s for s in report["steps"] if s["id"] == "fabric")  # type: ignore[union-attr]
    assert fabric["status"] == "pass", text
    pairs = {frozenset((p["a"], p["b"])) for p in fabric["data"]["pairs"]}
    assert len(pairs) == 6, fabric["data"]["pairs"]  # 4 nodes: every pair
    assert all(p["busbw_gbs"] and p["busbw_gbs"] > 0 for p in fabric["data"]["pairs"])
    assert set(fabric["data"]["nodes"]) == set(bed.slurm.node_names)
    bed.assert_nothing_left()


def test_node_that_cannot_reach_the_master_is_the_one_excluded(bed: Bed) -> None:
    master_ip, bad = bed.tb.nodes[0].ip, bed.tb.n - 1
    rule = ["OUTPUT", "-d", master_ip, "-j", "DROP"]
    bed.tb.iptables(bad, "-A", *rule)
    try:
        rc, text, report = bed.ddptui(
            "check", "--slurm", bed.job, "--python", sys.executable, "--steps", "ssh,ping",
            "--no-metrics",
        )  # fmt: skip
    finally:
        bed.tb.iptables(bad, "-D", *rule)
    name = bed.slurm.node_names[bad]
    assert rc == 1, text
    failing = {n for s in report["steps"] for f in s["findings"] for n in f["nodes"]}  # type: ignore[union-attr]
    assert failing == {name}, text
    assert report["exclude"] == name
    assert f"exclude: --exclude={name}" in text
    bed.assert_nothing_left()


def test_sbatch_preflight_passes_the_allreduce(bed: Bed) -> None:
    out = bed.tb.workdir / "preflight.json"
    log = bed.tb.workdir / "preflight.out"
    # --export=NONE, as many sites require: the script sets what it needs itself, and
    # ddptui's steps still carry the script's environment (srun --export=ALL)
    script = (
        "#!/bin/sh\n"
        f"export SLURM_CONF={bed.slurm.conf} GLOO_SOCKET_IFNAME=eth0\n"
        f"{sys.executable} -m ddptui check --slurm --python {sys.executable} "
        f"--steps ssh,ping,env,allreduce --no-metrics --json {out} || exit $?\n"
        "echo training would start here\n"
    )
    job = bed.slurm.sbatch(script, "-N4", f"--output={log}", "--export=NONE")
    deadline = time.monotonic() + 150
    state = ""
    while time.monotonic() < deadline:
        state = bed.slurm.job_field(job, "JobState")
        if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            break
        time.sleep(1)
    text = log.read_text() if log.exists() else ""
    assert state == "COMPLETED", f"{state}\n{text}"
    report = json.loads(out.read_text())
    ar = next(s for s in report["steps"] if s["id"] == "allreduce")
    assert ar["status"] == "pass", text
    env = next(s for s in report["steps"] if s["id"] == "env")
    assert env["status"] in ("pass", "warn"), text
    for node in env["nodes"].values():  # the script's own export reached every node
        assert node["data"]["launch_env"].get("GLOO_SOCKET_IFNAME") == "eth0", node
    assert report["nodes"][0]["name"] == bed.slurm.node_names[0]
    assert "training would start here" in text


def test_bad_input_exits_2_with_why(bed: Bed, tmp_path: Path) -> None:
    env = bed.slurm.env
    rc, text, _ = bed.ddptui("check", "--slurm", json_out=False, env=env)
    assert rc == 2 and "not inside a Slurm allocation" in text
    rc, text, _ = bed.ddptui("check", "--slurm", "987654", json_out=False, env=env)
    assert rc == 2 and "987654: no such job" in text
    pending = bed.slurm.sbatch("#!/bin/sh\nsleep 1\n", "-N1", "--begin=now+3600")
    rc, text, _ = bed.ddptui("check", "--slurm", pending, json_out=False, env=env)
    assert rc == 2 and f"{pending}: the job is PENDING" in text
    bed.slurm.cancel(pending)
    # srun missing (scontrol alone on PATH)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "scontrol").symlink_to(
        subprocess.check_output(["which", "scontrol"], text=True).strip()
    )
    rc, text, _ = bed.ddptui(
        "check", "--slurm", bed.job, json_out=False, env=env | {"PATH": str(bindir)}
    )
    assert rc == 2 and "srun is not on PATH" in text
    # a controller that does not answer (nothing listens on its port): bounded, exit 2
    conf = tmp_path / "slurm.conf"
    port = bed.slurm.port
    conf.write_text(bed.slurm.conf.read_text().replace(f"SlurmctldPort={port}", "SlurmctldPort=9"))
    started = time.monotonic()
    rc, text, _ = bed.ddptui(
        "check", "--slurm", bed.job, json_out=False, env=env | {"SLURM_CONF": str(conf)}
    )
    assert rc == 2 and "controller" in text and time.monotonic() - started < 40
    bed.assert_nothing_left()


HANG = """\
import os, time, torch, torch.distributed as dist
os.environ["RANK"], os.environ["WORLD_SIZE"] = os.environ["SLURM_PROCID"], os.environ["SLURM_NTASKS"]
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(8)
def evaluate():
    time.sleep(3600)  # this rank took another code path
step = 0
while True:
    step += 1
    if rank == 3 and step == 3:
        evaluate()
    dist.all_reduce(t)
    print(f"rank {rank} step {step}", flush=True)
    time.sleep(0.3)
"""


def test_job_names_the_stuck_rank_of_an_srun_launched_job(bed: Bed) -> None:
    work = bed.tb.workdir / "hang"
    work.mkdir(exist_ok=True)
    (work / "train.py").write_text(HANG)
    log = work / "out.log"
    master = bed.slurm.node_names[0]
    script = (
        "#!/bin/sh\n"
        f"export MASTER_ADDR={master} MASTER_PORT=29633 GLOO_SOCKET_IFNAME=eth0\n"
        f"srun {sys.executable} train.py\n"
    )
    job = bed.slurm.sbatch(script, "-N4", f"--output={log}", cwd=work)
    try:
        deadline = time.monotonic() + 90
        text = ""
        while time.monotonic() < deadline:
            text = log.read_text() if log.exists() else ""
            if all(f"rank {r} step 2" in text for r in range(4)):
                break
            time.sleep(0.5)
        assert all(f"rank {r} step 2" in text for r in range(4)), text
        time.sleep(2.0)  # rank 3 is in evaluate(), the others wait in all_reduce
        steps_before = bed.slurm.steps(job)
        rc, out, report = bed.ddptui("job", "--slurm", job, "--python", sys.executable)
        assert rc == 1, out
        ff = report["first_failure"]
        assert isinstance(ff, dict)
        assert ff["finding"] == "JOB-HUNG-DIVERGED", out
        assert ff["rank"] == 3 and ff["nodes"] == [bed.slurm.node_names[3]], ff
        assert ff["where"] == "train.py:7 in evaluate", ff
        # untouched: still running, the same steps, and it never moved past rank 3's wait
        assert bed.slurm.job_field(job, "JobState") == "RUNNING"
        assert bed.slurm.steps(job) == steps_before
        bed.assert_nothing_left()
    finally:
        bed.slurm.cancel(job)


def test_node_whose_slurmd_does_not_answer_is_named_alone(bed: Bed) -> None:
    """srun aborts a whole step when one node cannot start its task: ddptui learns the
    node from srun's words, names it alone and reaches the others in a new step."""
    bad = 2
    bed.slurm.freeze(bad)
    try:
        rc, text, report = bed.ddptui(
            "check", "--slurm", bed.job, "--python", sys.executable, "--steps", "ssh,ping",
            "--no-metrics",
        )  # fmt: skip
    finally:
        bed.slurm.freeze(bad, frozen=False)
    name = bed.slurm.node_names[bad]
    assert rc == 1, text
    ssh = next(s for s in report["steps"] if s["id"] == "ssh")  # type: ignore[union-attr]
    assert [f["id"] for f in ssh["findings"]] == ["SLURM-NODE-UNREACHABLE"], text
    assert ssh["findings"][0]["nodes"] == [name]
    assert "srun could not start a task there" in ssh["nodes"][name]["summary"]
    ping = next(s for s in report["steps"] if s["id"] == "ping")  # type: ignore[union-attr]
    assert ping["status"] == "pass", text
    assert report["exclude"] == name
    bed.assert_nothing_left()


def test_interrupted_run_ends_every_step_it_started(bed: Bed) -> None:
    """Ctrl-C in the middle of the allreduce: exit 130, and ddptui's steps, their srun
    processes and the torchrun trees on the nodes are all gone; the user's job runs on."""
    bed.wait_all_respond()  # the test before froze a node's slurmd
    argv = [sys.executable, "-m", "ddptui", "check", "--slurm", bed.job, "--python",
            sys.executable, "--steps", "ssh,allreduce", "--no-metrics"]  # fmt: skip
    proc = subprocess.Popen(
        argv, env=bed.slurm.env | {"GLOO_SOCKET_IFNAME": "eth0"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        # in the middle of the allreduce: its ranks up on every node (seconds on a loaded
        # 2-core machine); a Ctrl-C while the step is still starting is another case
        deadline = time.monotonic() + 90
        while (
            time.monotonic() < deadline
            and proc.poll() is None
            and (sum(p.endswith(":rank") for p in bed.probes_on_nodes()) < bed.tb.n)
        ):
            time.sleep(0.2)
        assert proc.poll() is None, f"ddptui ended before the Ctrl-C: {proc.communicate()[0]}"
        assert bed.probes_on_nodes(), "the allreduce never started"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out
    assert "Traceback" not in out
    bed.assert_nothing_left()
    assert bed.slurm.job_field(bed.job, "JobState") == "RUNNING"
