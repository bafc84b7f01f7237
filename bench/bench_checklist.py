#!/usr/bin/env python3
"""Wall time of `ddptui check` on N testbed nodes, next to parallel-ssh running `hostname`.

Needs root (it brings up the namespace testbed from tests/testbed.py). Usage:
    .venv/bin/python bench/bench_checklist.py [--nodes 1,4,8,16,64] [--runs 5]
Prints a Markdown table (median of --runs runs each), with the testbed's bring-up time
and the machine's load average (the cores may be shared); the README quotes it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from testbed import Testbed, start_testbed  # noqa: E402

FIVE = "ssh,inventory,ping,port,env"


def timed(argv: list[str], ok: tuple[int, ...] = (0,)) -> float:
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    took = time.perf_counter() - started
    if proc.returncode not in ok:
        raise SystemExit(f"{argv[:4]}... exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return took


def pssh_argv(tb: Testbed) -> list[str]:
    tool = shutil.which("parallel-ssh") or shutil.which("pssh")
    if tool is None:
        raise SystemExit("parallel-ssh not found (Debian package pssh)")
    opts = (
        f"-F /dev/null -i {tb.client_key} -o UserKnownHostsFile={tb.known_hosts} "
        "-o StrictHostKeyChecking=yes -o BatchMode=yes -o GlobalKnownHostsFile=/dev/null"
    )
    hosts = [a for n in tb.nodes for a in ("-H", f"root@{n.ip}")]
    return [tool, *hosts, "-p", "32", "-x", opts, "-i", "hostname"]


def median_of(runs: int, argv: list[str]) -> float:
    timed(argv)  # warm-up: page cache, sshd's first fork
    return statistics.median(timed(argv) for _ in range(runs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="1,4,8,16,64")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    ddptui = [sys.executable, "-m", "ddptui", "check"]
    rows = []
    for n in [int(x) for x in args.nodes.split(",")]:
        work = Path(tempfile.mkdtemp(prefix="ddptui-bench-"))
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        tb = start_testbed(n, stem="ddpb", subnet_base="10.81", workdir=work)
        up_s = time.perf_counter() - t0
        try:
            cfg = tb.write_config(ssh={"max_concurrent_connects": 16})
            ssh_s = median_of(args.runs, [*ddptui, str(cfg), "--steps", "ssh"])
            five_s = median_of(args.runs, [*ddptui, str(cfg), "--steps", FIVE])
            pssh_s = median_of(args.runs, pssh_argv(tb))
        finally:
            tb.down()
            shutil.rmtree(work, ignore_errors=True)
        rows.append((n, ssh_s, five_s, pssh_s, up_s, load))
        print(
            f"  {n:>2} nodes: ssh {ssh_s:.2f}s  five steps {five_s:.2f}s  "
            f"parallel-ssh {pssh_s:.2f}s  testbed up {up_s:.2f}s  load {load:.1f}",
            file=sys.stderr,
        )
    print(
        f"| nodes | `check --steps ssh` | `check --steps {FIVE}` | parallel-ssh `hostname` "
        "| testbed bring-up | load average |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for n, a, b, c, up, load in rows:
        print(f"| {n} | {a:.2f} s | {b:.2f} s | {c:.2f} s | {up:.2f} s | {load:.1f} |")
    base = rows[0][1]
    last = rows[-1]
    print(
        f"\n`--steps ssh` on {last[0]} nodes / on {rows[0][0]}: {last[1] / base:.2f}x; "
        f"vs parallel-ssh on {last[0]}: {last[1] / last[3]:.2f}x "
        f"(median of {args.runs} runs, {Path('/proc/cpuinfo').read_text().count('processor')} "
        "cores)"
    )


if __name__ == "__main__":
    main()
