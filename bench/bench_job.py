#!/usr/bin/env python3
"""Time to a verdict: `ddptui job` on a hung job, from the command to the printed verdict.

3 nodes (default): a real gloo job started over SSH with torchrun, one rank in a long
sleep while the others wait in all_reduce. --nodes 64: a stand-in job per node (a
launcher named torchrun and one python worker, no torch: 64 torch processes do not fit
two cores), so the figure is ddptui's own cost (SSH fan-out, /proc, py-spy on 64 ranks).

Needs root. Usage:
    .venv/bin/python bench/bench_job.py [--nodes 3] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from testbed import Testbed  # noqa: E402

PY = sys.executable
TORCHRUN = str(Path(PY).parent / "torchrun")
HANG = """\
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(8)
def evaluate():
    time.sleep(3600)
step = 0
while True:
    step += 1
    if rank == 1 and step == 3:
        evaluate()
    dist.all_reduce(t)
    print(f"step {step}", flush=True)
    time.sleep(0.3)
"""
STAND_IN = """\
import os, subprocess, sys
rank, world = sys.argv[1], sys.argv[2]
env = dict(os.environ, RANK=rank, LOCAL_RANK="0", WORLD_SIZE=world, GROUP_RANK=rank,
           MASTER_ADDR="10.93.2.1", MASTER_PORT="29800", TORCHELASTIC_RUN_ID="bench")
code = "import time\\ndef evaluate():\\n    time.sleep(3600)\\n" + (
    "evaluate()" if rank == "1" else "while True: time.sleep(1)")
subprocess.Popen([sys.executable, "-c", code], env=env).wait()
"""


def start(tb: Testbed, work: Path, real: bool) -> None:
    (work / "train.py").write_text(HANG)
    (work / "torchrun").write_text(STAND_IN)
    for i in range(tb.n):
        if real:
            launch = (
                f"GLOO_SOCKET_IFNAME=eth0 nohup {shlex.quote(TORCHRUN)} --nnodes {tb.n} "
                f"--nproc-per-node 1 --node-rank {i} --master-addr {tb.nodes[0].ip} "
                f"--master-port 29800 train.py"
            )
        else:
            launch = f"nohup {shlex.quote(PY)} torchrun {i} {tb.n}"
        cmd = f"cd {shlex.quote(str(work))} || exit 1; {launch} > node{i}.log 2>&1 < /dev/null &"
        subprocess.run(tb.ssh_argv(i, cmd), check=True, timeout=60, capture_output=True)


def wait_hung(work: Path, n: int, real: bool) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if not real:
            time.sleep(5)
            return
        logs = [work / f"node{i}.log" for i in range(n)]
        if all(p.exists() and "step 2" in p.read_text(errors="replace") for p in logs):
            time.sleep(2)
            return
        time.sleep(0.5)
    raise SystemExit("the job did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--save", metavar="P", help="Keep the last report (paths made neutral) in P.")
    args = ap.parse_args()
    real = args.nodes <= 4
    work = Path(tempfile.mkdtemp(prefix="bench-job-"))
    tb = Testbed(args.nodes, prefix="jbb", subnet="10.93.2", workdir=work / "tb").up()
    try:
        start(tb, work, real)
        wait_hung(work, args.nodes, real)
        config = tb.write_config(work / "cluster.yaml")
        times, verdict = [], ""
        for _ in range(args.runs):
            out = work / "r.json"
            t0 = time.monotonic()
            subprocess.run(
                [PY, "-m", "ddptui", "job", str(config), "--json", str(out)],
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            times.append(time.monotonic() - t0)
            report = json.loads(out.read_text())
            verdict = (report.get("first_failure") or {}).get("summary") or report["job"][
                "headline"
            ]
        if args.save:
            text = out.read_text().replace(str(work), "/home/alice/jobs/02")
            text = text.replace(str(Path(PY).parent.parent), "/opt/venv")
            Path(args.save).write_text(text.replace(str(ROOT), "/opt/ddptui"))
        kind = "torchrun + gloo" if real else "stand-in jobs"
        print(f"{args.nodes} nodes ({kind}), {args.runs} runs of `ddptui job`:")
        print(
            f"  verdict in median {statistics.median(times):.1f} s "
            f"(min {min(times):.1f}, max {max(times):.1f})"
        )
        print(f"  verdict: {verdict[:300]}")
    finally:
        tb.down()


if __name__ == "__main__":
    main()
