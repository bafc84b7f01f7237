# Test probe: echoes its params, optionally sleeps or spawns a child, so the
# transport and the lifeline can be tested on their own.
import time

emit("hello", params=PARAMS, pid=os.getpid(), python=sys.version.split()[0])
if PARAMS.get("spawn_sleep"):
    child = subprocess.Popen(["sleep", str(PARAMS["spawn_sleep"])])
    emit("spawned", pid=child.pid)
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
