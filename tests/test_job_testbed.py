"""`ddptui job` on real gloo jobs started over SSH on the testbed, as users start them:
a rank that took another code path while the others wait in all_reduce, a rank that
dies of a CUDA OOM message, a healthy loop. ddptui must name the right rank, node,
function and cause, never call the healthy job stuck, leave every job process as it
was (same pids, still running, still progressing) and leave nothing behind."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from testbed import Testbed, is_alive, kill_and_wait

pytestmark = pytest.mark.testbed

PY = sys.executable
TORCHRUN = str(Path(PY).parent / "torchrun")
VERDICT_LIMIT_S = 15.0

HANG = """\
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(8)
def evaluate():
    time.sleep(3600)  # this rank took another code path
step = 0
while True:
    step += 1
    if rank == 1 and step == 3:
        evaluate()
    dist.all_reduce(t)
    print(f"step {step}", flush=True)
    time.sleep(0.3)
"""

SLOW = """\
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(8)
def slow_step():
    time.sleep(1.5)  # this rank's step takes longer (a slower GPU, a busy data loader)
step = 0
while True:
    step += 1
    if rank == 1:
        slow_step()
    dist.all_reduce(t)  # the others wait here for it, every step
    print(f"step {step}", flush=True)
    time.sleep(0.05)
"""

LOOP = """\
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(1 << 16)
step = 0
while True:
    step += 1
    if rank == 2 and os.path.exists("crash-now"):
        raise torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity "
            "of 79.15 GiB of which 141.25 MiB is free."
        )
    dist.all_reduce(t)
    print(f"step {step}", flush=True)
    time.sleep(0.2)
"""


@pytest.fixture(scope="module")
def tb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    from conftest import _require_testbed

    _require_testbed()
    bed = Testbed(3, prefix="jb", subnet="10.93.1", workdir=tmp_path_factory.mktemp("jb"))
    bed.up()
    try:
        yield bed
    finally:
        bed.down()


def launch(tb: Testbed, workdir: Path, script: str, port: int) -> list[Path]:
    """torchrun on every node over SSH, detached, output to a file, as users do."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "train.py").write_text(script)
    logs = []
    for i in range(tb.n):
        log = workdir / f"node{i}.log"
        logs.append(log)
        cmd = (
            f"cd {shlex.quote(str(workdir))} || exit 1; GLOO_SOCKET_IFNAME=eth0 HF_TOKEN=hf_"
            f"{'x' * 34} nohup {shlex.quote(TORCHRUN)} --nnodes 3 --nproc-per-node 1 "
            f"--node-rank {i} --master-addr {tb.nodes[0].ip} --master-port {port} "
            f"train.py > {shlex.quote(str(log))} 2>&1 < /dev/null &"
        )
        subprocess.run(tb.ssh_argv(i, cmd), check=True, timeout=30, capture_output=True)
    return logs


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def steps(log: Path) -> int:
    text = log.read_text(errors="replace") if log.exists() else ""
    return sum(1 for line in text.splitlines() if line.startswith("step "))


def snapshot(tb: Testbed) -> dict[int, list[int]]:
    return {i: tb.pids(i) for i in range(tb.n)}


def settled(tb: Testbed) -> dict[int, list[int]]:
    """The nodes' processes once the SSH sessions that started the job have gone."""
    last = snapshot(tb)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = snapshot(tb)
        if now == last:
            return now
        last = now
    raise AssertionError(f"the nodes' processes never settled: {last}")


def ddptui_job(tb: Testbed, tmp: Path, *args: str) -> tuple[int, dict[str, Any], str, float]:
    config = tb.write_config(tmp / "cluster.yaml")
    out = tmp / f"job-{time.monotonic_ns()}.json"
    started = time.monotonic()
    proc = subprocess.run(
        [PY, "-m", "ddptui", "job", str(config), "--json", str(out), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "XDG_STATE_HOME": str(tmp / "state")},
    )
    took = time.monotonic() - started
    report = json.loads(out.read_text()) if out.exists() else {}
    return proc.returncode, report, proc.stdout + proc.stderr, took


