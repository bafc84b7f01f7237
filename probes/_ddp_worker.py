# ddptui DDP worker: one process per rank, started by torchrun on every node
# (the allreduce launcher, probes/allreduce.py, ships it as `python -u -c <this source>`).
# A small real DistributedDataParallel model trains for a few steps on a
# DistributedSampler's shard of a synthetic data set, and each rank reports what
# the login node needs to prove DDP worked, as lines "DDPTUI {json}" on stdout:
#   phase       progress marker (start, imported, init, pg_ready, model, train,
#               timing, done), so a hang shows where it is; heartbeat every few s;
#   versions    torch / CUDA / NCCL as this rank loaded them;
#   ddp_model   parameter count and bytes, the SyncBatchNorm in use, checksums of
#               the parameters before and after DDP wrapped them;
#   ddp_result  checksums of parameters, buffers and every step's gradients; what
#               the communication hook counted (buckets, bytes, local vs reduced
#               sums); the sample indices this rank saw per epoch; the buffer
#               written per rank as each forward saw it; losses and timings;
#   error       an exception, with the phase it happened in.
# Settings arrive in the env vars DDPTUI_AR (backend, timeout_s; the launcher's)
# and DDPTUI_DDP (this worker's: samples_per_rank, batch, epochs, width, ...).
#
# TEST ONLY: DDPTUI_DDP_TEST_SEED_RANK=k plants a divergence the step must catch:
# every rank skips DDP's initial parameter broadcast (init_sync=False; all ranks
# must agree on that, it is a collective) and rank k builds its model with another
# seed, so its parameters differ for good. Never set it on a real cluster.
# stdlib + torch; must run on Python 3.8+.
import ctypes
import datetime
import hashlib
import inspect
import json
import os
import sys
import threading
import time
import warnings

AR = json.loads(os.environ.get("DDPTUI_AR", "{}"))
CFG = json.loads(os.environ.get("DDPTUI_DDP", "{}"))
RANK = int(os.environ.get("RANK", "-1"))
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
STATE = {"phase": "start", "since": time.time()}
SEED = 20251123
FEATURES = 32
CLASSES = 10


def out(kind, **data):
    record = {"v": 1, "kind": kind, "rank": RANK, "local_rank": LOCAL_RANK, "t": time.time()}
    record.update(data)
    os.write(1, ("DDPTUI " + json.dumps(record, separators=(",", ":")) + "\n").encode())


def phase(name, **data):
    STATE["phase"] = name
    STATE["since"] = time.time()
    out("phase", phase=name, **data)


def heartbeat():
    while True:
        time.sleep(2.0)
        out("heartbeat", phase=STATE["phase"], in_phase_s=round(time.time() - STATE["since"], 1))


def planted_rank():
    raw = os.environ.get("DDPTUI_DDP_TEST_SEED_RANK", "").strip()
    return int(raw) if raw.lstrip("-").isdigit() else None


def tensor_bytes(t):
    t = t.detach().cpu().contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def digest(tensors, h=None):
    h = h or hashlib.sha256()
    for t in tensors:
        h.update(tensor_bytes(t))
    return h


def build_model(torch, nn, width, seed):
    torch.manual_seed(seed)
    layers = [nn.Linear(FEATURES, width), nn.BatchNorm1d(width), nn.ReLU()]
    for _ in range(2):
        layers += [nn.Linear(width, width), nn.BatchNorm1d(width), nn.ReLU()]
    layers.append(nn.Linear(width, CLASSES))
    model = nn.Sequential(*layers)
    # A buffer each rank overwrites with its own rank before every forward: DDP's
    # broadcast_buffers must hand every rank rank 0's value (0) before the forward.
    model.register_buffer("rank_stamp", torch.zeros(1))
    return model


