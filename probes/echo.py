# Test probe: echoes its params, optionally sleeps or spawns a child, so the
# transport and the lifeline can be tested on their own.
import time

emit("hello", params=PARAMS, pid=os.getpid(), python=sys.version.split()[0])
if PARAMS.get("spawn_sleep"):
    child = subprocess.Popen(["sleep", str(PARAMS["spawn_sleep"])])
    emit("spawned", pid=child.pid)
if PARAMS.get("orphans"):
    # torchrun's way: each child in a session of its own, and the parent gone first
    code = (
        "import subprocess, sys\n"
        "for _ in range(%d):\n"
        "    c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],"
        " start_new_session=True)\n"
        "    print(c.pid, flush=True)\n" % int(PARAMS["orphans"])
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    emit("orphans", pids=[int(x) for x in out.stdout.split()])
if PARAMS.get("stderr"):
    sys.stderr.write(PARAMS["stderr"] + "\n")
if PARAMS.get("garbage"):
    os.write(1, b"this is not json\n")
for i in range(int(PARAMS.get("ticks", 0))):
    emit("tick", i=i)
    time.sleep(float(PARAMS.get("interval", 0.1)))
if PARAMS.get("sleep"):
    time.sleep(float(PARAMS["sleep"]))
emit("done")
sys.exit(int(PARAMS.get("exit", 0)))
