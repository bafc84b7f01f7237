# ddptui probe bootstrap: runs on a node with the training environment's python.
#
# Started as `PYTHON -u -c STAGE0` (see ddptui/transport/base.py), it reads one
# length-prefixed JSON payload from stdin ({"name", "source", "params"}), runs
# the probe in a child process in a new session, and keeps stdin open as a
# lifeline: when stdin closes (ddptui stopped the probe, quit, or the SSH
# channel went away) it kills the child and every descendant. Closing an SSH
# channel does not kill a non-PTY remote process and OpenSSH refuses signal
# requests for root sessions, so this is how nothing outlives the run.
# stdlib only; must run on Python 3.8+.
import json
import os
import select
import signal
import subprocess
import sys
import time

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
        sessions[int(entry)] = int(fields[4])
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
    """SIGTERM the whole tree, then SIGKILL what is left after a grace period."""
    pids = _descendants(child.pid)
    _signal_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline:
        child.poll()
        pids = _descendants(child.pid) | {p for p in pids if _alive(p)}
        if not pids:
            return
        time.sleep(0.05)
    _signal_all(pids | _descendants(child.pid), signal.SIGKILL)
    child.wait()


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            stat = fh.read().decode("utf-8", "replace")
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] != "Z"


def main():
    size = int(sys.stdin.buffer.readline())
    payload = json.loads(_read_exact(size).decode("utf-8"))
    runner = (
        "import json,sys;d=json.loads(sys.stdin.readline());"
        "exec(compile(d['source'],'<probe '+d['name']+'>','exec'),"
        "{'__name__':'__main__','PARAMS':d['params']})"
    )
    child = subprocess.Popen(
        [sys.executable, "-u", "-c", runner],
        stdin=subprocess.PIPE,
        start_new_session=True,
    )
    child.stdin.write((json.dumps(payload) + "\n").encode("utf-8"))
    child.stdin.close()

    def _on_signal(signum, frame):
        kill_tree(child)
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _on_signal)
    while child.poll() is None:
        ready, _, _ = select.select([0], [], [], 0.2)
        if ready and not os.read(0, 4096):
            # The lifeline closed: ddptui wants this probe gone.
            kill_tree(child)
            os._exit(143)
    # The probe finished by itself; anything it left behind goes too.
    leftovers = _descendants(child.pid) - {child.pid}
    if leftovers:
        _signal_all(leftovers, signal.SIGKILL)
    os._exit(child.returncode if child.returncode >= 0 else 128 - child.returncode)


main()