def cpu_sync_bn_class(torch, nn, dnn):
    class CpuSyncBatchNorm(nn.BatchNorm1d):
        """BatchNorm1d whose batch statistics are summed over every rank, which is what
        nn.SyncBatchNorm does on GPUs (torch's refuses CPU tensors). Gradients flow
        through the differentiable all_reduce, as in SyncBatchNorm."""

        def forward(self, x):
            if not self.training:
                return super().forward(x)
            c = x.shape[1]
            count = torch.full((1,), float(x.shape[0]), dtype=x.dtype, device=x.device)
            stats = dnn.all_reduce(torch.cat([x.sum(0), (x * x).sum(0), count]))
            total = stats[-1]
            mean = stats[:c] / total
            var = stats[c : 2 * c] / total - mean * mean
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                m = self.momentum
                self.running_mean.mul_(1 - m).add_(mean.detach() * m)
                self.running_var.mul_(1 - m).add_(var.detach() * (total / (total - 1)) * m)
            return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias

    return CpuSyncBatchNorm


def convert_cpu_sync_bn(torch, nn, model):
    import torch.distributed.nn.functional as dnn

    cls = cpu_sync_bn_class(torch, nn, dnn)
    for i, layer in enumerate(model):
        if isinstance(layer, nn.BatchNorm1d):
            sync = cls(layer.num_features, eps=layer.eps, momentum=layer.momentum)
            sync.load_state_dict(layer.state_dict())
            model[i] = sync
    return model


class Hook:
    """DDP communication hook: counts buckets and bytes, then calls torch's default
    allreduce hook. On the verify step it also records each bucket's sum before
    (local gradients) and after (the average over ranks) the allreduce."""

    def __init__(self, torch, default_hooks):
        self.torch = torch
        self.default = default_hooks.allreduce_hook
        self.steps = []  # per step: [bucket bytes, ...]
        self.verify = False
        self.sums = {}  # bucket index -> [local sum, reduced sum, reduced sha (12 hex)]

    def begin(self, verify):
        self.steps.append([])
        self.verify = verify

    def run(self, bucket):
        buf = bucket.buffer()
        if self.steps:
            self.steps[-1].append(buf.numel() * buf.element_size())
        if not self.verify:
            return self.default(None, bucket)
        index = bucket.index()
        self.sums[index] = [float(buf.double().sum().item()), None, None]
        fut = self.default(None, bucket)  # divides by the world size, then sums

        def done(f):
            value = f.value()
            reduced = value[0] if isinstance(value, (list, tuple)) else value
            self.sums[index][1] = float(reduced.double().sum().item())
            self.sums[index][2] = hashlib.sha256(tensor_bytes(reduced)).hexdigest()[:12]
            return reduced

        return fut.then(done)


def counting_hook(state, bucket):
    # DDP wants a plain function (it reads hook.__name__); the state is the Hook.
    return state.run(bucket)


def median(xs):
    xs = sorted(xs)
    if not xs:
        return None
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def timed(sync, fn, iters):
    """Median seconds of fn() over iters calls (the first one warms up)."""
    took = []
    for _ in range(iters):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        took.append(time.perf_counter() - t0)
    return median(took[1:] or took)


