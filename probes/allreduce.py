# allreduce launcher probe: runs torchrun on this node (static rendezvous) with
# the audited launch environment plus forced diagnostics, streams every line
# torchrun and its workers print (tagged with the rank, secrets scrubbed), and
# passes the workers' own "DDPTUI {...}" records through.
#
# PARAMS: nnodes, node_rank, master_addr, master_port, nproc (int | "gpus"),
#   backend ("nccl" | "gloo"), overlay, node_env, forced {K: V}, unset [K],
#   salt, rdzv_timeout_s, pg_timeout_s, max_s, worker (source), sizes, iters,
#   sweep_s (seconds from a worker's start after which the sweep grows no more).
# Records: launch, worker, log, exit. stdlib only; must run on Python 3.8+.
import re
import shutil
import tempfile
import threading
import time

TEE_PREFIX = re.compile(r"^\[([A-Za-z_]*?)(\d+)\]:")
MAX_LINE = 4000


def visible_gpus(env):
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        items = [x for x in cvd.split(",") if x.strip() and x.strip() != "-1"]
        return len(items)
    rc, out, _ = run(["nvidia-smi", "-L"], timeout=10)
    if rc == 0:
        return len([ln for ln in out.splitlines() if ln.startswith("GPU ")])
    return 0


def pump(stream, name, nproc, node_rank, known, salt):
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip("\n")
        rank = local = None
        m = TEE_PREFIX.match(line)
        if m:
            # torchrun's --tee prefix carries the LOCAL rank; the global one follows
            # from the static layout (node_rank * nproc + local).
            local = int(m.group(2))
            rank = node_rank * nproc + local
            line = line[m.end() :]
        # Every line, the workers' own records included, is scrubbed before it leaves.
        line = redact_text(line, known, salt)
        if line.startswith("DDPTUI "):
            try:
                record = json.loads(line[len("DDPTUI ") :])
            except ValueError:
                record = None
            if isinstance(record, dict):
                emit("worker", node_rank=node_rank, record=record)
                continue
        emit(
            "log",
            stream=name,
            rank=rank,
            local_rank=local,
            t=time.time(),
            line=line[:MAX_LINE],
        )


def main():
    env, _ = effective_env(os.environ, PARAMS.get("overlay"), PARAMS.get("node_env"))
    env.update({k: str(v) for k, v in (PARAMS.get("forced") or {}).items()})
    for name in PARAMS.get("unset") or []:
        env.pop(name, None)
    backend = PARAMS.get("backend", "gloo")
    nproc = PARAMS.get("nproc", 1)
    if nproc == "gpus":
        nproc = visible_gpus(env) if backend == "nccl" else 1
        if nproc < 1:
            fail(
                'nproc_per_node is "gpus" but no GPU is visible on this node '
                "(CUDA_VISIBLE_DEVICES=%r)" % env.get("CUDA_VISIBLE_DEVICES")
            )
    nproc = int(nproc)
    salt = str(PARAMS.get("salt") or "") or os.urandom(16).hex()
    known = secret_values(env)
    env["DDPTUI_AR"] = json.dumps(
        {
            "backend": backend,
            "timeout_s": PARAMS.get("pg_timeout_s", 30),
            "sizes": PARAMS.get("sizes", [1 << 20]),
            "iters": PARAMS.get("iters", 5),
            "sweep_s": PARAMS.get("sweep_s"),
        }
    )
    logs = tempfile.mkdtemp(prefix="ddptui-ar-")
    CLEANUP.append(logs)  # removed by the bootstrap even when ddptui kills this probe
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(PARAMS["nnodes"]),
        "--node-rank",
        str(PARAMS["node_rank"]),
        "--master-addr",
        str(PARAMS["master_addr"]),
        "--master-port",
        str(PARAMS["master_port"]),
        "--nproc-per-node",
        str(nproc),
        "--max-restarts",
        "0",
        "--rdzv-conf",
        "timeout=%d" % int(PARAMS.get("rdzv_timeout_s", 30)),
        "--tee",
        "3",
        "--log-dir",
        logs,
        "--no-python",
        sys.executable,
        "-u",
        "-c",
        PARAMS["worker"],
    ]
    emit(
        "launch",
        nproc=nproc,
        backend=backend,
        python=sys.executable,
        argv=[*argv[:-1], "<ddptui allreduce worker>"],
        forced=sorted((PARAMS.get("forced") or {}).keys()),
        unset=sorted(PARAMS.get("unset") or []),
    )
    started = time.time()
    proc = subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=DIE_WITH_PROBE,  # the bootstrap's: torchrun dies with this probe
    )
    readers = [
        threading.Thread(
            target=pump, args=(proc.stdout, "out", nproc, PARAMS["node_rank"], known, salt)
        ),
        threading.Thread(
            target=pump, args=(proc.stderr, "err", nproc, PARAMS["node_rank"], known, salt)
        ),
    ]
    for r in readers:
        r.daemon = True
        r.start()
    try:
        code = proc.wait(timeout=float(PARAMS.get("max_s", 600)))
    except subprocess.TimeoutExpired:
        code = None  # the bootstrap takes the whole tree down when this probe exits
    for r in readers:
        r.join(timeout=5)
    emit("exit", code=code, seconds=round(time.time() - started, 2))
    shutil.rmtree(logs, ignore_errors=True)
    if code is None:
        sys.exit(124)


main()
