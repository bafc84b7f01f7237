# Job probe: find the user's own torchrun job on this node and look at it without
# touching it: which processes, which ranks, how busy, what they print, where they
# are (py-spy, non-blocking), what NCCL's RAS service and torch's flight recorder say.
#
# Read-only by design: the job is never signalled, paused (py-spy runs with
# --nonblocking unless PARAMS["allow_pause"]) or written to; the one exception is
# PARAMS["trigger_dump"], which writes to the job's flight-recorder pipe when the user
# asked for it. Pipes and terminals among the job's fds are never opened (reading one
# would steal the job's data): only regular files are read. Secrets are redacted here,
# before anything is written (probes/_redact.py).
#
# PARAMS: {"user": name or None, "match": regex or None, "salt": hex, "window_s": float,
#   "pyspy": path or None, "stacks": bool, "native": bool, "allow_pause": bool,
#   "log_globs": [glob], "fallback_logs": [path] (read only when no job runs here),
#   "log_lines": int, "ras": bool, "fr": bool, "trigger_dump": bool, "log_paths": [path],
#   "fallback_paths": [path], "fr_paths": [{"path", "rank"}] (exact files the login node
#   gave this node to read, each once across nodes; the last two only when no job runs here)}
# stdlib only (/proc helpers in _proc.py, sent before this file); must run on Python 3.8+.
import base64
import glob
import pwd
import re
import socket
import threading
import time

RANK_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "LOCAL_WORLD_SIZE")
TAIL_BYTES = 512 * 1024
FR_MAX_BYTES = 2 * 1024 * 1024
MAX_LOG_FILES = 16
SAMPLES = 5  # py-spy looks per rank across the window
BLOCKING_SAMPLE = 9  # the retry with a pausing dump (only with allow_pause)
DUMP_WAIT_S = 10.0  # how long a triggered flight recorder dump may take to appear


# --------------------------------------------------------------------------- py-spy


def find_pyspy(agent_argv, env):
    given = PARAMS.get("pyspy")
    if given:
        return given if os.access(given, os.X_OK) else None
    dirs = []
    if agent_argv and os.path.isabs(agent_argv[0]):
        dirs.append(os.path.dirname(agent_argv[0]))
    dirs += (env or {}).get("PATH", "").split(":")
    dirs += [os.path.dirname(sys.executable), *os.environ.get("PATH", "").split(":")]
    home = (env or {}).get("HOME") or os.path.expanduser("~")
    dirs.append(os.path.join(home, ".local", "bin"))
    for d in dirs:
        path = os.path.join(d, "py-spy")
        if d and os.access(path, os.X_OK):
            return path
    return None


def ptrace_facts():
    scope = read_text("/proc/sys/kernel/yama/ptrace_scope")
    cap = status_field(os.getpid(), "CapEff")
    has_cap = bool(int(cap[0], 16) & (1 << 19)) if cap else None
    return {
        "ptrace_scope": int(scope) if scope and scope.isdigit() else None,
        "cap_sys_ptrace": has_cap,
    }


def dump_stacks(pyspy, pids, native, blocking, timeout):
    """py-spy dump on every pid at once; {pid: (rc, stdout, stderr, seconds)}."""
    procs = {}
    started = time.monotonic()
    for pid in pids:
        argv = [pyspy, "dump", "--pid", str(pid)]
        if not blocking:
            argv.append("--nonblocking")
        if native:
            argv.append("--native")
        try:
            procs[pid] = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        except OSError as exc:
            procs[pid] = exc
    out = {}
    for pid, proc in procs.items():
        if isinstance(proc, OSError):
            out[pid] = (None, "", str(proc), 0.0)
            continue
        left = max(0.1, timeout - (time.monotonic() - started))
        try:
            so, se = proc.communicate(timeout=left)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            so, se = proc.communicate()
            rc, se = None, b"py-spy did not answer within %.0f s" % timeout
        out[pid] = (
            rc,
            so.decode("utf-8", "replace"),
            se.decode("utf-8", "replace"),
            round(time.monotonic() - started, 2),
        )
    return out


# --------------------------------------------------------------------------- NCCL RAS


def ras_addr(env):
    raw = (env or {}).get("NCCL_RAS_ADDR") or "localhost:28028"
    host, _, port = raw.rpartition(":")
    return (host.strip("[]") or "localhost", int(port) if port.isdigit() else 28028)


