"""`ddptui diagnose --config C '*:GLOB'` on nodes that share the logs' filesystem: bytes
read and time, next to diagnosing the same files locally.

Brings up an N-node testbed (default 8; every node sees the host's filesystem, like an
NFS home), writes N rank logs of --size-mb (default 100) each with bench_diagnose's
generator (one of them with the planted failure), then times, in subprocesses:
  local:  ddptui diagnose DIR/rank0.log ... DIR/rankN.log
  shared: ddptui diagnose --config C '*:DIR/*.log' --max-mb (size + 16)
and reports what the shared run diagnosed (`data.bytes`), what the nodes' probes read
(`rchar` of each probe process: the reads plus the 2 x 4 KiB hashed per file and node),
and what reading every node's sighting would have cost (`data.bytes_seen`).

    sudo .venv/bin/python bench/bench_sharedfs.py [--nodes 8] [--size-mb 100] [--repeat 3]
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_diagnose import write_log  # noqa: E402
from testbed import start_testbed  # noqa: E402


def _timed(cmd: list[str], report: Path) -> tuple[float, dict[str, object], int, float]:
    """(wall seconds, report, exit code, CPU seconds of the ddptui process)."""
    c0 = os.times()
    t0 = time.monotonic()
    run = subprocess.run(cmd, capture_output=True, text=True, check=False)
    took = time.monotonic() - t0
    c1 = os.times()
    cpu = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
    if not report.exists():
        sys.exit(f"no report from {' '.join(cmd[:6])} ...: exit {run.returncode}\n{run.stderr[-2000:]}")
    return took, json.loads(report.read_text()), run.returncode, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--size-mb", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ddptui-bench-sharedfs-"))
    logs = work / "logs"
    logs.mkdir()
    t0 = time.monotonic()
    first = logs / "rank0.log"
    size = write_log(first, args.size_mb)
    for r in range(1, args.nodes):
        shutil.copyfile(first, logs / f"rank{r}.log")  # its own inode: a file of its own
    total = size * args.nodes
    print(f"wrote {args.nodes} x {size / 1e6:.0f} MB in {time.monotonic() - t0:.1f} s")
    tb = start_testbed(args.nodes, stem="sfsb", subnet_base="10.88", workdir=work / "tb")
    try:
        cfg = tb.write_config()
        files = [str(logs / f"rank{r}.log") for r in range(args.nodes)]
        py = [sys.executable, "-m", "ddptui", "diagnose"]
        local_cmd = [*py, *files, "--json", str(work / "local.json")]
        shared_cmd = [
            *py, "--config", str(cfg), f"*:{logs}/*.log", "--max-mb", str(args.size_mb + 16),
            "--json", str(work / "shared.json"),
        ]
        local_t, shared_t, local_cpu, login_cpu, node_cpu = [], [], [], [], []
        doc: dict[str, object] = {}
        for _ in range(args.repeat):  # interleaved: the machine's load hits both alike
            took, ldoc, lrc, cpu = _timed(local_cmd, work / "local.json")
            local_t.append(took)
            local_cpu.append(cpu)
            took, doc, src, cpu = _timed(shared_cmd, work / "shared.json")
            shared_t.append(took)
            login_cpu.append(cpu)
            node_cpu.append(doc["steps"][0]["data"]["node_read_cpu_s"])  # type: ignore[index]
        data = doc["steps"][0]["data"]  # type: ignore[index]
        node_read = sum(data["node_read_bytes"].values())
        first_l = (ldoc.get("first_failure") or {}).get("finding")  # type: ignore[union-attr]
        first_s = (doc.get("first_failure") or {}).get("finding")  # type: ignore[union-attr]
        lm, sm = statistics.median(local_t), statistics.median(shared_t)
        print(f"local : {total / 1e6:.0f} MB, median {lm:.1f} s ({', '.join(f'{t:.1f}' for t in local_t)}), "
              f"exit {lrc}, first cause {first_l}")
        print(f"shared: diagnosed {data['bytes'] / 1e6:.0f} MB; the nodes' probes read "
              f"{node_read / 1e6:.0f} MB; reading every sighting would be "
              f"{data['bytes_seen'] / 1e9:.2f} GB; median {sm:.1f} s "
              f"({', '.join(f'{t:.1f}' for t in shared_t)}), exit {src}, first cause {first_s}")
        busiest = statistics.median(max(c.values()) for c in node_cpu)
        nodes_all = statistics.median(sum(c.values()) for c in node_cpu)
        print(f"CPU: local {statistics.median(local_cpu):.1f} s; shared: login node "
              f"{statistics.median(login_cpu):.1f} s, nodes {nodes_all:.1f} s in all, "
              f"the busiest node {busiest:.1f} s")
        readers = sorted(f["read_on"] for f in data["files"])
        print(f"readers: {readers}")
        print(f"ratio shared/local: {sm / lm:.2f}; load average {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} cores")
        ok = first_l == first_s and data["bytes"] <= total * 1.01 and sm <= 1.5 * lm
        return 0 if ok else 1
    finally:
        tb.down()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