def stop_job(tb: Testbed) -> None:
    for i in range(tb.n):
        left = kill_and_wait(tb.pids(i))
        assert not left, f"node{i}: could not stop {left}"


def assert_untouched(tb: Testbed, before: dict[int, list[int]]) -> None:
    """The job's processes are exactly the ones before (none stopped, none added: nothing
    of ddptui's left), and none is stopped (T) by a tracer."""
    wait_for(lambda: snapshot(tb) == before, 10, "the nodes to hold only the job again")
    for pids in before.values():
        for pid in pids:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
            assert state not in ("T", "t", "Z"), f"pid {pid} is in state {state}"


def test_hung_rank_named_with_its_function_and_the_others_in_all_reduce(
    tb: Testbed, tmp_path: Path
) -> None:
    logs = launch(tb, tmp_path / "hang", HANG, 29611)
    try:
        wait_for(lambda: all(steps(log) >= 2 for log in logs), 60, "two steps on every node")
        time.sleep(2.0)  # rank 1 is in evaluate(), the others wait in all_reduce
        before = settled(tb)
        assert all(before.values()), before
        rc, report, out, took = ddptui_job(tb, tmp_path)
        assert rc == 1, out
        ff = report["first_failure"]
        assert ff["step"] == "job"
        assert ff["finding"] == "JOB-HUNG-DIVERGED", out
        assert ff["rank"] == 1 and ff["nodes"] == ["node1"], ff
        assert ff["where"] == "train.py:6 in evaluate", ff
        assert "ranks 0, 2 (node0, node2) wait in `all_reduce` at `train.py:12`" in ff["summary"]
        assert "rank 1 (node1) is in `evaluate`" in ff["summary"]
        assert took < VERDICT_LIMIT_S, f"verdict took {took:.1f} s"
        assert "hf_" + "x" * 34 not in json.dumps(report), "a secret left the node"
        assert_untouched(tb, before)
        assert all(is_alive(p) for pids in before.values() for p in pids)
    finally:
        stop_job(tb)


def test_slow_rank_is_slow_not_hung_with_its_rank_node_and_function(
    tb: Testbed, tmp_path: Path
) -> None:
    """The pair of the hung test above: the same shape (rank 1 in its own function, the
    others in all_reduce), but rank 1 comes back every step, so the job moves."""
    logs = launch(tb, tmp_path / "slow", SLOW, 29613)
    try:
        wait_for(lambda: all(steps(log) >= 2 for log in logs), 60, "two steps on every node")
        before = settled(tb)
        rc, report, out, took = ddptui_job(tb, tmp_path)
        assert rc == 1, out
        ff = report["first_failure"]
        assert ff["finding"] == "JOB-SLOW-RANK", out
        assert report["steps"][0]["data"]["state"] == "slow", out
        assert ff["rank"] == 1 and ff["nodes"] == ["node1"], ff
        assert ff["where"] == "train.py:6 in slow_step", ff
        assert "rank 1 (node1) computes in `slow_step`" in ff["summary"], ff["summary"]
        assert "all_reduce" in ff["summary"]
        assert took < VERDICT_LIMIT_S, f"verdict took {took:.1f} s"
        assert_untouched(tb, before)
    finally:
        stop_job(tb)