def ras_ask(addr, lines, timeout=3.0):
    sock = socket.create_connection(addr, timeout=timeout)
    try:
        sock.sendall("".join(line + "\n" for line in lines).encode())
        sock.shutdown(socket.SHUT_WR)
        buf = b""
        deadline = time.monotonic() + timeout
        while len(buf) < 256 * 1024 and time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
        return buf.decode("utf-8", "replace")
    finally:
        sock.close()


def ras_sample(addr):
    """JSON where the server speaks it, else the text form; {"addr", "replies" | "error"}."""
    out = {"addr": "%s:%d" % addr, "replies": []}
    try:
        reply = ras_ask(addr, ["CLIENT PROTOCOL 2", "SET FORMAT json", "STATUS"])
        out["replies"].append({"sent": "CLIENT PROTOCOL 2; SET FORMAT json; STATUS", "text": reply})
        if "{" not in reply:
            reply = ras_ask(addr, ["CLIENT PROTOCOL 2", "VERBOSE STATUS"])
            out["replies"].append({"sent": "CLIENT PROTOCOL 2; VERBOSE STATUS", "text": reply})
    except OSError as exc:
        out["error"] = exc.strerror or str(exc) or type(exc).__name__
    return out


def uses_nccl(pid):
    raw = _read("/proc/%d/maps" % pid, 16 << 20)
    return raw is not None and b"libnccl" in raw


# --------------------------------------------------------------------------- flight recorder


def fr_prefix(env):
    prefix = env.get("TORCH_FR_DUMP_TEMP_FILE") or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
    if prefix:
        return prefix
    home = env.get("HOME") or os.path.expanduser("~")
    return os.path.join(home, ".cache", "torch", "comm_lib_trace_rank_")


def fr_enabled(env):
    for key in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        value = env.get(key, "")
        if value.isdigit() and int(value) > 0:
            return True
    return False


def trigger_dump(env, ranks):
    """Ask torch to dump its flight recorder now: a write to the job's debug pipe."""
    prefix = env.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
    results = []
    for rank in ranks:
        path = "%s%d.pipe" % (prefix, rank)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            try:
                os.write(fd, b"1\n")
            finally:
                os.close(fd)
            results.append({"rank": rank, "pipe": path, "ok": True})
        except OSError as exc:
            results.append({"rank": rank, "pipe": path, "ok": False, "error": exc.strerror})
    return results


def read_fr(path, rank, since):
    try:
        st = os.stat(path)
    except OSError:
        return {"rank": rank, "path": path, "found": False}
    rec = {"rank": rank, "path": path, "found": True, "size": st.st_size, "mtime": st.st_mtime}
    rec["stale"] = st.st_mtime < since
    if st.st_size > FR_MAX_BYTES:
        rec["error"] = "larger than %d bytes; not copied" % FR_MAX_BYTES
        return rec
    raw = _read(path, FR_MAX_BYTES)
    rec["data_b64"] = base64.b64encode(raw or b"").decode("ascii")
    return rec


# --------------------------------------------------------------------------- NVML


def gpu_usage(pids):
    """{pid: {"gpu", "mem_bytes", "sm_pct"}} from NVML, matched by host pid; plus a note."""
    try:
        import pynvml
    except ImportError:
        return {}, "pynvml (nvidia-ml-py) is not installed for this python"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVML raises its own error classes
        return {}, "NVML unavailable: %s" % exc
    nested = len(status_field(os.getpid(), "NSpid")) > 1
    found = {}
    try:
        since = int((time.time() - 5) * 1e6)
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            util = {}
            try:
                for s in pynvml.nvmlDeviceGetProcessUtilization(handle, since):
                    util[s.pid] = s.smUtil
            except Exception:  # noqa: BLE001, S110 - per-process utilisation is optional
                pass
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if p.pid in pids:
                    found[p.pid] = {
                        "gpu": index,
                        "mem_bytes": p.usedGpuMemory,
                        "sm_pct": util.get(p.pid),
                    }
    except Exception as exc:  # noqa: BLE001
        return found, "NVML error: %s" % exc
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001, S110
            pass
    note = None
    if nested and not found:
        note = "this shell runs in a PID namespace: NVML's host pids cannot be matched to the job's"
    return found, note


# --------------------------------------------------------------------------- logs


