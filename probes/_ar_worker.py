# ddptui allreduce worker: one process per rank, started by torchrun on every
# node (probes/allreduce.py ships it as `python -u -c <this source>`).
# It reports as lines "DDPTUI {json}" on stdout, written with one os.write each:
#   phase      a progress marker (start, imported, init, pg_ready, verify, sweep, done),
#              so a hang shows where it is;
#   heartbeat  every few seconds, with the phase it is in;
#   versions   torch / CUDA / NCCL as this rank loaded them;
#   verify     the allreduce result checked exactly against the known sum;
#   bw         one size of the sweep: algbw and busbw (nccl-tests' definition).
# Settings arrive in the env var DDPTUI_AR (JSON).
import datetime
import json
import os
import sys
import threading
import time

CFG = json.loads(os.environ.get("DDPTUI_AR", "{}"))
RANK = int(os.environ.get("RANK", "-1"))
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
STATE = {"phase": "start", "since": time.time()}


def out(kind, **data):
    record = {"v": 1, "kind": kind, "rank": RANK, "local_rank": LOCAL_RANK, "t": time.time()}
    record.update(data)
    os.write(1, ("DDPTUI " + json.dumps(record, separators=(",", ":")) + "\n").encode())


def phase(name, **data):
    STATE["phase"] = name
    STATE["since"] = time.time()
    out("phase", phase=name, **data)


def heartbeat():
    every = float(CFG.get("heartbeat_s", 2.0))
    while True:
        time.sleep(every)
        out("heartbeat", phase=STATE["phase"], in_phase_s=round(time.time() - STATE["since"], 1))


def nccl_version(torch):
    try:
        v = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - a CPU build has no NCCL; that is a fact, not an error
        return None
    return ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)


def sweep(torch, dist, device):
    """Time all_reduce per size; busbw = algbw * 2(n-1)/n as nccl-tests define it."""
    iters = int(CFG.get("iters", 5))
    for size in CFG.get("sizes", [1 << 20]):
        numel = max(1, int(size) // 4)
        t = torch.ones(numel, dtype=torch.float32, device=device)
        dist.all_reduce(t)  # warm-up: connections and buffers
        if device.type == "cuda":
            torch.cuda.synchronize()
        dist.barrier()
        started = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        if device.type == "cuda":
            torch.cuda.synchronize()
        took = (time.perf_counter() - started) / iters
        algbw = (numel * 4) / took / 1e9
        busbw = algbw * 2 * (WORLD - 1) / WORLD if WORLD > 1 else algbw
        out(
            "bw",
            bytes=numel * 4,
            time_us=round(took * 1e6, 1),
            algbw_gbps=round(algbw, 4),
            busbw_gbps=round(busbw, 4),
        )


def main():
    threading.Thread(target=heartbeat, daemon=True).start()
    phase("start", pid=os.getpid(), host=os.uname()[1])
    import torch
    import torch.distributed as dist

    backend = CFG.get("backend", "gloo")
    out(
        "versions",
        torch=torch.__version__,
        cuda=torch.version.cuda,
        nccl=nccl_version(torch),
        backend=backend,
    )
    phase("imported")
    kwargs = {"timeout": datetime.timedelta(seconds=float(CFG.get("timeout_s", 60)))}
    if backend == "nccl":
        # Set the device before anything else, and pass device_id so NCCL
        # initialises eagerly (its log lines then come during init, not later).
        torch.cuda.set_device(LOCAL_RANK)
        device = torch.device("cuda", LOCAL_RANK)
        kwargs["device_id"] = device
    else:
        device = torch.device("cpu")
    phase("init")
    dist.init_process_group(backend, **kwargs)
    phase("pg_ready", world=dist.get_world_size())
    phase("verify")
    # Rank r contributes r+1 everywhere; the exact sum is n(n+1)/2.
    t = torch.full((1024,), float(RANK + 1), dtype=torch.float32, device=device)
    dist.all_reduce(t)
    expected = float(WORLD * (WORLD + 1) // 2)
    got = t.cpu()
    ok = bool((got == expected).all().item())
    out(
        "verify",
        ok=ok,
        expected=expected,
        got=float(got[0].item()),
        mismatches=int((got != expected).sum().item()),
    )
    phase("sweep")
    sweep(torch, dist, device)
    phase("done")
    dist.destroy_process_group()
    sys.stdout.flush()
    if not ok:
        sys.exit(3)


main()