def test_healthy_job_is_never_stuck_then_crash_names_the_oom_rank(
    tb: Testbed, tmp_path: Path
) -> None:
    work = tmp_path / "loop"
    logs = launch(tb, work, LOOP, 29612)
    try:
        wait_for(lambda: all(steps(log) >= 3 for log in logs), 60, "three steps on every node")
        before = settled(tb)
        for _ in range(2):
            rc, report, out, took = ddptui_job(tb, tmp_path)
            job = report["job"]
            assert job["state"] == "healthy", out
            assert rc == 0, out
            assert report["first_failure"] is None
            assert not any(f["id"].startswith("JOB-HUNG") for f in report["steps"][0]["findings"])
            assert sorted(r["rank"] for r in job["ranks"]) == [0, 1, 2]
            assert took < VERDICT_LIMIT_S, f"verdict took {took:.1f} s"
        assert_untouched(tb, before)
        progress = [steps(log) for log in logs]
        wait_for(
            lambda: all(steps(log) > n + 2 for log, n in zip(logs, progress, strict=True)),
            20,
            "the job to keep progressing after ddptui looked",
        )

        (work / "crash-now").write_text("")  # rank 2 raises a CUDA OOM and exits
        wait_for(lambda: not any(snapshot(tb).values()), 60, "the job to end on every node")
        rc, report, out, _ = ddptui_job(tb, tmp_path)  # no --log: the remembered paths
        assert rc == 1, out
        ff = report["first_failure"]
        assert ff["finding"] == "JOB-CRASHED", out
        assert ff["rank"] == 2 and ff["nodes"] == ["node2"], ff
        assert "OutOfMemoryError: CUDA out of memory" in ff["summary"]
        assert "Connection closed by peer" in ff["summary"] or "then failed" in ff["summary"]
        assert "Reduce the per-GPU batch size" in ff["fix"]  # RANK-CUDA-OOM's fix
        timelines = report["job"]["timelines"]  # one per rank, read with the knowledge base
        assert timelines["2"]["finding"] == "RANK-CUDA-OOM" and timelines["2"]["node"] == "node2"
        assert any("Connection closed by peer" in ln for ln in timelines["0"]["lines"])
        assert not any(snapshot(tb).values()), "ddptui left something on a node"

        given = [f"node{i}:{log}" for i, log in enumerate(logs)]
        rc, report, out, _ = ddptui_job(tb, tmp_path, *(a for g in given for a in ("--log", g)))
        assert report["first_failure"]["finding"] == "JOB-CRASHED", out
        assert report["first_failure"]["rank"] == 2
    finally:
        stop_job(tb)


# A stand-in launcher for the discovery tests: its name makes it a torchrun agent, and
# its child carries the rank environment torchrun gives a worker (cheaper than torch).
FAKE_TORCHRUN = """\
import os, subprocess, sys
tag, port, rank = sys.argv[2], sys.argv[4], sys.argv[6]
env = dict(os.environ, RANK=rank, LOCAL_RANK="0", WORLD_SIZE="3", GROUP_RANK=rank,
           MASTER_ADDR="10.93.1.1", MASTER_PORT=port, TORCHELASTIC_RUN_ID=tag)
subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(1)"], env=env).wait()
"""
SECRET = "hf_" + "s3cr3t" * 6


def fake_job(tb: Testbed, work: Path, tag: str, port: int, nodes: list[int]) -> None:
    launcher = work / "bin" / "torchrun"
    launcher.parent.mkdir(parents=True, exist_ok=True)
    launcher.write_text(FAKE_TORCHRUN)
    for i in nodes:
        cmd = (
            f"HF_TOKEN={SECRET} nohup {shlex.quote(PY)} {shlex.quote(str(launcher))} --tag {tag} "
            f"--port {port} --rank {i} --hf-token {SECRET} > /dev/null 2>&1 < /dev/null &"
        )
        subprocess.run(tb.ssh_argv(i, cmd), check=True, timeout=30, capture_output=True)
    wait_for(lambda: all(len(tb.pids(i)) >= 2 for i in nodes), 20, f"job {tag} to start")


def test_no_job_found_says_what_it_looked_for(tb: Testbed, tmp_path: Path) -> None:
    rc, report, out, _ = ddptui_job(tb, tmp_path)
    assert rc == 2, out
    ff = report["first_failure"]
    assert ff["finding"] == "JOB-NOT-FOUND"
    assert "torchrun" in out and "--log" in ff["fix"]
    assert "Traceback" not in out


