# port probe. PARAMS:
#   {"mode": "listen", "addr": "0.0.0.0" | "auto", "port": 29500 | 0, "master_addr": ...}
#     bind and listen until the lifeline closes; "auto" = the address this node
#     uses to reach the master (what NCCL/gloo would advertise).
#   {"mode": "connect", "targets": [{"id", "addr", "port", "round"}], "timeout": 3,
#    "slot": 0.05, "start_at": EPOCH, "max_inflight": 64, "retry": true}
#     connect to each target, round r starting at start_at + r * slot (the login node's
#     paced schedule; rounds line up across nodes when their clocks do); every failed
#     target is tried once more; for those that fail twice, the neighbour (ARP) entry's
#     state.  One "connect" record per target, then one "neigh" record with the
#     kernel's neighbour-table facts (gc_thresh*, overflows seen during the test).
import errno
import socket
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
        master = PARAMS["master_addr"]
        try:  # a hostname (a Slurm node name): `ip route get` wants an address
            master = socket.getaddrinfo(master, None, type=socket.SOCK_STREAM)[0][4][0]
        except (OSError, IndexError):
            pass
        route = route_to(master) or {}
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


MAX_START_WAIT = 10.0  # a start_at further away than this means the clocks disagree
NEIGH_PATH = "/proc/sys/net/ipv4/neigh/default/"
OVERFLOW_TEXTS = ("neighbor table overflow", "neighbour table overflow")
CONNECT_ERRNOS = {
    0: "connected",
    errno.ECONNREFUSED: "refused",
    errno.EHOSTUNREACH: "noroute",
    errno.ENETUNREACH: "noroute",
    errno.ETIMEDOUT: "timeout",
}


def start_connect(target):
    """A non-blocking connect: (socket still connecting, None) or (None, errno)."""
    addr = target["addr"]
    sock = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
    sock.setblocking(False)
    try:
        code = sock.connect_ex((addr, int(target["port"])))
    except OSError as exc:  # e.g. an address that does not parse
        code = exc.errno or errno.EINVAL
    if code in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY):
        return sock, None
    sock.close()
    return None, code


def connect_result(target, code, began, timeout):
    if code == "timeout":
        result, err = "timeout", "timed out after %gs" % timeout
    else:
        result = CONNECT_ERRNOS.get(code, "error")
        err = None if code == 0 else os.strerror(code)
    return dict(target, result=result, error=err, ms=round((time.monotonic() - began) * 1000, 1))