def tail_lines(path, known, salt, limit):
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - TAIL_BYTES))
            raw = fh.read(TAIL_BYTES)
    except OSError as exc:
        return None, exc.strerror or str(exc)
    lines = raw.decode("utf-8", "replace").splitlines()
    if size > TAIL_BYTES and lines:
        lines = lines[1:]  # the first one is cut
    return [truncate(redact_text(line, known, salt)) for line in lines[-limit:]], None


# --------------------------------------------------------------------------- main


def main():
    salt = str(PARAMS.get("salt") or "") or os.urandom(16).hex()
    user = PARAMS.get("user")
    try:
        uid = pwd.getpwnam(user).pw_uid if user else os.getuid()
    except KeyError:
        fail("there is no user %r on this node" % user)
    pattern = None
    if PARAMS.get("match"):
        try:
            pattern = re.compile(PARAMS["match"])
        except re.error as exc:
            fail("--match is not a valid regular expression here: %s" % exc)
    window = float(PARAMS.get("window_s", 2.0))
    btime = boot_time()
    table = process_table()
    jobs = find_jobs(table, uid, pattern)
    if PARAMS.get("slurm_job"):  # `ddptui job --slurm J`: ranks srun started, no torchrun
        jobs += slurm_task_jobs(table, uid, pattern, str(PARAMS["slurm_job"]))
    emit(
        "host",
        hostname=socket.gethostname(),
        uid=uid,
        user=user or pwd.getpwuid(uid).pw_name,
        me_uid=os.getuid(),
        pid_ns_nested=len(status_field(os.getpid(), "NSpid")) > 1,
        boot=boot_id(),
        **ptrace_facts(),
    )
    cands = []
    for job in jobs:
        workers = job.get("workers") or workers_of(table, job["pid"])
        env0 = workers[0][1] if workers else {}
        cands.append(
            {
                "pid": job["pid"],
                "cmd": redact_text(" ".join(job["argv"]), [], salt)[:400],
                "started": btime + job["start"] / CLK,
                "ranks": sorted(int(e.get("RANK", -1)) for _, e in workers),
                "key": redact_text(job_key(env0), [], salt) if workers else "",
                "workers": workers,
                "argv": job["argv"],
            }
        )
    hidden = ("workers", "argv")
    emit("candidates", items=[{k: v for k, v in c.items() if k not in hidden} for c in cands])
    chosen = cands[0] if cands else None
    if chosen is not None and chosen["workers"]:
        # gpu10: other jobs of the user whose ranks dump their flight recorders to the same
        # files (the default prefix): a dump there may be theirs, not this job's
        # (--match or not: every torchrun job of the user on this node)
        mine = fr_prefix(chosen["workers"][0][1])
        chosen["fr_shared"] = []
        for other in find_jobs(table, uid, None):
            if other["pid"] == chosen["pid"]:
                continue
            workers = workers_of(table, other["pid"])
            if workers and fr_prefix(workers[0][1]) == mine:
                chosen["fr_shared"].append(other["pid"])
    log_files = {}
    globs = list(PARAMS.get("log_globs") or [])
    paths = [str(p) for p in PARAMS.get("log_paths") or []]
    if chosen is None:  # no live job here: read where it wrote last time, if known
        globs += list(PARAMS.get("fallback_logs") or [])
        paths += [str(p) for p in PARAMS.get("fallback_paths") or []]
    for pattern_glob in globs:
        for path in sorted(glob.glob(os.path.expanduser(pattern_glob)))[:MAX_LOG_FILES]:
            if os.path.isfile(path):
                log_files.setdefault(path, set())
    for path in paths[:MAX_LOG_FILES]:
        if os.path.isfile(path):
            log_files.setdefault(path, set())
    known = []
    if chosen is not None:
        known = observe(chosen, table, btime, salt, window, log_files)
    read_logs(log_files, known, salt)
    for item in PARAMS.get("fr_paths") or [] if chosen is None else []:  # left by a gone job
        emit("fr", postmortem=True, **read_fr(str(item.get("path")), _int(item.get("rank")), 0))
    emit("done", found=chosen is not None)


