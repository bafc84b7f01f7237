# ping probe: how MASTER_ADDR resolves here, whether it answers (ICMP, else TCP),
# and the route (interface) to it. PARAMS: master_addr, master_port, tcp_ports.
import re
import socket

master = PARAMS["master_addr"]
addrs, gai_error = resolve(master)
target = addrs[0] if addrs else None


def icmp(addr):
    argv = ["ping", "-n", "-c", "3", "-i", "0.2", "-W", "1", addr]
    if ":" in addr:
        argv.insert(1, "-6")
    rc, out, err = run(argv, timeout=6)
    text = (out + err).strip()
    if rc is None:
        return {"ok": None, "detail": text or "ping not available"}
    if rc != 0 and (
        "Operation not permitted" in text
        or ("socket" in text.lower() and "permission" in text.lower())
    ):
        return {"ok": None, "detail": text.splitlines()[-1] if text else "not permitted"}
    m = re.search(r"= [\d.]+/([\d.]+)/", out)
    loss = re.search(r"(\d+(?:\.\d+)?)% packet loss", out)
    return {
        "ok": rc == 0,
        "rtt_ms": float(m.group(1)) if m else None,
        "loss_pct": float(loss.group(1)) if loss else None,
        "detail": text.splitlines()[-1] if text else "",
    }


def tcp(addr, port, timeout=2.0):
    result, _, ms = tcp_connect(addr, port, timeout)
    return {"port": port, "result": result, "ms": ms}


record = {
    "master_addr": master,
    "resolved": addrs,
    "gai_error": gai_error,
    "hosts_lines": hosts_entries(master),
    "hostname": socket.gethostname(),
    "local_addrs": [a["addr"] for i in interfaces() for a in i["addrs"]],
}
if target is not None:
    record["route"] = route_to(target)
    record["icmp"] = icmp(target)
    record["tcp"] = (
        [tcp(target, int(p)) for p in PARAMS.get("tcp_ports", [])]
        if not record["icmp"].get("ok")
        else []
    )
emit("ping", **record)
