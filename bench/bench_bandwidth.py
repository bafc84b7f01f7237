#!/usr/bin/env python3
"""ddptui's allreduce bandwidth next to a plain loop written the nccl-tests way, on the
same 3-node testbed, same sizes, same iterations, same world (gloo over the testbed's
veth links).

Each round runs `ddptui check --steps ssh,allreduce` (its sweep, read from the JSON
report's tables.allreduce.sizes) and then bench/plain_allreduce.py under plain torchrun
on every node (no ddptui, no TORCH_DISTRIBUTED_DEBUG). Rounds alternate the two (and
which goes first), so a busy neighbour on this shared machine hits both alike; per size
the best round of each is compared. Target: ddptui's busbw / the plain loop's >= 0.9.

Needs root. Usage:
    .venv/bin/python bench/bench_bandwidth.py [--rounds 3] [--nodes 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from testbed import Testbed  # noqa: E402

from ddptui.checklist.steps.allreduce import CPU_ITERS, CPU_SIZES  # noqa: E402

PLAIN = ROOT / "bench" / "plain_allreduce.py"
PLAIN_PORT = 29611  # not ddptui's MASTER_PORT, so the two never meet on a port


def report_path(tb: Testbed) -> Path:
    """Where ddptui_sweep() leaves the JSON report of its last run."""
    return tb.workdir / "bw-check.json"


def ddptui_sweep(tb: Testbed, timeout: float = 180) -> dict[int, float]:
    """busbw (GB/s) per size from one `ddptui check --steps ssh,allreduce`."""
    config = tb.write_config(timeouts={"step": 30, "allreduce": 120})
    out = report_path(tb)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddptui",
            "check",
            str(config),
            "--steps",
            "ssh,allreduce",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"ddptui check exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    sizes = json.loads(out.read_text())["tables"]["allreduce"]["sizes"]
    return {int(p["bytes"]): float(p["busbw_gbps"]) for p in sizes}


def plain_loop(
    tb: Testbed,
    sizes: Sequence[int] = CPU_SIZES,
    iters: Sequence[Sequence[int]] = CPU_ITERS,
    timeout: float = 180,
) -> dict[int, float]:
    """busbw (GB/s) per size from plain torchrun + plain_allreduce.py on every node."""
    spec = json.dumps({"sizes": list(sizes), "iters": [list(p) for p in iters], "device": "cpu"})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_", "NCCL_"))}
    env.update(GLOO_SOCKET_IFNAME="eth0", PYTHONUNBUFFERED="1")  # as ddptui's config sets
    procs = []
    for i in range(tb.n):
        argv = [
            tb.python, "-m", "torch.distributed.run", "--nnodes", str(tb.n),
            "--node-rank", str(i), "--nproc-per-node", "1",
            "--master-addr", tb.nodes[0].ip, "--master-port", str(PLAIN_PORT),
            str(PLAIN), spec,
        ]  # fmt: skip
        procs.append(
            subprocess.Popen(
                tb.nsenter_argv(i, argv),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
            )
        )
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    rows = [json.loads(ln[6:]) for ln in outputs[0].splitlines() if ln.startswith("PLAIN ")]
    if len(rows) != len(sizes) or any(p.returncode != 0 for p in procs):
        raise RuntimeError("plain loop failed:\n" + "\n---\n".join(outputs))
    return {int(r["bytes"]): float(r["busbw_gbps"]) for r in rows}


def compare(
    tb: Testbed, rounds: int, *, until: float | None = None
) -> dict[int, tuple[float, float]]:
    """Per size: (ddptui's best busbw, the plain loop's best) over alternating rounds.
    With `until`, stop as soon as the largest size reaches that ratio (tests: short)."""
    best: dict[int, tuple[float, float]] = {}
    for r in range(rounds):
        # Alternate which goes first, so a trend in the machine's load favours neither.
        if r % 2 == 0:
            ours, plain = ddptui_sweep(tb), plain_loop(tb)
        else:
            plain, ours = plain_loop(tb), ddptui_sweep(tb)
        for size in sorted(set(ours) & set(plain)):
            a, b = best.get(size, (0.0, 0.0))
            best[size] = (max(a, ours[size]), max(b, plain[size]))
        top = max(best)
        print(
            f"round {r + 1}: largest size ddptui {ours.get(top, 0):.3f} GB/s, "
            f"plain {plain.get(top, 0):.3f} GB/s",
            flush=True,
        )
        if until is not None and best[top][0] >= until * best[top][1]:
            break
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bw-bench-") as work:
        tb = Testbed(args.nodes, prefix="bw", subnet="10.95.1", workdir=Path(work)).up()
        try:
            best = compare(tb, args.rounds)
        finally:
            tb.down()
    print(f"\n{args.nodes} nodes x 1 rank, gloo, best of {args.rounds} alternating rounds")
    print("| size | ddptui busbw GB/s | plain loop busbw GB/s | ratio |")
    print("|---|---|---|---|")
    for size, (ours, plain) in sorted(best.items()):
        print(f"| {size >> 10} KiB | {ours:.3f} | {plain:.3f} | {ours / plain:.2f} |")
    top = max(best)
    ratio = best[top][0] / best[top][1]
    print(f"\nlargest size ({top >> 20} MiB): ratio {ratio:.2f} (target >= 0.9)")
    return 0 if ratio >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
