# The user's processes as /proc shows them, for the job probe (probes/job.py, sent
# after this file): the process table, command lines, environments, open files, and
# which torchrun trees and rank processes are a job. Read-only: nothing is signalled,
# no pipe or terminal is opened.
# stdlib only (os from _common.py); must run on Python 3.8+.
import stat as statmod

AGENT_MODULES = ("torch.distributed.run", "torch.distributed.launch")
# A ddptui probe's interpreter (transport STAGE0): its torchrun is ddptui's, not the user's.
DDPTUI_STAGE0 = "exec(sys.stdin.buffer.read(int(sys.stdin.buffer.readline())))"
JOB_KEYS = ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "WORLD_SIZE")
CLK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


# --------------------------------------------------------------------------- /proc


def _read(path, limit=1 << 20):
    try:
        with open(path, "rb") as fh:
            return fh.read(limit)
    except OSError:
        return None


def proc_stat(pid):
    """state, ppid, session, cpu ticks, threads, start ticks, rss bytes; None when gone."""
    raw = _read("/proc/%d/stat" % pid)
    if raw is None:
        return None
    text = raw.decode("utf-8", "replace")
    f = text[text.rfind(")") + 2 :].split()
    return {
        "state": f[0],
        "ppid": int(f[1]),
        "session": int(f[3]),
        "ticks": int(f[11]) + int(f[12]),
        "threads": int(f[17]),
        "start": int(f[19]),
        "rss": int(f[21]) * PAGE,
    }


def cmdline(pid):
    raw = _read("/proc/%d/cmdline" % pid)
    if not raw:
        return []
    return [a.decode("utf-8", "replace") for a in raw.rstrip(b"\0").split(b"\0")]


