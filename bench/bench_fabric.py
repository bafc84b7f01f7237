#!/usr/bin/env python3
"""Time of the `fabric` step at 8, 16 and 64 testbed nodes (gloo, CPU, one worker per
node), as a user runs it: `ddptui check CONFIG --steps ssh,fabric`, read from the JSON
report. Per size: the step's wall time, the workers' start-up (torch import and joining
the group, slowest node), the rounds and their median time, the pairs tested, and
whether a node at 50 Mbit/s (--slow-node) was named alone.

Every node of a testbed shares this machine's cores: at 64 nodes, 64 torch imports share
2 cores, so start-up dominates here; on a real cluster each node imports on its own.
Needs root. Usage:
    .venv/bin/python bench/bench_fabric.py [--nodes 8,16,64] [--slow-node] [--json P]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from testbed import start_testbed  # noqa: E402


def one(n: int, slow_node: bool, budget: float) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"bench-fabric-{n}-"))
    tb = start_testbed(n, stem="bfab", subnet_base="10.189", workdir=work)
    try:
        if slow_node:
            tb.slow_node(n // 2)
        cfg = tb.write_config(timeouts={"step": 60, "fabric": budget})
        report = work / "report.json"
        started = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "ddptui",
                "check",
                str(cfg),
                "--steps",
                "ssh,fabric",
                "--no-metrics",
                "--json",
                str(report),
            ],
            capture_output=True,
            text=True,
            timeout=budget + 120,
            check=False,
        )
        wall = time.monotonic() - started
        doc = json.loads(report.read_text())
        step = next(s for s in doc["steps"] if s["id"] == "fabric")
        data = step["data"]
        named = [(f["id"], f["nodes"]) for f in step["findings"] if f["id"].startswith("FABRIC-")]
        rounds = data.get("round_s") or []
        left = {node.name: tb.wait_quiet(node.index, 15) for node in tb.nodes}
        return {
            "nodes": n,
            "rc": proc.returncode,
            "check_s": round(wall, 1),
            "step_s": round(step["duration_s"], 1),
            "startup_s": data.get("startup_s"),
            "rounds": data.get("rounds"),
            "rounds_planned": data.get("rounds_planned"),
            "round_median_s": round(statistics.median(rounds), 2) if rounds else None,
            "pairs": len(data.get("pairs") or []),
            "reference_gbs": data.get("reference_gbs"),
            "named": named,
            "left_running": {k: v for k, v in left.items() if v},
        }
    finally:
        tb.down()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="8,16,64")
    ap.add_argument("--slow-node", action="store_true", help="node n/2 at 50 Mbit/s")
    ap.add_argument("--budget", type=float, default=600.0, help="timeouts.fabric")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = [one(int(n), args.slow_node, args.budget) for n in args.nodes.split(",")]
    print(
        f"{'nodes':>5} {'rc':>3} {'check s':>8} {'step s':>7} {'start s':>8} "
        f"{'rounds':>6} {'round s':>8} {'pairs':>6}  named"
    )
    for r in rows:
        print(
            f"{r['nodes']:>5} {r['rc']:>3} {r['check_s']:>8} {r['step_s']:>7} "
            f"{r['startup_s']!s:>8} {r['rounds']!s:>6} {r['round_median_s']!s:>8} "
            f"{r['pairs']:>6}  {r['named'] or '-'}"
            + (f"  LEFT RUNNING {r['left_running']}" if r["left_running"] else "")
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