def paced_connects(items, timeout, slot, max_inflight):
    """Non-blocking connects: item (round, target, n) starts at round * slot from now,
    with at most max_inflight open at once.  One result per item, carrying "_n": n."""
    import selectors

    sel = selectors.DefaultSelector()
    items = sorted(items, key=lambda it: it[0])
    start = time.monotonic()
    results = []
    inflight = {}  # socket -> (target, started)
    nxt = 0

    def due():
        return start + items[nxt][0] * slot if nxt < len(items) else None

    def finish(sock, code):
        target, began = inflight.pop(sock)
        sel.unregister(sock)
        sock.close()
        results.append(connect_result(target, code, began, timeout))

    def launch(item):
        began = time.monotonic()
        target = dict(item[1], _n=item[2])
        sock, code = start_connect(target)
        if sock is None:
            results.append(connect_result(target, code, began, timeout))
        else:
            inflight[sock] = (target, began)
            sel.register(sock, selectors.EVENT_WRITE)

    while nxt < len(items) or inflight:
        while nxt < len(items) and len(inflight) < max_inflight and due() <= time.monotonic():
            launch(items[nxt])
            nxt += 1
        waits = [began + timeout for _, began in inflight.values()]
        if nxt < len(items) and len(inflight) < max_inflight:
            waits.append(due())
        wait = max(0.0, min(waits) - time.monotonic()) if waits else 0.0
        if inflight:
            for key, _ in sel.select(wait):
                finish(key.fileobj, key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
        else:
            time.sleep(wait)
        now = time.monotonic()
        for sock in [s for s, (_, began) in inflight.items() if now - began >= timeout]:
            finish(sock, "timeout")
    sel.close()
    return results


def neighbour_states():
    """{address: NUD state} of this node's neighbour table, or None if unreadable."""
    rc, out, _ = run(["ip", "neigh", "show"], timeout=5)
    if rc == 0:
        states = {}
        for line in out.splitlines():
            fields = line.split()
            if fields:
                # "ADDR dev IF lladdr MAC [router] STATE" or "ADDR dev IF INCOMPLETE/FAILED"
                states[fields[0]] = fields[-1]
        return states
    text = read_text("/proc/net/arp")  # no iproute2: complete (0x2) or not
    if text is None:
        return None
    states = {}
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 3:
            states[fields[0]] = "REACHABLE" if int(fields[2], 16) & 0x2 else "INCOMPLETE"
    return states


SETTLE_S = 4.0  # how long entries in flux may take to be answered or given up


def settled_neighbours(peers):
    """neighbour_states() once the peers' entries are out of flux: an entry being
    resolved (INCOMPLETE) or re-verified (PROBE, DELAY) ends REACHABLE when the peer
    answers ARP, FAILED when it does not (3 tries, 1 s apart, by default)."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        states = neighbour_states()
        moving = states is not None and any(
            states.get(p) in ("INCOMPLETE", "PROBE", "DELAY") for p in peers
        )
        if not moving or time.monotonic() >= deadline:
            return states
        time.sleep(0.25)


def neighbour_addrs(addrs):
    """{addr: the address whose neighbour entry a connection to addr needs}: the gateway
    of the longest matching route when it has one, else addr itself.  One `ip route`
    per family for all addresses (a failed edge to every peer must not cost a process
    each)."""
    import ipaddress

    out = {a: a for a in addrs}
    for flag in ("-4", "-6"):
        wanted = [a for a in addrs if (":" in a) == (flag == "-6")]
        if not wanted:
            continue
        rc, text, _ = run(["ip", flag, "-o", "route", "show"], timeout=5)
        if rc != 0:
            continue
        routes = []
        for line in text.splitlines():
            fields = line.split()
            if not fields:
                continue
            prefix = "::/0" if flag == "-6" else "0.0.0.0/0"
            prefix = prefix if fields[0] == "default" else fields[0]
            via = fields[fields.index("via") + 1] if "via" in fields[:-1] else None
            try:
                routes.append((ipaddress.ip_network(prefix, strict=False), via))
            except ValueError:
                continue
        for a in wanted:
            try:
                ip = ipaddress.ip_address(a)
            except ValueError:
                continue
            if ip.is_loopback:
                continue
            best = max(
                (r for r in routes if ip in r[0]), key=lambda r: r[0].prefixlen, default=None
            )
            if best is not None and best[1]:
                out[a] = best[1]
    return out


def table_fulls():
    """The kernel's count of neighbour-table-full events (ARP table), None if unreadable
    (/proc/net/stat/arp_cache: one hex row per CPU, summed)."""
    text = read_text("/proc/net/stat/arp_cache")
    if not text:
        return None
    lines = text.splitlines()
    names = lines[0].split()
    if "table_fulls" not in names:
        return None
    col = names.index("table_fulls")
    return sum(int(row.split()[col], 16) for row in lines[1:] if len(row.split()) > col)


def uptime():
    text = read_text("/proc/uptime")
    return float(text.split()[0]) if text else None


def kernel_overflows(since):
    """How many 'neighbour table overflow' kernel messages were logged after uptime
    `since`; None when the kernel log cannot be read (needs CAP_SYSLOG)."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    count = 0
    try:
        while True:
            try:
                rec = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten while reading: go on
                    continue
                break
            if not rec:
                break
            head, _, msg = rec.decode("utf-8", "replace").partition(";")
            fields = head.split(",")
            if len(fields) < 3 or not any(t in msg for t in OVERFLOW_TEXTS):
                continue
            if since is None or int(fields[2]) / 1e6 >= since:
                count += 1
    finally:
        os.close(fd)
    return count


def gc_thresholds():
    out = {}
    for name in ("gc_thresh1", "gc_thresh2", "gc_thresh3"):
        value = read_text(NEIGH_PATH + name)  # absent in a container's network namespace
        out[name] = int(value) if value and value.isdigit() else None
    return out


def connect():
    timeout = float(PARAMS.get("timeout", 3))
    slot = float(PARAMS.get("slot", 0))
    max_inflight = max(1, int(PARAMS.get("max_inflight", 64)))
    targets = PARAMS.get("targets", [])
    skew = None
    start_at = PARAMS.get("start_at")
    if start_at:
        delay = float(start_at) - time.time()
        if 0 < delay <= MAX_START_WAIT:
            time.sleep(delay)
        elif abs(delay) > MAX_START_WAIT:
            skew = round(-delay, 1)  # this clock is ahead (+) or behind (-) by about this
    fulls_before = table_fulls()
    since = uptime()
    results = paced_connects(
        [(int(t.get("round", 0)), t, n) for n, t in enumerate(targets)], timeout, slot, max_inflight
    )
    failed = [r for r in results if r["result"] != "connected"]
    if failed and PARAMS.get("retry", True):
        # Once more, paced as before, before anything is blamed.
        again = paced_connects(
            [(int(targets[r["_n"]].get("round", 0)), targets[r["_n"]], r["_n"]) for r in failed],
            timeout,
            slot,
            max_inflight,
        )
        second = {r["_n"]: r for r in again}
        results = [
            dict(second[r["_n"]], attempts=2, first=r["result"])
            if r["result"] != "connected"
            else r
            for r in results
        ]
    still = [r for r in results if r["result"] != "connected"]
    if still:
        via = neighbour_addrs(sorted({r["addr"] for r in still}))
        states = settled_neighbours(set(via.values()))
        for r in still:
            r["neigh_addr"] = via[r["addr"]]
            r["neigh"] = None if states is None else states.get(via[r["addr"]], "none")
    for r in results:
        r.pop("_n")
        emit("connect", **r)
    fulls_after = table_fulls()
    emit(
        "neigh",
        table_fulls=None
        if fulls_before is None or fulls_after is None
        else fulls_after - fulls_before,
        overflows=kernel_overflows(since - 1) if (failed and since is not None) else None,
        clock_skew_s=skew,
        **gc_thresholds(),
    )


if PARAMS.get("mode") == "listen":
    listen()
else:
    connect()