class Worker:
    """One rank's run: process group, DDP model, training, timing, report."""

    def __init__(self):
        import torch
        import torch.distributed as dist
        from torch import nn

        self.torch, self.dist, self.nn = torch, dist, nn
        self.backend = AR.get("backend", "gloo")
        self.planted = planted_rank()
        self.width = int(CFG.get("width", 256))
        self.batch = int(CFG.get("batch", 32))
        self.iters = int(CFG.get("timing_iters", 6))

    def sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

    def init(self):
        torch = self.torch
        try:
            nccl = ".".join(str(x) for x in torch.cuda.nccl.version())
        except Exception:  # noqa: BLE001 - a CPU build has no NCCL; that is a fact
            nccl = None
        out(
            "versions",
            torch=torch.__version__,
            cuda=torch.version.cuda,
            nccl=nccl,
            backend=self.backend,
        )
        phase("imported")
        kwargs = {"timeout": datetime.timedelta(seconds=float(AR.get("timeout_s", 60)))}
        if self.backend == "nccl":
            torch.cuda.set_device(LOCAL_RANK)
            self.device = torch.device("cuda", LOCAL_RANK)
            if "device_id" in inspect.signature(self.dist.init_process_group).parameters:
                kwargs["device_id"] = self.device  # torch >= 2.3: NCCL initialises eagerly
        else:
            self.device = torch.device("cpu")
            torch.set_num_threads(int(CFG.get("threads", 1)))
        phase("init")
        self.dist.init_process_group(self.backend, **kwargs)
        self.world = self.dist.get_world_size()
        phase("pg_ready", world=self.world)

    def build(self):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        from torch.nn.parallel import DistributedDataParallel as DDP

        torch, nn = self.torch, self.nn
        phase("model")
        model = build_model(torch, nn, self.width, SEED + (1 if self.planted == RANK else 0))
        if self.device.type == "cuda":
            model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
            sync_bn = "torch.nn.SyncBatchNorm"
        else:
            model = convert_cpu_sync_bn(torch, nn, model)
            sync_bn = "a CPU equivalent of torch.nn.SyncBatchNorm, which is GPU-only"
        sync_layers = sum(
            1 for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)
        )
        model = model.to(self.device)
        self.params = list(model.parameters())
        init_sha = digest(self.params).hexdigest()
        # Buffers are synced from rank 0 before every forward: DDP's default (the flag was
        # broadcast_buffers, now forward_sync_buffers), left as it is.
        kwargs = {"bucket_cap_mb": float(CFG.get("bucket_cap_mb", 0.1))}
        if self.device.type == "cuda":
            kwargs["device_ids"] = [LOCAL_RANK]
        if self.planted is not None:
            kwargs["init_sync"] = False  # TEST ONLY: see the header
        self.ddp = DDP(model, **kwargs)
        self.hook = Hook(torch, default_hooks)
        self.ddp.register_comm_hook(self.hook, counting_hook)
        out(
            "ddp_model",
            params=sum(p.numel() for p in self.params),
            param_bytes=sum(p.numel() * p.element_size() for p in self.params),
            sync_bn=sync_bn,
            sync_bn_layers=sync_layers,
            init_sha=init_sha,
            wrapped_sha=digest(self.params).hexdigest(),
            bucket_cap_mb=kwargs["bucket_cap_mb"],
            planted=self.planted,
            device=str(self.device),
        )
        # Each forward: the stamp as DDP left it (rank 0's after its buffer sync), and
        # the BatchNorm statistics after it (SyncBatchNorm: equal on every rank).
        inner = self.ddp.module
        bn_buffers = [b for n, b in inner.named_buffers() if n != "rank_stamp"]
        self.stamps = set()
        self.post_fwd = hashlib.sha256()
        inner.register_forward_pre_hook(lambda m, a: self.stamps.add(float(m.rank_stamp.item())))
        inner.register_forward_hook(
            lambda m, a, o: self.post_fwd.update(digest(bn_buffers).digest())
        )

    def data(self):
        from torch.utils.data import DataLoader, Dataset
        from torch.utils.data.distributed import DistributedSampler

        torch = self.torch
        # Synthetic data, the same on every rank; the sampler gives each rank its shard.
        total = int(CFG.get("samples_per_rank", 256)) * self.world  # no padded duplicates
        gen = torch.Generator().manual_seed(SEED)
        xs = torch.randn(total, FEATURES, generator=gen)
        ys = (xs @ torch.randn(FEATURES, CLASSES, generator=gen)).argmax(1)

        class Synthetic(Dataset):
            def __len__(self):
                return total

            def __getitem__(self, i):
                return i, xs[i], ys[i]

        self.total, self.xs, self.ys = total, xs, ys
        self.sampler = DistributedSampler(Synthetic(), shuffle=True, seed=SEED, drop_last=False)
        self.loader = DataLoader(Synthetic(), batch_size=self.batch, sampler=self.sampler)

    def train(self):
        torch, ddp, inner = self.torch, self.ddp, self.ddp.module
        phase("train")
        self.opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
        self.crit = self.nn.CrossEntropyLoss().to(self.device)
        epochs = int(CFG.get("epochs", 2))
        last = epochs * len(self.loader)
        self.grads = hashlib.sha256()
        self.indices, self.losses, self.fwd_bwd = {}, [], []
        self.steps = 0
        for epoch in range(epochs):
            self.sampler.set_epoch(epoch)
            seen = self.indices.setdefault(str(epoch), [])
            for idx, x, y in self.loader:
                seen.extend(int(i) for i in idx)
                x, y = x.to(self.device), y.to(self.device)
                self.steps += 1
                verify = self.steps == last  # sums and copies would disturb the timing
                self.hook.begin(verify)
                self.opt.zero_grad(set_to_none=True)
                with torch.no_grad():
                    inner.rank_stamp.fill_(float(RANK))  # DDP must overwrite it with rank 0's
                self.sync()
                t0 = time.perf_counter()
                loss = self.crit(ddp(x), y)
                loss.backward()
                self.sync()
                if not verify:
                    self.fwd_bwd.append(time.perf_counter() - t0)
                digest([p.grad for p in self.params if p.grad is not None], self.grads)
                self.opt.step()
                self.losses.append(float(loss.item()))

    def timing(self):
        """The same forward+backward without the gradient allreduce (no_sync), with no
        DDP and no collective at all (compute), and the same buckets all-reduced alone."""
        phase("timing")
        x, y = self.xs[: self.batch].to(self.device), self.ys[: self.batch].to(self.device)

        def local():
            with self.ddp.no_sync():
                self.crit(self.ddp(x), y).backward()

        local_s = timed(self.sync, local, self.iters)
        self.opt.zero_grad(set_to_none=True)  # nothing of these reaches the parameters
        plain = build_model(self.torch, self.nn, self.width, SEED).to(self.device)
        compute_s = timed(self.sync, lambda: self.crit(plain(x), y).backward(), self.iters)
        bucket_bytes = self.hook.steps[-1] if self.hook.steps else []
        bufs = [self.torch.zeros(max(1, b // 4), device=self.device) for b in bucket_bytes]

        def comm():
            for w in [self.dist.all_reduce(b, async_op=True) for b in bufs]:
                w.wait()

        comm_s = timed(self.sync, comm, self.iters)
        return {
            "fwd_bwd_s": median(self.fwd_bwd[1:] or self.fwd_bwd),  # step 1 builds buckets
            "fwd_bwd_local_s": local_s,
            "compute_s": compute_s,
            "comm_s": comm_s,
            "steps_timed": len(self.fwd_bwd),
        }

    def report(self, timing):
        hook = self.hook
        buffers = [b for _, b in sorted(self.ddp.module.named_buffers())]
        out(
            "ddp_result",
            steps=self.steps,
            params_sha=digest(self.params).hexdigest(),
            buffers_sha=digest(buffers).hexdigest(),
            grads_sha=self.grads.hexdigest(),
            post_forward_buffers_sha=self.post_fwd.hexdigest(),
            stamps_seen=sorted(self.stamps),
            hook={
                "buckets_per_step": [len(s) for s in hook.steps],
                "bytes_per_step": [sum(s) for s in hook.steps],
                "bucket_bytes": hook.steps[-1] if hook.steps else [],
                "sums": [hook.sums[i] for i in sorted(hook.sums)],
            },
            indices=self.indices,
            samples_total=self.total,
            loss_first=self.losses[0] if self.losses else None,
            loss_last=self.losses[-1] if self.losses else None,
            timing=timing,
        )


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
    # torch.distributed.nn.functional is deprecated in new torch but is the one
    # differentiable all_reduce every version since 1.8 has.
    warnings.filterwarnings("ignore", message=".*distributed.nn.functional.*deprecated")
    threading.Thread(target=heartbeat, daemon=True).start()
    phase("start", pid=os.getpid(), host=os.uname()[1])
    w = Worker()
    w.init()
    w.build()
    w.data()
    w.train()
    timing = w.timing()
    w.report(timing)
    phase("done")
    # Everything is reported. Wait for every rank, then leave without tearing torch down:
    # on a busy machine the process group's teardown at exit sometimes aborts (SIGABRT on
    # every rank at once, after the report), which torchrun reports as a crashed worker.
    try:
        w.dist.barrier()
    except Exception as exc:  # noqa: BLE001 - a peer gone after the report: said, not fatal
        sys.stderr.write("ddp worker: final barrier: %s\n" % exc)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:
        out("error", phase=STATE["phase"], error=("%s: %s" % (type(exc).__name__, exc))[:500])
        raise
