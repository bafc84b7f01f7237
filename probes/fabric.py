# fabric probe: ONE long-lived worker per node for the whole `fabric` step. It imports
# torch once, joins one process group of all the tested nodes (one rank per node), and
# then runs what ddptui sends it, one command line at a time (the bootstrap's INBOX):
#   {"op": "pair", "round": k, "peer": r, "to": me}  a timed two-way exchange with rank r
#   {"op": "stop"}                          leave the group and exit
# Pairs of a round run at the same time; every pair is a 2-rank point-to-point exchange
# on the one world group (gloo on CPU, NCCL on GPUs: torch makes NCCL a 2-rank
# communicator per pair, lazily; gloo connects a pair on first use with
# TORCH_GLOO_LAZY_INIT, so 1024 nodes never open a full mesh).
#
# PARAMS: rank, world, master_addr, port, backend, overlay, node_env, nbytes, warmup,
#   iters, op_timeout_s, init_timeout_s, idle_s, intra (bool), worker (allreduce
#   worker source, for the intra-node allreduce), intra_bytes.
# Records: hw (what the hardware should give), phase, intra, ready, pair, error.
# stdlib at import; torch/pynvml lazily. Must run on Python 3.8+.
import datetime
import glob
import queue
import tempfile
import threading
import time

START = time.monotonic()


KNOWN = []  # secret values of the launch environment, scrubbed from every message


def scrubbed(text):
    return redact_text(text, KNOWN, str(PARAMS.get("salt") or "") or os.urandom(16).hex())


def phase(name, **data):
    emit("phase", phase=name, t=time.time(), **data)


def traffic_iface(master_addr):
    """The interface this node's traffic to the master leaves by (the master itself:
    the interface that holds the address), and its sysfs speed in Mb/s."""
    route = route_to(master_addr) or {}
    dev, src = route.get("dev"), route.get("src")
    if dev in (None, "lo") and src:
        for iface in interfaces():
            if iface["name"] != "lo" and any(a.get("addr") == src for a in iface["addrs"]):
                dev = iface["name"]
    return dev, (_speed(dev) if dev else None)


def ib_ports():
    """Every InfiniBand/RoCE port: device, port, state, rate (Gb/s) and link layer."""
    out = []
    for port_dir in sorted(glob.glob("/sys/class/infiniband/*/ports/*")):
        parts = port_dir.split("/")
        rate_text = read_text(port_dir + "/rate", "") or ""
        try:
            rate = float(rate_text.split()[0])
        except (IndexError, ValueError):
            rate = None
        out.append(
            {
                "device": parts[-3],
                "port": parts[-1],
                "state": read_text(port_dir + "/state", "") or "",
                "rate_gbps": rate,
                "rate_text": rate_text,
                "link_layer": read_text(port_dir + "/link_layer", "") or "",
            }
        )
    return out


def gpu_facts():
    """GPU names and NVLink (active links, generation) from NVML, when present."""
    try:
        import pynvml
    except ImportError:
        return [], "pynvml not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no driver/GPU: a fact, not an error
        return [], "NVML: %s" % exc
    gpus = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            links, version = 0, None
            for link in range(18):
                try:
                    if pynvml.nvmlDeviceGetNvLinkState(h, link):
                        links += 1
                        version = pynvml.nvmlDeviceGetNvLinkVersion(h, link)
                except Exception:  # noqa: BLE001 - past the last link, or not supported
                    break
            gpus.append(
                {
                    "index": i,
                    "name": name.decode() if isinstance(name, bytes) else str(name),
                    "nvlinks": links,
                    "nvlink_gen": version,
                }
            )
    finally:
        pynvml.nvmlShutdown()
    return gpus, None


def intra_node(env, nproc):
    """The intra-node allreduce (several GPUs): torchrun --standalone with the allreduce
    worker at one large size. Returns its busbw (GB/s) or an error text."""
    import json as _json
    import subprocess as _sp

    env = dict(env)
    env["DDPTUI_AR"] = _json.dumps(
        {
            "backend": "nccl",
            "timeout_s": 60,
            "sizes": [PARAMS.get("intra_bytes", 1 << 28)],
            "iters": [[5, 20]],
        }
    )
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        "--no-python",
        sys.executable,
        "-u",
        "-c",
        PARAMS["worker"],
    ]
    try:
        proc = _sp.run(
            argv,
            env=env,
            stdin=_sp.DEVNULL,
            stdout=_sp.PIPE,
            stderr=_sp.PIPE,
            timeout=float(PARAMS.get("init_timeout_s", 60)),
            check=False,
        )
    except _sp.TimeoutExpired:
        return None, "the intra-node allreduce did not finish in time"
    best = None
    for line in proc.stdout.decode("utf-8", "replace").splitlines():
        if not line.startswith("DDPTUI "):
            continue
        try:
            rec = _json.loads(line[len("DDPTUI ") :])
        except ValueError:
            continue
        if rec.get("kind") == "bw" and rec.get("busbw_gbps") is not None and rec.get("ok"):
            best = max(best or 0.0, float(rec["busbw_gbps"]))
    if best is None:
        tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-3:]
        return None, "intra-node allreduce failed (exit %s): %s" % (
            proc.returncode,
            " | ".join(tail),
        )
    return best, None