def environ(pid):
    """(env dict, None) or (None, why not)."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as fh:
            raw = fh.read(4 << 20)
    except PermissionError:
        return None, "permission denied (another user's process)"
    except OSError as exc:
        return None, str(exc)
    env = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            env[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return env, None


def boot_time():
    for line in (read_text("/proc/stat", "") or "").splitlines():
        if line.startswith("btime "):
            return int(line.split()[1])
    return 0


def status_field(pid, name):
    for line in (read_text("/proc/%d/status" % pid, "") or "").splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].split()
    return []


LAUNCHERS = ("srun", "salloc", "sbatch", "mpirun", "mpiexec", "ssh", "pdsh", "clush")


def is_agent(argv):
    """torchrun, `python -m torch.distributed.run` or the old launcher; not the command
    that starts it elsewhere (`srun torchrun ...` on the batch host is srun)."""
    if argv and os.path.basename(argv[0]) in LAUNCHERS:
        return False
    for i, arg in enumerate(argv[:4]):
        if os.path.basename(arg) == "torchrun":
            return True
        if arg == "-m" and i + 1 < len(argv) and argv[i + 1] in AGENT_MODULES:
            return True
    return False


def process_table():
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        st = proc_stat(pid)
        if st is None:
            continue
        try:
            st["uid"] = os.stat("/proc/%d" % pid).st_uid
        except OSError:
            continue
        table[pid] = st
    return table


def descendants(table, root):
    children = {}
    for pid, st in table.items():
        children.setdefault(st["ppid"], []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            out.append(child)
            todo.append(child)
    return out


def ancestors(table, pid):
    seen = []
    while pid in table and pid not in seen and pid > 1:
        seen.append(pid)
        pid = table[pid]["ppid"]
    return seen[1:]


def fd_target(pid, fd):
    """What fd N of pid is: {"kind": file|pipe|socket|tty|other, "path", "size", "mtime"}."""
    link = "/proc/%d/fd/%d" % (pid, fd)
    try:
        target = os.readlink(link)
    except OSError as exc:
        return {"kind": "unknown", "path": None, "error": exc.strerror or str(exc)}
    out = {"kind": "other", "path": target}
    if target.startswith("pipe:"):
        out["kind"] = "pipe"
    elif target.startswith("socket:"):
        out["kind"] = "socket"
    elif target.startswith(("/dev/pts", "/dev/tty")) or target == "/dev/console":
        out["kind"] = "tty"
    elif target == "/dev/null":
        out["kind"] = "null"
    else:
        try:
            st = os.stat(link)  # through the magic link: works across mount namespaces
        except OSError:
            return out
        if statmod.S_ISREG(st.st_mode):
            out.update(
                kind="file", size=st.st_size, mtime=st.st_mtime, inode=[st.st_dev, st.st_ino]
            )
    return out


# --------------------------------------------------------------------------- the job


def find_jobs(table, uid, pattern):
    """Every torchrun tree of uid (matching pattern when given), newest first."""
    me = os.getpid()
    jobs = []
    for pid, st in table.items():
        if st["uid"] != uid or pid == me:
            continue
        argv = cmdline(pid)
        if not is_agent(argv):
            continue
        # An agent started by another agent's tree (a nested launcher) is part of that job.
        if any(is_agent(cmdline(a)) for a in ancestors(table, pid)):
            continue
        if any(DDPTUI_STAGE0 in " ".join(cmdline(a)) for a in ancestors(table, pid)):
            continue  # ddptui's own allreduce probe
        text = " ".join(argv)
        if pattern is not None and not pattern.search(text):
            continue
        jobs.append({"pid": pid, "argv": argv, "start": st["start"]})
    jobs.sort(key=lambda j: j["start"], reverse=True)
    return jobs


def slurm_task_jobs(table, uid, pattern, job_id):
    """Ranks started by `srun python train.py` in Slurm job job_id (no torchrun): one
    candidate per job step, its ranks the step's tasks (topmost process carrying
    SLURM_PROCID), RANK/LOCAL_RANK/WORLD_SIZE read from SLURM_PROCID/SLURM_LOCALID/
    SLURM_NTASKS when the environment does not set them. Our own step and ddptui's
    probes are skipped; torchrun under srun is found as an agent (find_jobs)."""
    mine = os.environ.get("SLURM_STEP_ID")
    envs = {}
    for pid, st in table.items():
        if st["uid"] != uid or pid == os.getpid():
            continue
        env = environ(pid)[0]
        if not env or env.get("SLURM_JOB_ID") != job_id or "SLURM_PROCID" not in env:
            continue
        step = env.get("SLURM_STEP_ID", "")
        if not step.isdigit() or step == mine:
            continue  # the batch script, the extern step, this probe's own step
        envs[pid] = (env, step)
    steps = {}
    for pid, (env, step) in envs.items():
        above = ancestors(table, pid)
        if any(a in envs for a in above):
            continue  # a child of a task (DataLoader worker, a shell's python)
        argv = cmdline(pid)
        if is_agent(argv) or any(DDPTUI_STAGE0 in " ".join(cmdline(a)) for a in [pid, *above]):
            continue
        if pattern is not None and not pattern.search(" ".join(argv)):
            continue
        rank_env = dict(env)
        for key, slurm_key in (("RANK", "SLURM_PROCID"), ("LOCAL_RANK", "SLURM_LOCALID"),
                               ("WORLD_SIZE", "SLURM_NTASKS"), ("GROUP_RANK", "SLURM_NODEID")):
            if key not in rank_env and slurm_key in env:
                rank_env[key] = env[slurm_key]
        steps.setdefault(step, []).append((pid, rank_env, table[pid]["start"], argv))
    jobs = []
    for step, tasks in steps.items():
        tasks.sort(key=lambda t: _int(t[1].get("RANK")) or 0)
        jobs.append(
            {
                "pid": tasks[0][0],
                "argv": tasks[0][3],
                "start": min(t[2] for t in tasks),
                "workers": [(t[0], t[1]) for t in tasks],
                "slurm_step": "%s.%s" % (job_id, step),
            }
        )
    jobs.sort(key=lambda j: j["start"], reverse=True)
    return jobs


def workers_of(table, agent):
    """The rank processes: the topmost descendants that carry RANK in their environment
    (DataLoader workers below them inherit it and are not ranks)."""
    envs = {pid: environ(pid)[0] for pid in descendants(table, agent)}
    out = []
    for pid, env in envs.items():
        if env is None or "RANK" not in env:
            continue
        if any("RANK" in (envs.get(p) or {}) for p in ancestors(table, pid)):
            continue
        out.append((pid, env))
    return out


def job_key(env):
    return "|".join("%s=%s" % (k, env.get(k, "")) for k in JOB_KEYS)