def test_two_jobs_ambiguous_until_match_picks_one(tb: Testbed, tmp_path: Path) -> None:
    try:
        fake_job(tb, tmp_path, "alpha", 29701, [0, 1, 2])
        time.sleep(1.1)  # start times are in clock ticks: make "newest" unambiguous
        fake_job(tb, tmp_path, "beta", 29702, [1])
        before = settled(tb)
        rc, report, out, _ = ddptui_job(tb, tmp_path)
        assert rc == 2, out
        assert report["first_failure"]["finding"] == "JOB-AMBIGUOUS"
        cands = report["job"]["candidates"]
        assert {c["node"] for c in cands} == {"node0", "node1", "node2"}
        assert sum("beta" in c["cmd"] for c in cands) == 1
        assert "--match" in report["first_failure"]["fix"]

        rc, report, out, _ = ddptui_job(tb, tmp_path, "--match", "tag alpha")
        assert report["job"]["state"] != "ambiguous", out
        assert sorted(r["rank"] for r in report["job"]["ranks"]) == [0, 1, 2]
        text = json.dumps(report)
        assert SECRET not in text and SECRET not in out, "a secret left a node"
        assert "<redacted:" in text

        rc, report, out, _ = ddptui_job(tb, tmp_path, "--match", "tag beta")
        ids = [f["id"] for f in report["steps"][0]["findings"]]
        assert report["first_failure"]["finding"] == "JOB-RANKS-MISSING", out
        assert ids.count("JOB-NODE-NO-JOB") == 2
        assert_untouched(tb, before)
    finally:
        stop_job(tb)


def test_unreachable_node_bad_regex_and_missing_pyspy(tb: Testbed, tmp_path: Path) -> None:
    try:
        fake_job(tb, tmp_path, "gamma", 29703, [0, 1, 2])
        _, report, out, _ = ddptui_job(tb, tmp_path, "--py-spy", "/nonexistent/py-spy")
        ids = [f["id"] for f in report["steps"][0]["findings"]]
        assert ids.count("JOB-STACKS-NO-PYSPY") == 3, out
        assert "/nonexistent/py-spy" in out

        config = tb.config_dict()
        config["nodes"].append({"host": "10.93.1.99", "name": "ghost", "user": "root"})
        path = tmp_path / "ghost.yaml"
        path.write_text(json.dumps(config))
        proc = subprocess.run(
            [PY, "-m", "ddptui", "job", str(path), "--json", "-"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")},
        )
        report = json.loads(proc.stdout)
        ghost = [f for f in report["steps"][0]["findings"] if f["id"] == "JOB-NODE-UNREACHABLE"]
        assert [f["nodes"] for f in ghost] == [["ghost"]], proc.stderr
        assert sorted(r["rank"] for r in report["job"]["ranks"]) == [0, 1, 2]

        proc = subprocess.run(
            [PY, "-m", "ddptui", "job", str(path), "--match", "(unclosed"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2 and "--match" in proc.stderr
        assert "Traceback" not in proc.stderr
    finally:
        stop_job(tb)


def test_ctrl_c_mid_look_exits_130_and_leaves_nothing(tb: Testbed, tmp_path: Path) -> None:
    import signal

    try:
        fake_job(tb, tmp_path, "delta", 29704, [0, 1, 2])
        before = settled(tb)
        config = tb.write_config(tmp_path / "cluster.yaml")
        proc = subprocess.Popen(
            [PY, "-m", "ddptui", "job", str(config), "--window", "20"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")},
        )
        # Interrupt once the probes run on every node (more than the job's processes).
        wait_for(lambda: all(len(tb.pids(i)) > len(before[i]) for i in range(3)), 30, "probes")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 130, out
        assert "Traceback" not in out
        assert_untouched(tb, before)
    finally:
        stop_job(tb)