def nccl_net(log_path):
    """Which network NCCL chose ("IB", "Socket"), from its NET log lines."""
    text = read_text(log_path, "") or ""
    for line in text.splitlines():
        if "NET/IB" in line and ("Using" in line or "Initialized" in line or "[0]" in line):
            return "IB"
    return "Socket" if "NET/Socket" in text else None


class Pairs:
    """Timed exchanges with one peer at a time on the world group."""

    def __init__(self, torch, dist, device, nbytes, group=None):
        self.torch, self.dist, self.device, self.group = torch, dist, device, group
        numel = max(1, int(nbytes) // 4)
        self.send = torch.ones(numel, dtype=torch.float32, device=device)
        self.recv = torch.empty_like(self.send)
        self.tiny = torch.ones(1, dtype=torch.float32, device=device)
        self.tiny_in = torch.empty_like(self.tiny)
        self.timeout = datetime.timedelta(seconds=float(PARAMS.get("op_timeout_s", 15)))

    def _both(self, peer, out, into, tag):
        dist = self.dist
        if self.device.type == "cuda":
            ops = [
                dist.P2POp(dist.isend, out, peer, self.group),
                dist.P2POp(dist.irecv, into, peer, self.group),
            ]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            return
        ws = dist.isend(out, peer, group=self.group, tag=tag)
        wr = dist.irecv(into, peer, group=self.group, tag=tag)
        ws.wait(self.timeout)
        wr.wait(self.timeout)

    def exchange(self, peer, rnd):
        """Both directions at once, `iters` times after `warmup`; bytes per second in
        each direction, measured on this node's own clock (clocks never compared)."""
        warmup, iters = int(PARAMS.get("warmup", 1)), int(PARAMS.get("iters", 4))
        base = (rnd % 1000) * 100
        self._both(peer, self.tiny, self.tiny_in, base)  # both ends here: the sync
        for i in range(warmup):
            self._both(peer, self.send, self.recv, base + 1 + i)
        cuda = self.device.type == "cuda"
        if cuda:
            self.torch.cuda.synchronize(self.device)
        started = time.perf_counter()
        for i in range(iters):
            self._both(peer, self.send, self.recv, base + 1 + warmup + i)
        if cuda:
            self.torch.cuda.synchronize(self.device)
        took = time.perf_counter() - started
        nbytes = self.send.numel() * 4
        return nbytes, took, nbytes * iters / took / 1e9


def bounded(fn, limit):
    """fn() in a thread, at most `limit` seconds: gloo connects a pair lazily inside the
    first send, in the calling thread and under no timeout of ours, so a pair whose
    packets are dropped would hold this worker (and every later round) forever. A stuck
    exchange is left behind (a daemon thread; the process ends with the step)."""
    box = {}

    def target():
        try:
            box["ok"] = fn()
        except Exception as exc:  # noqa: BLE001 - handed to the caller
            box["err"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        raise TimeoutError("timed out: the exchange did not finish in %.0f s" % limit)
    if "err" in box:
        raise box["err"]
    return box["ok"]


def serve(pairs, backend, log_dir):
    """Run ddptui's commands until it says stop (or goes quiet for idle_s)."""
    net = None
    idle = float(PARAMS.get("idle_s", 60))
    while True:
        try:
            line = INBOX.get(timeout=idle)
        except queue.Empty:
            emit("error", message="no command from ddptui for %.0f s; leaving" % idle)
            return
        try:
            cmd = json.loads(line)
        except ValueError:
            continue
        if cmd.get("to") not in (None, int(PARAMS["rank"])):
            continue  # a line for another node (a transport that broadcasts)
        if cmd.get("op") == "stop":
            return
        if cmd.get("op") != "pair":
            continue
        rnd, peer = int(cmd["round"]), int(cmd["peer"])
        t0 = time.monotonic()
        try:
            nbytes, took, gbs = bounded(
                lambda p=peer, r=rnd: pairs.exchange(p, r), float(PARAMS.get("op_timeout_s", 15))
            )
        except Exception as exc:  # noqa: BLE001 - a hung or broken pair is a result
            text = str(exc).strip().splitlines()
            timeout = "timed out" in str(exc).lower() or "timeout" in str(exc).lower()
            emit(
                "pair",
                round=rnd,
                peer=peer,
                status="timeout" if timeout else "error",
                message=scrubbed((text[0] if text else type(exc).__name__)[:300]),
                seconds=round(time.monotonic() - t0, 3),
                t=time.time(),
            )
            continue
        if backend == "nccl" and net is None:
            for path in glob.glob(log_dir + "/nccl.*.log"):
                net = nccl_net(path) or net
        emit(
            "pair",
            round=rnd,
            peer=peer,
            status="ok",
            bytes=nbytes,
            seconds=round(took, 6),
            gbs=round(gbs, 6),
            net=net,
            t=time.time(),
        )


def main():
    env, _ = effective_env(os.environ, PARAMS.get("overlay"), PARAMS.get("node_env"))
    KNOWN.extend(secret_values(env))
    backend = PARAMS.get("backend", "gloo")
    dev, speed = traffic_iface(str(PARAMS["master_addr"]))
    gpus, gpu_note = gpu_facts() if backend == "nccl" or PARAMS.get("intra") else ([], None)
    emit(
        "hw",
        iface=dev,
        speed_mbps=speed,
        ib=ib_ports(),
        gpus=gpus,
        gpu_note=gpu_note,
        t=time.time(),
    )
    if backend == "gloo":
        env.setdefault("TORCH_GLOO_LAZY_INIT", "1")
    log_dir = tempfile.mkdtemp(prefix="ddptui-fabric-")
    CLEANUP.append(log_dir)
    if backend == "nccl":
        env.update(
            {
                "NCCL_DEBUG": "INFO",
                "NCCL_DEBUG_SUBSYS": "INIT,NET",
                "NCCL_DEBUG_FILE": log_dir + "/nccl.%h.%p.log",
            }
        )
    os.environ.clear()
    os.environ.update(env)
    visible = len(gpus)
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:  # the job sees these GPUs only
        visible = len([x for x in cvd.split(",") if x.strip() and x.strip() != "-1"])
    if backend == "nccl" and PARAMS.get("intra") and visible > 1:
        phase("intra", gpus=visible)
        busbw, why = intra_node(env, visible)
        emit("intra", busbw_gbs=busbw, error=why, gpus=visible)
    phase("import")
    import torch
    import torch.distributed as dist

    phase("init")
    if backend == "nccl":
        torch.cuda.set_device(0)
        device = torch.device("cuda", 0)
    else:
        device = torch.device("cpu")
    try:
        dist.init_process_group(
            backend,
            init_method="tcp://%s:%s" % (PARAMS["master_addr"], PARAMS["port"]),
            rank=int(PARAMS["rank"]),
            world_size=int(PARAMS["world"]),
            timeout=datetime.timedelta(seconds=float(PARAMS.get("init_timeout_s", 60))),
        )
    except Exception as exc:  # noqa: BLE001 - why this node could not join: a finding
        fail(scrubbed("%s: %s" % (type(exc).__name__, str(exc).strip().splitlines()[:1])))
    # The pairs run on a group of everyone with the short per-operation timeout: gloo
    # connects a pair lazily inside the first send, under its group's timeout, so a pair
    # that cannot connect fails in op_timeout_s instead of the long join timeout.
    group = None
    if backend == "gloo":
        try:
            group = dist.new_group(
                backend="gloo",
                timeout=datetime.timedelta(seconds=float(PARAMS.get("op_timeout_s", 15))),
            )
        except Exception as exc:  # noqa: BLE001 - why this node could not go on: a finding
            fail(scrubbed("new_group: %s: %s" % (type(exc).__name__, exc)))
    pairs = Pairs(torch, dist, device, PARAMS.get("nbytes", 1 << 20), group)
    emit("ready", t=time.time(), seconds=round(time.monotonic() - START, 2))
    serve(pairs, backend, log_dir)
    # Leave without a collective (the others may be gone: that is what the step tests);
    # the bootstrap ends the process and removes the temp dir.
    sys.stdout.flush()
    sys.exit(0)


main()