def observe(job, table, btime, salt, window, log_files):
    """Everything about the chosen job; returns the secret values to scrub logs with."""
    agent_env, env_why = environ(job["pid"])
    agent_env = agent_env or {}
    known = secret_values(agent_env)
    for _, env in job["workers"]:
        known = sorted(set(known) | set(secret_values(env)), key=len, reverse=True)
    emit_agent(job, table, btime, salt, known, agent_env, env_why, log_files)
    workers = job["workers"]
    pids = [pid for pid, _ in workers]
    first = {pid: (proc_stat(pid), {fd: fd_target(pid, fd) for fd in (1, 2)}) for pid in pids}
    t0 = time.monotonic()
    pyspy = find_pyspy(job["argv"], agent_env)
    want_stacks = bool(PARAMS.get("stacks", True) and pyspy is not None and pids)
    ras = RasWatcher(workers, agent_env)
    ras.sample()
    samples = {}
    # Five looks across the window: a rank whose stack never changes did not move (a busy
    # NCCL loop is in all_reduce most of the time: more looks, fewer false "no move").
    # Native frames need a paused process: only when the user allowed pausing.
    native = bool(PARAMS.get("native") and PARAMS.get("allow_pause"))
    for n in range(1, SAMPLES + 1):
        at = window * (n - 1) / (SAMPLES - 1)
        time.sleep(max(0.0, at - (time.monotonic() - t0)))
        if n == SAMPLES:
            ras.sample()
        if want_stacks:
            samples[n] = dump_stacks(pyspy, pids, native, native, 8.0)
    if want_stacks and PARAMS.get("allow_pause") and not native:
        retry = [p for p in pids if all(samples[n][p][0] != 0 for n in samples)]
        if retry:
            samples[BLOCKING_SAMPLE] = dump_stacks(pyspy, retry, False, True, 8.0)
    elapsed = time.monotonic() - t0
    gpu, gpu_note = gpu_usage(set(pids))
    for pid, env in workers:
        emit_rank(pid, env, first[pid], elapsed, gpu.get(pid), btime, salt, known, log_files)
    emit("gpu", note=gpu_note, matched=len(gpu), devices=os.path.exists("/dev/nvidiactl"))
    if pids and pyspy is None and PARAMS.get("pyspy"):
        emit(
            "stacks_unavailable",
            reason="py-spy is not installed at %s on this node (--py-spy)" % PARAMS["pyspy"],
        )
    elif pids and pyspy is None:
        emit(
            "stacks_unavailable",
            reason="py-spy is not installed on this node (looked next to the job's python, "
            "on its PATH and in ~/.local/bin)",
        )
    elif pids and not want_stacks:
        emit("stacks_unavailable", reason="stacks were not asked for (--no-stacks)")
    for sample, result in sorted(samples.items()):
        for pid, (rc, so, se, secs) in result.items():
            emit(
                "stack",
                pid=pid,
                sample=sample,
                rc=rc,
                text=redact_text(so, known, salt)[:200000],
                error=redact_text(se.strip(), known, salt)[-2000:],
                seconds=secs,
                blocking=sample == BLOCKING_SAMPLE or native,
                pyspy=pyspy,
            )
    ras.finish()
    if PARAMS.get("fr", True) and workers:
        flight_recorder(job, workers)
    read_inspector(workers)
    return known


def emit_agent(job, table, btime, salt, known, agent_env, env_why, log_files):
    agent = job["pid"]
    safe_env, redacted = redact_env(agent_env, salt)
    st = table.get(agent) or {}
    fds = {str(fd): fd_target(agent, fd) for fd in (1, 2)}
    emit(
        "agent",
        pid=agent,
        cmd=redact_text(" ".join(job["argv"]), known, salt),
        state=st.get("state"),
        started=btime + st.get("start", 0) / CLK,
        env=safe_env,
        env_error=env_why,
        redacted=redacted,
        fds=fds,
        interfaces=interfaces(),
        shm_bytes=shm_bytes(),
    )
    for fd, target in fds.items():
        if target.get("kind") == "file":
            log_files.setdefault("/proc/%d/fd/%s" % (agent, fd), set()).add(agent)


