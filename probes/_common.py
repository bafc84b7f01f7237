# Shared helpers for ddptui probes. The transport sends this file followed by
# the probe's own source as one program; PARAMS (a dict) is injected by the
# bootstrap. stdlib only; must run on Python 3.8+.
import json
import os
import subprocess
import sys

PROTOCOL_VERSION = 1


def emit(kind, **data):
    """One JSON record per line, written with a single os.write so lines from
    several processes sharing the pipe never interleave."""
    record = {"v": PROTOCOL_VERSION, "kind": kind}
    record.update(data)
    os.write(1, (json.dumps(record, default=str, separators=(",", ":")) + "\n").encode("utf-8"))


def run(argv, timeout=5.0, env=None):
    """Run a command (argv list, never a shell); returns (rc, stdout, stderr); rc None if missing."""
    try:
        proc = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=timeout,
            env=env,
            check=False,
        )
    except FileNotFoundError:
        return None, "", "%s: not found" % argv[0]
    except subprocess.TimeoutExpired:
        return None, "", "%s: timed out after %ss" % (argv[0], timeout)
    except OSError as exc:
        return None, "", "%s: %s" % (argv[0], exc)
    return (
        proc.returncode,
        proc.stdout.decode("utf-8", "replace"),
        proc.stderr.decode("utf-8", "replace"),
    )


def read_text(path, default=None):
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return default


def fail(message, **data):
    emit("error", message=message, **data)
    sys.exit(1)


# --------------------------------------------------------------------------- network facts


def _sys_net(name, leaf):
    return read_text("/sys/class/net/%s/%s" % (name, leaf))


def _link_kind(name, link_type):
    if name == "lo" or link_type == "loopback":
        return "loopback"
    if link_type == "infiniband" or read_text("/sys/class/net/%s/type" % name) == "32":
        return "infiniband"
    for prefix in ("docker", "virbr", "veth", "cni", "flannel", "cali", "tailscale", "br-"):
        if name.startswith(prefix):
            return "virtual"
    return "ether"


def _speed(name):
    raw = _sys_net(name, "speed")
    try:
        value = int(raw)
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None


def interfaces():
    """Every interface: name, state, up, mtu, speed, kind, addresses. `ip -j` when
    present; /sys plus ioctl otherwise (minimal images often lack iproute2)."""
    rc, out, _ = run(["ip", "-j", "-d", "addr", "show"], timeout=5)
    if rc == 0:
        try:
            raw = json.loads(out)
        except ValueError:
            raw = None
        if isinstance(raw, list):
            result = []
            for item in raw:
                name = item.get("ifname", "?")
                flags = item.get("flags", [])
                result.append(
                    {
                        "name": name,
                        "state": str(item.get("operstate", "UNKNOWN")).lower(),
                        "up": "UP" in flags,
                        "lower_up": "LOWER_UP" in flags,
                        "mtu": item.get("mtu"),
                        "mac": item.get("address"),
                        "speed_mbps": _speed(name),
                        "kind": _link_kind(name, item.get("link_type")),
                        "addrs": [
                            {
                                "family": a.get("family"),
                                "addr": a.get("local"),
                                "prefixlen": a.get("prefixlen"),
                            }
                            for a in item.get("addr_info", [])
                            if a.get("local")
                        ],
                    }
                )
            return result
    return _interfaces_from_sys()


