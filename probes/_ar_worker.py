# ddptui allreduce worker: one process per rank, started by torchrun on every
# node (probes/allreduce.py ships it as `python -u -c <this source>`).
# It reports as lines "DDPTUI {json}" on stdout, written with one os.write each:
#   phase      a progress marker (start, imported, init, pg_ready, verify, sweep, done),
#              so a hang shows where it is;
#   heartbeat  every few seconds, with the phase it is in;
#   versions   torch / CUDA / NCCL as this rank loaded them;
#   verify     the allreduce result checked exactly against the known sum;
#   sweep      how the sweep runs: debug level of its group, sizes that fit;
#   bw         one size of the sweep: algbw and busbw (nccl-tests' definition);
#   sweep_stop the sweep stopped growing the size: the next size would not finish in
#              its share of the time left (a slow fabric is measured, not a hang).
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
CPU_SIZE_BUDGET_S = 1.0  # timed seconds per size on CPU, at most (see fitting_iters)
SIZE_SHARE = 0.5  # a size may use at most this share of the sweep's time left
STARTED = time.monotonic()


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


def sweep_group(torch, dist):
    """A process group for the sweep without TORCH_DISTRIBUTED_DEBUG=DETAIL's wrapper.

    Under DETAIL, torch wraps every group it creates in a ProcessGroupWrapper that runs a
    gloo fingerprint check (op, sizes, dtypes) before each collective: useful for the
    verified allreduce, but it dominates the timing (1 MiB on an H100: 412 us instead of
    37 us). torch reads the level when a group is created (distributed_c10d.py,
    _new_process_group_helper: get_debug_level() == DebugLevel.DETAIL), so a group made
    with the level switched OFF runs bare, while the default group keeps its checks.
    Returns (group or None for the default group, the level the sweep runs under)."""
    level = getattr(dist, "get_debug_level", None)
    set_level = getattr(dist, "set_debug_level", None)
    debug = getattr(dist, "DebugLevel", None)
    if level is None or set_level is None or debug is None:
        return None, os.environ.get("TORCH_DISTRIBUTED_DEBUG", "OFF") or "OFF"
    before = level()
    if before == debug.OFF:
        return None, "OFF"
    set_level(debug.OFF)
    try:
        group = dist.new_group(ranks=list(range(WORLD)))
    except Exception as exc:  # noqa: BLE001 - the sweep then runs on the default group
        out("sweep_note", note="could not create an unwrapped group: %s" % exc)
        return None, before.name
    finally:
        set_level(before)
    return group, "OFF"


def backend_class(group, device):
    """The class that runs the group's collectives: _ProcessGroupWrapper under DETAIL."""
    try:
        return type(group._get_backend(device)).__name__
    except Exception:  # noqa: BLE001 - older torch: not knowable, not an error
        return None


def sizes_that_fit(torch, dist, group, device):
    """The configured sizes, bounded by free GPU memory (a send and a receive buffer per
    size, with room left for NCCL and other processes). Every rank must run the same
    sizes, so the smallest bound over all ranks wins."""
    sizes = [int(s) for s in CFG.get("sizes", [1 << 20])]
    if device.type != "cuda" or not sizes:
        return sizes, None
    free = int(torch.cuda.mem_get_info(device)[0])
    bound = torch.tensor([free], dtype=torch.int64, device=device)
    dist.all_reduce(bound, op=dist.ReduceOp.MIN, group=group)
    least_free = int(bound.item())
    return [s for s in sizes if 2 * s <= least_free * 0.4], least_free


def iterations(i):
    """(warm-up, timed) for the i-th size: CFG iters is one count for all sizes (one
    warm-up), or a list of [warm-up, timed] pairs, one per size."""
    spec = CFG.get("iters", 5)
    if isinstance(spec, list):
        pair = spec[min(i, len(spec) - 1)]
        return int(pair[0]), int(pair[1])
    return 1, int(spec)


