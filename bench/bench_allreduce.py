#!/usr/bin/env python3
"""Time from start to a diagnosed failure: `ddptui check --steps ssh,allreduce` on a
3-node testbed per fault, next to raw torchrun on the same fault with torch's default
timeouts (the way people find out today).

Needs root. Usage:
    .venv/bin/python bench/bench_allreduce.py [--runs 3] [--raw] [--raw-cap 1000]
--raw also runs plain torchrun once per fault (slow: torch waits 900-1800 s), capped at
--raw-cap seconds per fault; it reports when the first node failed and when all had.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from testbed import Testbed, start_testbed  # noqa: E402

RAW_SCRIPT = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(4) * (dist.get_rank() + 1)
dist.all_reduce(t)
print("sum", t.tolist(), flush=True)
"""


def block_master_port(tb: Testbed) -> dict[int, dict[str, str]]:
    tb.block_port(0)
    return {}


def block_peers(tb: Testbed) -> dict[int, dict[str, str]]:
    tb.block_peer(1, src=2)
    return {}


def missing_interface(tb: Testbed) -> dict[int, dict[str, str]]:
    return {1: {"GLOO_SOCKET_IFNAME": "eth9"}}


FAULTS: dict[str, Callable[[Testbed], dict[int, dict[str, str]]]] = {
    "master port blocked (DROP)": block_master_port,
    "peers blocked (node2 -> node1)": block_peers,
    "GLOO_SOCKET_IFNAME=eth9 on node1": missing_interface,
}


def ddptui_run(tb: Testbed, node_env: dict[int, dict[str, str]], work: Path) -> tuple[float, str]:
    nodes = tb.config_dict()["nodes"]
    for i, env in node_env.items():
        nodes[i]["env"] = env
    cfg = tb.write_config(work / "cluster.yaml", nodes=nodes)
    report = work / "report.json"
    started = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddptui",
            "check",
            str(cfg),
            "--steps",
            "ssh,allreduce",
            "--json",
            str(report),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    took = time.perf_counter() - started
    import json

    first = json.loads(report.read_text())["first_failure"] if report.exists() else None
    what = (
        f"{first['finding']} on {', '.join(first['nodes'])}" if first else f"rc={proc.returncode}"
    )
    return took, what


def raw_run(tb: Testbed, node_env: dict[int, dict[str, str]], cap: float) -> tuple[float, float]:
    """(first node failed, all nodes done) in seconds; cap means still running."""
    procs = []
    started = time.perf_counter()
    for i in range(len(tb.nodes)):
        env = {"GLOO_SOCKET_IFNAME": "eth0", **node_env.get(i, {})}
        argv = [
            "env",
            *(f"{k}={v}" for k, v in env.items()),
            tb.python,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            str(len(tb.nodes)),
            "--node-rank",
            str(i),
            "--master-addr",
            tb.nodes[0].ip,
            "--master-port",
            "29500",
            "--nproc-per-node",
            "1",
            "--no-python",
            tb.python,
            "-c",
            RAW_SCRIPT,
        ]
        procs.append(
            subprocess.Popen(
                tb.nsenter_argv(i, argv),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
    first = None
    try:
        while time.perf_counter() - started < cap:
            codes = [p.poll() for p in procs]
            if first is None and any(c not in (None, 0) for c in codes):
                first = time.perf_counter() - started
            if all(c is not None for c in codes):
                break
            time.sleep(0.5)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    done = time.perf_counter() - started
    return (first if first is not None else done), done


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks: testbeds go down


def main() -> None:
    import signal

    signal.signal(signal.SIGTERM, _stop)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--raw", action="store_true")
    ap.add_argument("--raw-cap", type=float, default=1000.0)
    args = ap.parse_args()
    measured: dict[str, tuple[float, str]] = {}
    raws: dict[str, tuple[float, float]] = {}
    # All ddptui runs first (they need the CPU), then the slow raw runs (mostly waiting).
    for phase in ("ddptui", "raw"):
        if phase == "raw" and not args.raw:
            break
        for name, fault in FAULTS.items():
            work = Path(tempfile.mkdtemp(prefix="ddptui-bench-ar-"))
            tb = start_testbed(3, stem="ddpa", subnet_base="10.82", workdir=work)
            try:
                node_env = fault(tb)
                if phase == "ddptui":
                    runs = [ddptui_run(tb, node_env, work) for _ in range(args.runs)]
                    measured[name] = (statistics.median(t for t, _ in runs), runs[-1][1])
                    print(
                        f"  {name}: ddptui {measured[name][0]:.1f}s ({measured[name][1]})",
                        file=sys.stderr,
                        flush=True,
                    )
                else:
                    raws[name] = raw_run(tb, node_env, args.raw_cap)
                    print(f"  {name}: raw {raws[name]}", file=sys.stderr, flush=True)
            finally:
                tb.down()
                shutil.rmtree(work, ignore_errors=True)
    rows = [(name, *measured[name], raws.get(name)) for name in FAULTS]
    print(
        "| fault | ddptui `check --steps ssh,allreduce` | diagnosis | raw torchrun: first node "
        "fails | raw torchrun: all nodes done |"
    )
    print("|---|---:|---|---:|---:|")
    for name, t, what, raw in rows:
        if raw is None:
            r1 = r2 = "not run"
        else:
            r1 = f"{raw[0]:.0f} s" + (" (cap)" if raw[0] >= args.raw_cap else "")
            r2 = f"{raw[1]:.0f} s" + (" (still running at cap)" if raw[1] >= args.raw_cap else "")
        print(f"| {name} | {t:.1f} s | {what} | {r1} | {r2} |")
    print(
        f"\nmedian of {args.runs} ddptui runs; timeouts.allreduce = 60 (default); 3 nodes x 1 "
        "process, gloo on CPU, 2 cores shared by all nodes"
    )


if __name__ == "__main__":
    main()
