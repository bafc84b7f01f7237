"""`ddptui diagnose --config C '*:GLOB'` on nodes that share the logs' filesystem: bytes
read and time, next to diagnosing the same files locally.

Brings up an N-node testbed (default 8; every node sees the host's filesystem, like an
NFS home), writes N rank logs of --size-mb (default 100) each with bench_diagnose's
generator (one of them with the planted failure), then times, in subprocesses:
  local:  ddptui diagnose DIR/rank0.log ... DIR/rankN.log
  shared: ddptui diagnose --config C '*:DIR/*.log' --max-mb (size + 16)
and reports what the shared run diagnosed (`data.bytes`), what the nodes' probes read
(`rchar` of each probe process: the reads plus the 2 x 4 KiB hashed per file and node),
what they sent back over SSH (`data.node_sent_bytes`: only the lines the diagnosis looks
at, filtered on the node), and what reading every node's sighting would have cost
(`data.bytes_seen`).  Local and shared runs alternate, so the machine's load (other
work on it) hits both alike; the load average after each pair is printed.

    sudo .venv/bin/python bench/bench_sharedfs.py [--nodes 8] [--size-mb 100] [--repeat 3]
        [--slurm] [--dense]

--slurm reads through a real Slurm on the testbed (tests/slurmbed.py: slurmctld and one
slurmd per node, a job holding every node): `diagnose --slurm JOB '*:DIR/*.log'`, the
probes reaching the nodes with `srun --overlap`.  --dense writes logs in which every
line holds a prefilter trigger, the worst case for filtering on the node.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_diagnose import write_log  # noqa: E402
from testbed import start_testbed  # noqa: E402


def _timed(
    cmd: list[str], report: Path, env: dict[str, str] | None = None
) -> tuple[float, dict[str, Any], int, float]:
    """(wall seconds, report, exit code, CPU seconds of the ddptui process and its
    children: with --slurm, the srun clients on the login node too)."""
    c0 = os.times()
    t0 = time.monotonic()
    run = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    took = time.monotonic() - t0
    c1 = os.times()
    cpu = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
    if not report.exists():
        sys.exit(f"no report from {' '.join(cmd[:6])} ...: exit {run.returncode}\n{run.stderr[-2000:]}")
    return took, json.loads(report.read_text()), run.returncode, cpu


def write_dense(path: Path, size_mb: int) -> int:
    """The worst case for filtering on the node: every line holds a trigger (a warning
    printed at every step), so every line is sent; nothing is wrong."""
    line = ("[rank0]:[W1125 10:{m:02d}:{s:02d}.{us:06d} ProcessGroupNCCL.cpp:1016] Warning: "
            "TORCH_NCCL_ASYNC_ERROR_HANDLING is deprecated in favor of TORCH_NCCL_ERROR_HANDLING "
            "(function operator()) step {n}\n")
    with path.open("w") as fh:
        n = written = 0
        while written < size_mb << 20:
            text = "".join(line.format(m=(k // 60) % 60, s=k % 60, us=k * 7 % 10**6, n=k)
                           for k in range(n, n + 1000))
            fh.write(text)
            written += len(text)
            n += 1000
    return path.stat().st_size


def _findings(doc: dict[str, Any]) -> list[tuple[str, list[str]]]:
    return [(f["id"], f["evidence"]) for f in doc["steps"][0]["findings"]]


@dataclass
class Runs:
    """The alternating runs' figures."""

    local_t: list[float] = field(default_factory=list)
    shared_t: list[float] = field(default_factory=list)
    local_cpu: list[float] = field(default_factory=list)
    login_cpu: list[float] = field(default_factory=list)
    node_cpu: list[dict[str, float]] = field(default_factory=list)
    node_sent: list[dict[str, int]] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)
    ldoc: dict[str, Any] = field(default_factory=dict)
    doc: dict[str, Any] = field(default_factory=dict)
    rc: tuple[int, int] = (0, 0)

    def add_local(self, took: float, doc: dict[str, Any], rc: int, cpu: float) -> None:
        self.local_t.append(took)
        self.local_cpu.append(cpu)
        self.ldoc, self.rc = doc, (rc, self.rc[1])

    def add_shared(self, took: float, doc: dict[str, Any], rc: int, cpu: float) -> None:
        self.shared_t.append(took)
        self.login_cpu.append(cpu)
        data = doc["steps"][0]["data"]
        self.node_cpu.append(data["node_read_cpu_s"])
        self.node_sent.append(data.get("node_sent_bytes") or {})
        self.doc, self.rc = doc, (self.rc[0], rc)

    def report(self, total: int) -> tuple[str | None, str | None, dict[str, Any]]:
        data = self.doc["steps"][0]["data"]
        node_read = sum(data["node_read_bytes"].values())
        sent = statistics.median(sum(d.values()) for d in self.node_sent)
        first_l = (self.ldoc.get("first_failure") or {}).get("finding")
        first_s = (self.doc.get("first_failure") or {}).get("finding")
        lm, sm = statistics.median(self.local_t), statistics.median(self.shared_t)
        print(f"local : {total / 1e6:.0f} MB, median {lm:.1f} s ({', '.join(f'{t:.1f}' for t in self.local_t)}), "
              f"exit {self.rc[0]}, first cause {first_l}")
        print(f"shared: diagnosed {data['bytes'] / 1e6:.0f} MB; the nodes' probes read "
              f"{node_read / 1e6:.0f} MB; reading every sighting would be "
              f"{data['bytes_seen'] / 1e9:.2f} GB; the nodes sent back {sent / 1e3:.1f} kB; "
              f"median {sm:.1f} s ({', '.join(f'{t:.1f}' for t in self.shared_t)}), "
              f"exit {self.rc[1]}, first cause {first_s}")
        same = _findings(self.doc) == _findings(self.ldoc)
        print(f"findings and evidence the same both ways: {same}")
        busiest = statistics.median(max(c.values()) for c in self.node_cpu)
        nodes_all = statistics.median(sum(c.values()) for c in self.node_cpu)
        print(f"CPU: local {statistics.median(self.local_cpu):.1f} s; shared: login node "
              f"{statistics.median(self.login_cpu):.1f} s, nodes {nodes_all:.1f} s in all, "
              f"the busiest node {busiest:.1f} s")
        print(f"readers: {sorted(f['read_on'] for f in data['files'])}")
        ratios = [x / y for x, y in zip(self.shared_t, self.local_t, strict=True)]
        print(f"ratio shared/local: {sm / lm:.2f} (per pair: {', '.join(f'{r:.2f}' for r in ratios)}); "
              f"load average after each pair: {', '.join(f'{x:.1f}' for x in self.loads)} "
              f"on {os.cpu_count()} cores")
        return first_l, first_s if same else f"{first_s} (other findings)", data


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--size-mb", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dense", action="store_true",
                    help="logs in which every line holds a trigger (the worst case: all sent)")
    ap.add_argument("--slurm", action="store_true",
                    help="read through a real Slurm (srun --overlap into one job) instead of SSH")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ddptui-bench-sharedfs-"))
    logs = work / "logs"
    logs.mkdir()
    t0 = time.monotonic()
    first = logs / "rank0.log"
    size = write_dense(first, args.size_mb) if args.dense else write_log(first, args.size_mb)
    for r in range(1, args.nodes):
        shutil.copyfile(first, logs / f"rank{r}.log")  # its own inode: a file of its own
    total = size * args.nodes
    print(f"wrote {args.nodes} x {size / 1e6:.0f} MB in {time.monotonic() - t0:.1f} s")
    tb = start_testbed(args.nodes, stem="sfsb", subnet_base="10.88", workdir=work / "tb")
    slurm = None
    try:
        cfg = tb.write_config()
        files = [str(logs / f"rank{r}.log") for r in range(args.nodes)]
        py = [sys.executable, "-m", "ddptui", "diagnose"]
        local_cmd = [*py, *files, "--json", str(work / "local.json")]
        where, env = ["--config", str(cfg)], None
        if args.slurm:
            from slurmbed import SlurmCluster

            slurm = SlurmCluster(tb).start()
            where, env = ["--slurm", slurm.allocate(args.nodes)], slurm.env
        shared_cmd = [
            *py, *where, f"*:{logs}/*.log", "--max-mb", str(args.size_mb + 16),
            "--json", str(work / "shared.json"),
        ]
        runs = Runs()
        for _ in range(args.repeat):  # interleaved: the machine's load hits both alike
            runs.add_local(*_timed(local_cmd, work / "local.json"))
            runs.add_shared(*_timed(shared_cmd, work / "shared.json", env))
            runs.loads.append(os.getloadavg()[0])
        first_l, first_s, data = runs.report(total)
        lm, sm = statistics.median(runs.local_t), statistics.median(runs.shared_t)
        ok = first_l == first_s and data["bytes"] <= total * 1.01 and sm <= 1.5 * lm
        return 0 if ok else 1
    finally:
        if slurm is not None:
            slurm.stop()
        tb.down()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
