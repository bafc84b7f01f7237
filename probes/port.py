# port probe. PARAMS:
#   {"mode": "listen", "addr": "0.0.0.0" | "auto", "port": 29500 | 0, "master_addr": ...}
#     bind and listen until the lifeline closes; "auto" = the address this node
#     uses to reach the master (what NCCL/gloo would advertise).
#   {"mode": "connect", "targets": [{"id", "addr", "port"}], "timeout": 3}
import errno
import socket
import threading
import time


def owner_of(port):
    """Who listens on port here: [{"pid", "comm", "uid"}] (needs /proc access; root sees all)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in (read_text(table, "") or "").splitlines()[1:]:
            parts = line.split()
            if len(parts) > 9 and parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(parts[9])
    owners = []
    if not inodes:
        return owners
    wanted = set("socket:[%s]" % i for i in inodes)
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fds = os.listdir("/proc/%s/fd" % pid)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink("/proc/%s/fd/%s" % (pid, fd)) in wanted:
                    st = os.stat("/proc/%s" % pid)
                    owners.append(
                        {
                            "pid": int(pid),
                            "comm": read_text("/proc/%s/comm" % pid),
                            "uid": st.st_uid,
                        }
                    )
                    break
            except OSError:
                continue
    return owners


TCP_STATES = {"01": "ESTABLISHED", "06": "TIME_WAIT", "08": "CLOSE_WAIT", "0A": "LISTEN"}


def port_states(port):
    """How many sockets use local port `port`, by TCP state (explains EADDRINUSE with no owner)."""
    states = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in (read_text(table, "") or "").splitlines()[1:]:
            parts = line.split()
            if len(parts) > 3 and int(parts[1].rsplit(":", 1)[1], 16) == port:
                name = TCP_STATES.get(parts[3], parts[3])
                states[name] = states.get(name, 0) + 1
    return states


def listen():
    addr = PARAMS.get("addr", "0.0.0.0")
    if addr == "auto":
        route = route_to(PARAMS["master_addr"]) or {}
        addr = route.get("src") or "0.0.0.0"
    port = int(PARAMS.get("port", 0))
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    # Like torch's TCPStore: TIME_WAIT leftovers of earlier runs must not block the
    # bind, while a real listener still does (Linux refuses a second LISTEN socket).
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((addr, port))
        sock.listen(128)
    except OSError as exc:
        emit(
            "bind_failed",
            addr=addr,
            port=port,
            errno=exc.errno,
            error=exc.strerror or str(exc),
            owners=owner_of(port) if exc.errno == errno.EADDRINUSE else [],
            states=port_states(port),
        )
        return
    emit("listening", addr=addr, port=sock.getsockname()[1])
    sock.settimeout(0.5)
    deadline = time.monotonic() + float(PARAMS.get("max_s", 600))
    while time.monotonic() < deadline:
        try:
            conn, peer = sock.accept()
        except socket.timeout:
            continue
        emit("accepted", peer=peer[0])
        conn.close()


def connect_one(target, timeout, results):
    result, err, ms = tcp_connect(target["addr"], target["port"], timeout)
    results.append(dict(target, result=result, error=err, ms=ms))


def connect():
    timeout = float(PARAMS.get("timeout", 3))
    results = []
    threads = [
        threading.Thread(target=connect_one, args=(t, timeout, results))
        for t in PARAMS.get("targets", [])
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for r in results:
        emit("connect", **r)


if PARAMS.get("mode") == "listen":
    listen()
else:
    connect()
