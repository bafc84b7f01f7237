#!/usr/bin/env python3
"""ddptui's allreduce bandwidth next to a plain loop written the nccl-tests way, on the
same 3-node testbed, same sizes, same iterations, same world (gloo over the testbed's
veth links).

Each round runs `ddptui check --steps ssh,allreduce` (its sweep, read from the JSON
report's tables.allreduce.sizes) and then bench/plain_allreduce.py under plain torchrun
on every node, started over SSH as ddptui starts its ranks (no ddptui, no
TORCH_DISTRIBUTED_DEBUG). Rounds alternate the two (and
which goes first), so a busy neighbour on this shared machine hits both alike; per size
the headline is the median over rounds of ddptui's busbw / the loop's in that round. Target: ddptui's busbw / the plain
loop's >= 0.9 at the largest size.

Needs root. Usage:
    .venv/bin/python bench/bench_bandwidth.py [--rounds 5] [--nodes 3]
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
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


def sweep_iters(tb: Testbed) -> list[list[int]]:
    """[warm-up, timed] per size, as ddptui's last sweep ran them (rank 0's; all agree)."""
    steps = json.loads(report_path(tb).read_text())["steps"]
    ar = next(s for s in steps if s["id"] == "allreduce")
    return [[int(p["warmup"]), int(p["iters"])] for p in ar["data"]["bandwidth"][0]["sweep"]]


def plain_loop(
    tb: Testbed,
    sizes: Sequence[int] = CPU_SIZES,
    iters: Sequence[Sequence[int]] = CPU_ITERS,
    timeout: float = 180,
) -> dict[int, float]:
    """busbw (GB/s) per size from plain torchrun + plain_allreduce.py on every node."""
    spec = json.dumps({"sizes": list(sizes), "iters": [list(p) for p in iters], "device": "cpu"})
    procs = []
    for i in range(tb.n):
        # Over SSH, as ddptui starts its ranks: each rank then lives in its own login
        # session, so the kernel schedules it as it schedules ddptui's (autogroups).
        command = shlex.join(
            [
                "env", "GLOO_SOCKET_IFNAME=eth0", "PYTHONUNBUFFERED=1",  # as ddptui's config
                tb.python, "-m", "torch.distributed.run", "--nnodes", str(tb.n),
                "--node-rank", str(i), "--nproc-per-node", "1",
                "--master-addr", tb.nodes[0].ip, "--master-port", str(PLAIN_PORT),
                str(PLAIN), spec,
            ]
        )  # fmt: skip
        procs.append(
            subprocess.Popen(
                tb.ssh_argv(i, command),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
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


Rounds = dict[int, tuple[list[float], list[float]]]  # size: (ddptui's busbw, the loop's)


def compare(tb: Testbed, rounds: int, *, until: float | None = None) -> Rounds:
    """Per size, every round's busbw of ddptui and of the plain loop, rounds alternating
    (and alternating which goes first, so a trend in the machine's load favours neither).
    With `until`, stop as soon as the best rounds at the largest size reach that ratio
    (tests: short)."""
    seen: Rounds = {}
    iters: list[list[int]] = []
    for r in range(rounds):
        # The loop times as many iterations as ddptui's sweep last chose (on CPU it fits
        # them in about 1 s per size, fewer on a busy machine).
        if r % 2 == 0:
            ours = ddptui_sweep(tb)
            iters = sweep_iters(tb)
            plain = plain_loop(tb, iters=iters)
        else:
            plain = plain_loop(tb, iters=iters)
            ours = ddptui_sweep(tb)
            iters = sweep_iters(tb)
        for size in sorted(set(ours) & set(plain)):
            seen.setdefault(size, ([], []))
            seen[size][0].append(ours[size])
            seen[size][1].append(plain[size])
        top = max(seen)
        print(
            f"round {r + 1}: largest size ddptui {ours.get(top, 0):.3f} GB/s, "
            f"plain {plain.get(top, 0):.3f} GB/s",
            flush=True,
        )
        if until is not None and max(seen[top][0]) >= until * max(seen[top][1]):
            break
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bw-bench-") as work:
        tb = Testbed(args.nodes, prefix="bw", subnet="10.95.1", workdir=Path(work)).up()
        try:
            seen = compare(tb, args.rounds)
        finally:
            tb.down()
    print(f"\n{args.nodes} nodes x 1 rank, gloo, {args.rounds} alternating rounds, busbw GB/s")
    print("| size | ddptui median | plain loop median | ratio per round: median | range |")
    print("|---:|---:|---:|---:|---:|")
    ratios = {}
    for size, (ours, plain) in sorted(seen.items()):
        # A round's two runs met the same load: their ratio is the least noisy figure.
        paired = sorted(a / b for a, b in zip(ours, plain, strict=True))
        ratios[size] = statistics.median(paired)
        print(
            f"| {size >> 10} KiB | {statistics.median(ours):.3f} | {statistics.median(plain):.3f} "
            f"| {ratios[size]:.2f} | {paired[0]:.2f}-{paired[-1]:.2f} |"
        )
    top = max(seen)
    print(f"\nlargest size ({top >> 20} MiB): median ratio {ratios[top]:.2f} (target >= 0.9)")
    return 0 if ratios[top] >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