def _interfaces_from_sys():
    import fcntl
    import socket
    import struct

    result = []
    try:
        names = sorted(os.listdir("/sys/class/net"))
    except OSError:
        names = [n for _, n in socket.if_nameindex()]
    v6 = {}
    for line in (read_text("/proc/net/if_inet6", "") or "").splitlines():
        parts = line.split()
        if len(parts) == 6:
            addr = ":".join(parts[0][i : i + 4] for i in range(0, 32, 4))
            v6.setdefault(parts[5], []).append(
                {
                    "family": "inet6",
                    "addr": socket.inet_ntop(
                        socket.AF_INET6, socket.inet_pton(socket.AF_INET6, addr)
                    ),
                    "prefixlen": int(parts[2], 16),
                }
            )
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for name in names:
            addrs = []
            try:
                packed = struct.pack("256s", name.encode()[:15])
                addr = socket.inet_ntoa(fcntl.ioctl(sock.fileno(), 0x8915, packed)[20:24])
                mask = socket.inet_ntoa(fcntl.ioctl(sock.fileno(), 0x891B, packed)[20:24])
                prefix = sum(bin(int(x)).count("1") for x in mask.split("."))
                addrs.append({"family": "inet", "addr": addr, "prefixlen": prefix})
            except OSError:
                pass
            flags = int(_sys_net(name, "flags") or "0", 16)
            mtu = _sys_net(name, "mtu")
            result.append(
                {
                    "name": name,
                    "state": (_sys_net(name, "operstate") or "unknown").lower(),
                    "up": bool(flags & 0x1),
                    "lower_up": (_sys_net(name, "carrier") == "1"),
                    "mtu": int(mtu) if mtu and mtu.isdigit() else None,
                    "mac": _sys_net(name, "address"),
                    "speed_mbps": _speed(name),
                    "kind": _link_kind(name, None),
                    "addrs": addrs + v6.get(name, []),
                }
            )
    finally:
        sock.close()
    return result


def route_to(addr):
    """How this node reaches addr: {"dev", "src", "via"}; None when there is no route."""
    rc, out, _ = run(["ip", "-j", "route", "get", addr], timeout=5)
    if rc == 0:
        try:
            items = json.loads(out)
            if items:
                item = items[0]
                return {
                    "dev": item.get("dev"),
                    "src": item.get("prefsrc"),
                    "via": item.get("gateway"),
                    "method": "ip route get",
                }
        except ValueError:
            pass
    elif rc is not None:
        return None  # `ip` answered: no route
    import socket

    try:
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            sock.connect((addr, 9))
            src = sock.getsockname()[0]
        finally:
            sock.close()
    except OSError:
        return None
    dev = None
    for iface in interfaces():
        if any(a["addr"] == src for a in iface["addrs"]):
            dev = iface["name"]
    return {"dev": dev, "src": src, "via": None, "method": "udp connect"}


def resolve(host):
    """All addresses host resolves to on this node, in getaddrinfo order; (addrs, error)."""
    import socket

    try:
        infos = socket.getaddrinfo(host, None, 0, socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return [], "%s (gai error %s)" % (exc.strerror, exc.errno)
    except OSError as exc:
        return [], str(exc)
    seen = []
    for info in infos:
        addr = info[4][0]
        if addr not in seen:
            seen.append(addr)
    return seen, None


def hosts_entries(host):
    """Lines of /etc/hosts that name host (they explain a 127.0.1.1 answer)."""
    lines = []
    for line in (read_text("/etc/hosts", "") or "").splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2 and host in fields[1:]:
            lines.append(line.strip())
    return lines


def shm_bytes():
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


def tcp_connect(addr, port, timeout):
    """(result, error text, milliseconds): connected / refused / timeout / noroute / error.
    Refused and connected both prove the host answers; timeout and noroute do not.
    socket.timeout, not TimeoutError: they are distinct before Python 3.10."""
    import errno
    import socket
    import time

    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    started = time.monotonic()
    try:
        sock.connect((addr, int(port)))
        result, err = "connected", None
    except ConnectionRefusedError:
        result, err = "refused", "Connection refused"
    except socket.timeout:
        result, err = "timeout", "timed out after %gs" % timeout
    except OSError as exc:
        result = {
            errno.EHOSTUNREACH: "noroute",
            errno.ENETUNREACH: "noroute",
            errno.ETIMEDOUT: "timeout",
        }.get(exc.errno, "error")
        err = exc.strerror or str(exc)
    finally:
        sock.close()
    return result, err, round((time.monotonic() - started) * 1000, 1)
