#!/usr/bin/env python3
"""`ddptui check --slurm` on N testbed nodes through srun, beside the SSH path on the
same nodes: wall time, exit code, peak login-side processes (ddptui and everything it
started: srun processes for the Slurm path), peak login-side RSS (the same tree).

Needs root, slurm-wlm and munged (scripts/setup --test). Usage:
    .venv/bin/python bench/bench_slurm.py [--nodes 32 --nodes 64] [--steps ssh,inventory,ping,env]
        [--no-ssh] [--json out.json]
Samples the process tree every 20 ms (/proc), so short-lived peaks may be missed by a
few ms; the srun count is exact per sample.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from slurmbed import SlurmCluster  # noqa: E402
from testbed import start_testbed  # noqa: E402


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _tree(root: int) -> list[int]:
    kids = _children()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += kids.get(pid, [])
    return out


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _is_srun(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"srun")
    except OSError:
        return False


def measure(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    peak = {"procs": 0, "srun": 0, "rss_kb": 0}
    started = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            pids = _tree(proc.pid)
            peak["procs"] = max(peak["procs"], len(pids))
            peak["srun"] = max(peak["srun"], sum(1 for p in pids if _is_srun(p)))
            peak["rss_kb"] = max(peak["rss_kb"], sum(_rss_kb(p) for p in pids))
            time.sleep(0.02)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out, _ = proc.communicate(timeout=600)
    took = time.monotonic() - started
    done.set()
    t.join()
    return {
        "rc": proc.returncode,
        "seconds": round(took, 2),
        "peak_procs": peak["procs"],
        "peak_srun": peak["srun"],
        "peak_rss_mb": round(peak["rss_kb"] / 1024, 1),
        "tail": out.decode(errors="replace").splitlines()[-3:],
    }


def run(n: int, steps: str, ssh_too: bool) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"bench-slurm-{n}-"))
    row: dict[str, Any] = {"nodes": n, "steps": steps}
    t0 = time.monotonic()
    tb = start_testbed(n, stem="ddbs", subnet_base="10.85", workdir=work)
    try:
        with SlurmCluster(tb) as slurm:
            row["bring_up_s"] = round(time.monotonic() - t0, 1)
            job = slurm.allocate(n)
            env = slurm.env | {"XDG_STATE_HOME": str(work / "state")}
            py = sys.executable
            row["srun"] = measure(
                [py, "-m", "ddptui", "check", "--slurm", job, "--python", py, "--steps", steps],
                env,
            )
            if ssh_too:
                cfg = tb.write_config()
                row["ssh"] = measure([py, "-m", "ddptui", "check", str(cfg), "--steps", steps], env)
    finally:
        tb.down()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, action="append")
    ap.add_argument("--steps", default="ssh,inventory,ping,env")
    ap.add_argument("--no-ssh", action="store_true")
    ap.add_argument("--json", dest="json_path")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_slurm needs root (namespace testbed)")
    rows = []
    for n in args.nodes or [32, 64]:
        row = run(n, args.steps, not args.no_ssh)
        rows.append(row)
        for path in ("srun", "ssh"):
            if path in row:
                r = row[path]
                print(
                    f"{n:4d} nodes  {path:4s}  rc {r['rc']}  {r['seconds']:6.1f} s  "
                    f"peak procs {r['peak_procs']:3d} (srun {r['peak_srun']:2d})  "
                    f"peak RSS {r['peak_rss_mb']:7.1f} MB",
                    flush=True,
                )
                if r["rc"] != 0:
                    print("   ", *r["tail"], sep="\n    ")
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