def emit_rank(pid, env, first, elapsed, gpu, btime, salt, known, log_files):
    """One rank: how it moved between the first look and now."""
    a, fds_a = first
    b = proc_stat(pid)
    now = time.time()
    out = {}
    for fd in (1, 2):
        before, after = fds_a[fd], fd_target(pid, fd)
        info = dict(after)
        if after.get("kind") == "file":
            info["grew"] = after.get("size", 0) - before.get("size", 0)
            info["age_s"] = round(now - after.get("mtime", now), 1)
            log_files.setdefault("/proc/%d/fd/%d" % (pid, fd), set()).add(pid)
        out[str(fd)] = info
    cpu = None
    if a and b:
        cpu = round(100.0 * (b["ticks"] - a["ticks"]) / CLK / max(elapsed, 0.01), 1)
    wanted = {
        k: v
        for k, v in env.items()
        if k in RANK_KEYS + JOB_KEYS or k.startswith(("NCCL_", "TORCH_", "CUDA_"))
    }
    emit(
        "rank",
        pid=pid,
        rank=_int(env.get("RANK")),
        local_rank=_int(env.get("LOCAL_RANK")),
        world_size=_int(env.get("WORLD_SIZE")),
        group_rank=_int(env.get("GROUP_RANK")),
        state=b["state"] if b else "gone",
        cpu_pct=cpu,
        rss_bytes=(b or {}).get("rss"),
        threads=(b or {}).get("threads"),
        started=btime + (a or {}).get("start", 0) / CLK,
        wchan=read_text("/proc/%d/wchan" % pid),
        cmd=redact_text(" ".join(cmdline(pid)), known, salt)[:400],
        out=out,
        env=redact_env(wanted, salt)[0],
        gpu=gpu,
        nspid=status_field(pid, "NSpid"),
    )


class RasWatcher:
    """Asks the job's NCCL RAS socket in a thread, so the stacks are read meanwhile."""

    def __init__(self, workers, agent_env):
        pids = [pid for pid, _ in workers]
        self.on = bool(
            PARAMS.get("ras", True)
            and pids
            and agent_env.get("NCCL_RAS_ENABLE", "1") != "0"
            and uses_nccl(pids[0])
        )
        self.addr = ras_addr(workers[0][1]) if workers else None
        self.results = []
        self.thread = None

    def sample(self):
        if not self.on:
            return
        if self.thread is not None:
            self.thread.join(6)
        self.thread = threading.Thread(target=lambda: self.results.append(ras_sample(self.addr)))
        self.thread.daemon = True
        self.thread.start()

    def finish(self):
        if self.thread is not None:
            self.thread.join(6)
        for i, r in enumerate(self.results):
            emit("ras", sample=i + 1, **r)


def flight_recorder(job, workers):
    env0 = workers[0][1]
    ranks = [r for r in (_int(e.get("RANK")) for _, e in workers) if r is not None]
    triggered = None
    prefix = fr_prefix(env0)
    if PARAMS.get("trigger_dump") and env0.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE"):
        asked = time.time()
        triggered = trigger_dump(env0, ranks)
        # torch writes the dump from its watchdog thread: wait until every rank's file is
        # newer than the request, or DUMP_WAIT_S.
        deadline = time.monotonic() + DUMP_WAIT_S
        while time.monotonic() < deadline and any(t["ok"] for t in triggered):
            if all(_mtime(prefix + str(r)) >= asked for r in ranks):
                break
            time.sleep(0.25)
        for t in triggered:
            t["dumped"] = _mtime(prefix + str(t["rank"])) >= asked
    shared = job.get("fr_shared") or []
    if fr_enabled(env0) or triggered or any(os.path.exists(prefix + str(r)) for r in ranks):
        for rank in ranks:
            rec = read_fr(prefix + str(rank), rank, job["started"])
            emit("fr", triggered=triggered, shared_with=shared, **rec)
    emit(
        "fr_config",
        enabled=fr_enabled(env0),
        shared_with=shared,
        prefix=prefix,
        pipe=env0.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE"),
        triggered=triggered,
    )


def read_logs(files, known, salt):
    seen = set()
    limit = int(PARAMS.get("log_lines", 1500))
    for path, pids in sorted(files.items()):
        try:
            st = os.stat(path)
        except OSError as exc:
            emit("log", path=path, error=exc.strerror or str(exc), pids=sorted(pids))
            continue
        if not statmod.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        shown = path
        if path.startswith("/proc/"):
            try:
                shown = os.readlink(path)
            except OSError:
                pass
        lines, err = tail_lines(path, known, salt, limit)
        writers = sorted({p for other, ps in files.items() for p in ps if _same(other, st)})
        emit(
            "log",
            path=shown,
            fid=identity_or_none(path),
            size=st.st_size,
            mtime=st.st_mtime,
            age_s=round(time.time() - st.st_mtime, 1),
            pids=writers,
            lines=lines or [],
            error=err,
        )


def _mtime(path):
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def _same(path, st):
    try:
        other = os.stat(path)
    except OSError:
        return False
    return (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino)


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


if __name__ == "__main__":
    main()
