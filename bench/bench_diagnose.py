"""Throughput and memory of `ddptui diagnose` on a large synthetic log.

Writes a log of --size-mb (default 1024) to a temporary folder: a realistic mix of
8 ranks' torchrun output (NCCL INFO init and channel lines with their pids and comm
pointers, c10d glog lines, [rankN]: training progress, Python logging, tracebacks of
warnings), and near the end one rank's real failure (NCCL WARN, then torch's
DistBackendError and `Last error:` pair, torchrun's ChildFailedError).  Then runs
`ddptui diagnose FILE --json OUT` in a subprocess and reports MB/s and the peak RSS of
that process, and checks the planted cause was named.

    .venv/bin/python bench/bench_diagnose.py [--size-mb 1024] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RANKS = 8
FAILING_RANK = 5


def _templates(rng: random.Random) -> list[str]:
    """Lines one training step prints across the ranks ({r} rank, {n} counters)."""
    host = [f"gpu-node-{i // 4:02d}" for i in range(RANKS)]
    pid = [rng.randint(1000, 60000) for _ in range(RANKS)]
    comm = [f"0x{rng.getrandbits(48):012x}" for _ in range(RANKS)]
    out = []
    for r in range(RANKS):
        p = f"{host[r]}:{pid[r]}:{pid[r] + 7} [{r % 4}]"
        out += [
            f"[rank{r}]:[I1123 08:{{m:02d}}:{{s:02d}}.{{us:06d}} ProcessGroupNCCL.cpp:2058] "
            f"[PG ID 0 PG GUID 0(default_pg) Rank {r}] ProcessGroupNCCL work {{n}} completed",
            f"{p} NCCL INFO Channel {{ch:02d}}/0 : {r}[{r % 4}] -> {(r + 1) % RANKS}"
            f"[{(r + 1) % 4}] via NET/Socket/0",
            f"{p} NCCL INFO comm {comm[r]} rank {r} nRanks {RANKS} nNodes 2 localRanks 4 "
            f"localRank {r % 4} MNNVL 0",
            f"[rank{r}]: step {{n}} loss {{loss:.4f}} lr 0.000300 grad_norm {{g:.3f}} "
            f"tokens/s {{tps}}",
            f"[default{r % 4}]:2026-11-23 08:{{m:02d}}:{{s:02d}},{{ms:03d}} - INFO - train.py:88 - "
            f"epoch 3 step {{n}}/50000 elapsed {{el:.2f}}s data_wait {{dw:.3f}}s",
            f"[I1123 08:{{m:02d}}:{{s:02d}}.{{us:06d}} TCPStoreLibUvBackend.cpp:912] "
            f"[c10d - trace] get key:/default_pg/0//cuda//{{n}} address:[{host[r]}]:{{port}}",
            f"{p} NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
            f"[rank{r}]:[W1123 08:{{m:02d}}:{{s:02d}}.{{us:06d}} Utils.hpp:110] Warning: "
            f"checkpoint shard {{n}} saved in {{el:.2f}}s (function operator())",
        ]
    return out


def _unique_templates() -> list[str]:
    """Lines unlike any before them (a pointer, a run id): the line cache cannot help."""
    return [
        f"[rank{r}]: dataloader worker batch ptr 0x{{hexid}} run {{runid}} shard "
        f"s3://bucket/{{runid}}/part-{{n}}.tar"
        for r in range(RANKS)
    ]


def _failure(rng: random.Random) -> list[str]:
    r = FAILING_RANK
    pid = rng.randint(1000, 60000)
    p = f"gpu-node-01:{pid}:{pid}"
    return [
        f"[2026-11-23 09:10:04] {p} [1] bootstrap.cc:114 NCCL WARN Bootstrap : no socket interface found",
        f"{p} [1] NCCL INFO init.cc:126 -> 5",
        f"[rank{r}]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3135, "
        "invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9",
        f"[rank{r}]: ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
        f"[rank{r}]: Last error:",
        f"[rank{r}]: Bootstrap : no socket interface found",
        f"E1123 09:10:05.816000 821 torch/distributed/elastic/multiprocessing/api.py:986] failed "
        f"(exitcode: 1) local_rank: 1 (pid: {pid}) of binary: /usr/bin/python",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    ]


def _block(rng: random.Random, templates: list[str], steps: int, n0: int) -> str:
    lines = []
    for n in range(n0, n0 + steps):
        t = n // 50
        for tpl in templates:
            lines.append(
                tpl.format(
                    m=(t // 60) % 60, s=t % 60, us=rng.randrange(10**6),
                    ms=rng.randrange(1000), n=n, ch=n % 32, loss=rng.random() * 4,
                    g=rng.random() * 2, tps=rng.randrange(150000, 200000),
                    el=rng.random() * 3, dw=rng.random() / 10, port=rng.randrange(30000, 60000),
                    hexid=f"{rng.getrandbits(48):012x}", runid=f"{rng.getrandbits(40):010x}",
                )
            )
    return "\n".join(lines) + "\n"


def write_log(path: Path, size_mb: int, seed: int = 7) -> int:
    """Formatting 10 million lines in Python takes minutes: 16 MB of steps are formatted
    once and written again (diagnose's line cache ignores digits, so fresh numbers would
    not change its work), each time followed by fresh lines with random hex ids that no
    cache can have seen."""
    rng = random.Random(seed)  # noqa: S311 - test data, not secrets
    templates = _templates(rng)
    target = size_mb << 20
    base = _block(rng, templates, 2000, 0).encode("utf-8")
    unique = _unique_templates()
    written = 0
    with path.open("wb") as fh:
        while written + len(base) < target * 0.97:
            fresh = _block(rng, unique, 2000, written).encode("utf-8")  # 1 line in 9
            fh.write(base + fresh)
            written += len(base) + len(fresh)
        tail = ("\n".join(_failure(rng)) + "\n").encode("utf-8")
        tail += _block(rng, templates, 2000, 10**6)[: max(0, target - written)].encode("utf-8")
        fh.write(tail)
        written += len(tail)
    return written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--keep", action="store_true", help="keep the generated log")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ddptui-bench-diagnose-"))
    log, report = tmp / "train.log", tmp / "report.json"
    t0 = time.monotonic()
    size = write_log(log, args.size_mb)
    print(f"wrote {size / 1e6:.0f} MB in {time.monotonic() - t0:.1f} s: {log}")
    cmd = [sys.executable, "-m", "ddptui", "diagnose", str(log), "--json", str(report)]
    cpu0 = os.times()
    t0 = time.monotonic()
    run = subprocess.run(cmd, capture_output=True, text=True, check=False)
    took = time.monotonic() - t0
    cpu1 = os.times()
    rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    cpu = (cpu1.children_user - cpu0.children_user) + (cpu1.children_system - cpu0.children_system)
    doc = json.loads(report.read_text())
    first = (doc.get("first_failure") or {}).get("finding")
    print(f"exit {run.returncode}, first cause {first} (planted BOOT-NOIF)")
    print(
        f"{size / 1e6:.0f} MB in {took:.1f} s wall = {size / 1e6 / took:.0f} MB/s "
        f"(CPU {cpu:.1f} s = {size / 1e6 / max(cpu, 1e-9):.0f} MB/s per core); "
        f"peak RSS {rss_mb:.0f} MB; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    if not args.keep:
        log.unlink()
        report.unlink()
        tmp.rmdir()
    return 0 if first == "BOOT-NOIF" and run.returncode == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
