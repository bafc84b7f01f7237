# A plain allreduce loop written the nccl-tests way, the yardstick for ddptui's sweep:
# run by torchrun on every node, no ddptui code, no TORCH_DISTRIBUTED_DEBUG.
#   torchrun ... plain_allreduce.py '{"sizes": [...], "iters": [[warmup, timed], ...]}'
# Per size: warm-up, a barrier, a batch of timed all_reduce calls (CUDA events on GPU,
# the wall clock on CPU), and the slowest rank's time (nccl-tests reports that one).
# With one rank each iteration first copies the send buffer into the receive buffer,
# which is what NCCL's out-of-place allreduce does with one rank.
# Rank 0 prints one JSON line per size: bytes, time_us, algbw_gbps, busbw_gbps.
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def main() -> None:
    spec = json.loads(sys.argv[1])
    cuda = torch.cuda.is_available() and spec.get("device", "auto") != "cpu"
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    for size, (warmup, iters) in zip(spec["sizes"], spec["iters"], strict=True):
        send = torch.ones(size // 4, dtype=torch.float32, device=device)
        recv = send.clone()

        def once(send: torch.Tensor = send, recv: torch.Tensor = recv) -> None:
            if world == 1:
                recv.copy_(send)
            dist.all_reduce(recv)

        for _ in range(warmup):
            once()
        if cuda:
            torch.cuda.synchronize()
        dist.barrier()
        if cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
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
        slowest = torch.tensor([took], dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        took = float(slowest.item())
        algbw = size / took / 1e9
        busbw = algbw * 2 * (world - 1) / world if world > 1 else None
        if rank == 0:
            row = {"bytes": size, "time_us": round(took * 1e6, 1), "algbw_gbps": round(algbw, 4)}
            row["busbw_gbps"] = None if busbw is None else round(busbw, 4)
            print("PLAIN " + json.dumps(row), flush=True)
    dist.destroy_process_group()


main()