def timed_allreduce(torch, dist, group, device, size, warmup, iters):
    """Seconds per allreduce of `size` bytes, measured as nccl-tests measures its
    out-of-place column: a send buffer that is never written, results in a separate
    receive buffer, a batch of iterations timed as one (CUDA events on GPU).

    torch's all_reduce works in place. With more than one rank NCCL's out-of-place and
    in-place allreduce move the same bytes (nccl-tests' two columns agree), so the
    receive buffer is filled from the send buffer once and reduced in place. With one
    rank NCCL's out-of-place allreduce is a device copy from send to receive buffer
    (its in-place one does nothing), so each iteration does that copy, then the
    allreduce."""
    numel = max(1, size // 4)
    send = torch.ones(numel, dtype=torch.float32, device=device)
    recv = torch.empty_like(send)
    recv.copy_(send)
    one_rank = WORLD == 1

    def once():
        if one_rank:
            recv.copy_(send)
        dist.all_reduce(recv, group=group)

    warm_started = time.perf_counter()
    for _ in range(warmup):
        once()
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    else:
        iters = fitting_iters(
            torch, dist, group, iters, (time.perf_counter() - warm_started) / max(1, warmup)
        )
    dist.barrier(group=group)
    if cuda:
        begin = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(iters):
            once()
        end.record()
        end.synchronize()
        took = begin.elapsed_time(end) / 1e3 / iters
    else:
        started = time.perf_counter()
        for _ in range(iters):
            once()
        took = (time.perf_counter() - started) / iters
    # The sweep's data are checked too: every element of ones summed over the ranks.
    recv.copy_(send)
    dist.all_reduce(recv, group=group)
    ok = float(recv.min().item()) == float(WORLD) == float(recv.max().item())
    del send, recv
    return numel * 4, took, ok, iters


def fitting_iters(torch, dist, group, wanted, per_iter_s):
    """On CPU (gloo over TCP, maybe a slow or busy link) the timed iterations of a size
    fit in CPU_SIZE_BUDGET_S, between 3 and `wanted`, judged from the warm-up. Every rank
    must run the same count: the smallest proposal wins."""
    proposal = int(CPU_SIZE_BUDGET_S / per_iter_s) if per_iter_s > 0 else wanted
    agreed = torch.tensor([max(3, min(wanted, proposal))], dtype=torch.int64)
    dist.all_reduce(agreed, op=dist.ReduceOp.MIN, group=group)
    return int(agreed.item())


def sweep_left_s():
    """Seconds the sweep may still use: CFG sweep_s counts from this worker's start (the
    launcher sets it well inside the step's deadline); None means unbounded."""
    budget = CFG.get("sweep_s")
    if budget is None:
        return None
    return float(budget) - (time.monotonic() - STARTED)


def next_fits(torch, dist, group, device, nbytes, took, size, iters):
    """Whether the next size would finish in its share of the time left, judged from the
    last size's time per allreduce scaled by the size ratio (an over-estimate for the
    small, latency-bound sizes: the safe side). Every rank must decide the same, so the
    most pessimistic rank decides. Returns (fits, estimate_s, left_s)."""
    left = sweep_left_s()
    if left is None:
        return True, None, None
    warmup, timed = iters
    # warm-up + at least 3 timed + the check allreduce of the next size
    estimate = took * (size / max(1, nbytes)) * (warmup + min(3, timed) + 1)
    verdict = 1 if estimate <= max(0.0, left) * SIZE_SHARE else 0
    flag = torch.tensor([verdict], dtype=torch.int64, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    return bool(int(flag.item())), estimate, left


def sweep(torch, dist, device):
    """Time all_reduce per size; busbw = algbw * 2(n-1)/n as nccl-tests define it, and
    none with one rank (no data cross a bus: nccl-tests prints 0). The sweep is bounded
    by time: it stops growing the size when the next size would not finish in its share
    of the time left (a slow link is measured at the sizes that fit, not timed out)."""
    group, debug = sweep_group(torch, dist)
    sizes, least_free = sizes_that_fit(torch, dist, group, device)
    out(
        "sweep",
        debug=debug,
        backend_class=backend_class(group or dist.group.WORLD, device),
        sizes=sizes,
        free_bytes=least_free,
        timing="cuda-events" if device.type == "cuda" else "wall-clock",
        budget_s=CFG.get("sweep_s"),
    )
    for i, size in enumerate(sizes):
        warmup, iters = iterations(i)
        if i > 0:
            fits, estimate, left = next_fits(
                torch, dist, group, device, nbytes, took, size, (warmup, iters)
            )
            if not fits:
                out(
                    "sweep_stop",
                    next_bytes=size,
                    estimate_s=round(estimate, 2),
                    left_s=round(left, 2),
                    measured=i,
                )
                break
        nbytes, took, ok, iters = timed_allreduce(torch, dist, group, device, size, warmup, iters)
        algbw = nbytes / took / 1e9
        busbw = algbw * 2 * (WORLD - 1) / WORLD if WORLD > 1 else None
        out(
            "bw",
            bytes=nbytes,
            time_us=round(took * 1e6, 1),
            algbw_gbps=round(algbw, 4),
            busbw_gbps=None if busbw is None else round(busbw, 4),
            warmup=warmup,
            iters=iters,
            ok=ok,
            debug=debug,
        )
    if group is not None:
        dist.destroy_process_group(group)


def die_with_torchrun():
    """SIGKILL this rank when torchrun ends however it ends: torchrun starts each rank in a
    session of its own, so a rank whose torchrun was SIGKILLed would otherwise outlive the
    run (torchrun's own SIGTERM path stops its ranks itself). Linux only; best effort."""
    try:
        import ctypes
        import signal

        parent = os.getppid()
        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux: the bootstrap's tree kill remains
        return
    if os.getppid() != parent:
        os._exit(137)


def main():
    die_with_torchrun()
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
