# ddptui probe bootstrap: runs on a node with the training environment's python.
#
# Started as `PYTHON -u -c STAGE0` (see ddptui/transport/base.py), it reads one
# length-prefixed JSON payload from stdin ({"name", "source", "params"}), runs
# the probe in this same process (one interpreter start per probe, not two),
# and keeps stdin open as a lifeline watched by a thread: when stdin closes
# (ddptui stopped the probe, quit, or the SSH channel went away) it kills every
# process the probe started (by ancestry and session, read from /proc), then
# exits. Lines that arrive on stdin after the payload are commands for the probe: each
# complete line goes into INBOX (a queue.Queue the probe sees as a global), so a
# long-lived probe (the fabric step's worker) can be driven round by round. Closing an SSH
# channel does not kill a non-PTY remote process and OpenSSH refuses signal
# requests for root sessions, so this is how nothing outlives the run.
# stdlib only; must run on Python 3.8+.
import json
import os
import queue
import select
import signal
import sys
import threading
import time
import traceback

GRACE_S = 2.0


def _read_exact(n):
    chunks = []
    while n > 0:
        chunk = sys.stdin.buffer.read(n)
        if not chunk:
            raise SystemExit(97)
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _descendants(root):
    """Every live process whose ancestry or session leads back to root (read from /proc)."""
    parents = {}
    sessions = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry, "rb") as fh:
                stat = fh.read().decode("utf-8", "replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields[0] == "Z":
            continue
        parents[int(entry)] = int(fields[1])
        sessions[int(entry)] = int(fields[3])  # state ppid pgrp SESSION tty_nr ...
    found = {root} if root in parents else set()
    changed = True
    while changed:
        changed = False
        for pid, ppid in parents.items():
            if pid not in found and (ppid in found or sessions.get(pid) == root):
                found.add(pid)
                changed = True
    return found


def _signal_all(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def kill_tree(child):
    """SIGTERM the whole tree, then SIGKILL what is left after a grace period. The tree is
    read again on every pass: a process forked meanwhile (torchrun starting a worker) is
    signalled too, and this returns only once none is left (or after a bounded wait)."""
    me = os.getpid()
    seen = _descendants(child.pid) - {me}
    _signal_all(seen, signal.SIGTERM)
    sig = signal.SIGTERM
    deadline = time.monotonic() + GRACE_S
    while True:
        child.poll()
        live = (_descendants(child.pid) | {p for p in seen if _alive(p)}) - {me}
        if not live:
            return
        _signal_all(live - seen, sig)
        seen |= live
        if time.monotonic() >= deadline:
            if sig == signal.SIGKILL:
                return  # unkillable (D state): nothing more a signal can do
            sig = signal.SIGKILL
            _signal_all(live, sig)
            deadline = time.monotonic() + GRACE_S
        time.sleep(0.05)


def _prctl():
    """libc's prctl, or None (not Linux, no libc)."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except Exception:  # noqa: BLE001 - then ancestry and session are all kill_tree has
        return None


def _become_subreaper(prctl):
    """Orphans in the probe's tree are re-parented to this process, not to init: torchrun
    starts each worker in a session of its own, and a worker whose torchrun died first
    would otherwise leave the tree that kill_tree reads (and, under Slurm's
    proctrack/linuxproc, the step that scancel ends). Linux only; best effort."""
    if prctl is not None:
        prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _pdeathsig_setter(prctl):
    """A preexec_fn for the probe's own children (DIE_WITH_PROBE): they get SIGKILL when
    this process ends, however it ends (even SIGKILL from slurmstepd). None off Linux."""
    if prctl is None:
        return None
    parent = os.getpid()

    def setter():
        prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the probe already ended while this one forked
            os._exit(137)

    return setter


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            stat = fh.read().decode("utf-8", "replace")
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] != "Z"


INBOX = queue.Queue()  # command lines ddptui sends after the payload, as bytes
INBOX_MAX = 1 << 20  # a line longer than this is dropped (a probe's commands are small)


def _lifeline(me):
    """Wait for stdin to close, then take the probe and everything it started down.
    Until then, every complete line read is a command for the probe (INBOX)."""
    pending = b""
    while True:
        try:
            ready, _, _ = select.select([0], [], [], 1.0)
            if not ready:
                continue
            data = os.read(0, 65536)
        except OSError:
            break
        if not data:
            break
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if line.strip():
                INBOX.put(line)
        if len(pending) > INBOX_MAX:
            pending = b""
    _shutdown(me, 143)


CLEANUP = []  # paths a probe asks to have removed however it ends (temp dirs)


def _shutdown(me, code):
    kill_tree(me)
    _cleanup()
    kill_tree(me)  # what the main thread forked during the cleanup
    _exit(code)


TAGGED = []  # set when one srun step runs this probe on many nodes (see _select_params)


def _exit(code):
    """Exit; under srun, first say so on stdout: srun reports one status for the whole
    step, and this line gives ddptui each node's own."""
    if TAGGED:
        try:
            os.write(1, b"ddptui-exit %d\n" % code)
        except OSError:
            pass
    os._exit(code)


def _select_params(payload):
    """One payload for every node of an srun step: `common` params, overlaid with this
    node's own (`by_node`, keyed by Slurm's name for the node). The first line says which
    node and step this is, so the demultiplexer can name the node behind srun's label."""
    if "by_node" not in payload:
        return payload["params"]
    node = os.environ.get("SLURMD_NODENAME", "")
    params = dict(payload.get("common") or {})
    params.update(payload["by_node"].get(node) or {})
    TAGGED.append(node)
    step = os.environ.get("SLURM_STEP_ID", "")
    os.write(1, ("ddptui-node %s %s %d\n" % (node, step, os.getpid())).encode("utf-8"))
    return params


def _cleanup():
    import shutil

    for path in CLEANUP:
        shutil.rmtree(path, ignore_errors=True)


class _Self:
    """kill_tree() works on a Popen-like object; here the probe runs in this very process."""

    def __init__(self):
        self.pid = os.getpid()

    def poll(self):
        return None

    def wait(self):
        return None


def main():
    size = int(sys.stdin.buffer.readline())
    payload = json.loads(_read_exact(size).decode("utf-8"))
    params = _select_params(payload)
    me = _Self()
    prctl = _prctl()
    _become_subreaper(prctl)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: _shutdown(me, 128 + signum))
    watcher = threading.Thread(target=_lifeline, args=(me,), daemon=True)
    watcher.start()
    code = 0
    try:
        exec(  # noqa: S102 - running the shipped probe is this file's purpose
            compile(payload["source"], "<probe %s>" % payload["name"], "exec"),
            {
                "__name__": "__main__",
                "PARAMS": params,
                "CLEANUP": CLEANUP,
                "INBOX": INBOX,
                "DIE_WITH_PROBE": _pdeathsig_setter(prctl),
            },
        )
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - a probe bug becomes stderr text and exit 1
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # The probe finished by itself; anything it left behind goes too.
    kill_tree(me)
    _cleanup()
    _exit(code)


main()
