# metrics probe: live samples from one node, streamed until ddptui closes the lifeline.
#
# PARAMS: {"interval": 1.0, "max_s": 86400, "ib_root": "/sys/class/infiniband"}.
# One `hello` record, then one `sample` record per interval (the first after one
# interval: rates are deltas between consecutive reads), then `end` after max_s.
# Cheap by design: a few /proc and /sys reads per tick, NVML handles cached, no
# subprocess. NVML (nvidia-ml-py) and psutil are used when importable, never needed.
# stdlib only; must run on Python 3.8+.
import math
import time

THROTTLE_BITS = (
    (0x1, "GpuIdle"),
    (0x2, "ApplicationsClocksSetting"),
    (0x4, "SwPowerCap"),
    (0x8, "HwSlowdown"),
    (0x10, "SyncBoost"),
    (0x20, "SwThermalSlowdown"),
    (0x40, "HwThermalSlowdown"),
    (0x80, "HwPowerBrakeSlowdown"),
    (0x100, "DisplayClockSetting"),
)
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0


def throttle_names(mask):
    """Decode a clocksThrottleReasons bitmask; unknown bits are kept as hex."""
    if not isinstance(mask, int):
        return None
    names = [name for bit, name in THROTTLE_BITS if mask & bit]
    known = 0
    for bit, _ in THROTTLE_BITS:
        known |= bit
    if mask & ~known:
        names.append("0x%x" % (mask & ~known))
    return names


class Nvml:
    """Every NVML call wrapped: a missing function, an unsupported metric or a lost GPU
    becomes None (n/a) and never an exception (the nvitop NA idea)."""

    def __init__(self):
        self.mod = None
        self.handles = []
        self.note = None
        self.mem_api = None  # "v2" or "v1" once memory was read (see memory())
        try:
            import pynvml
        except ImportError:
            self.note = "nvidia-ml-py (module pynvml) is not installed in this Python"
            return
        self._errors = self._error_types(pynvml)
        try:
            pynvml.nvmlInit()
        except self._errors as exc:
            self.note = "NVML unavailable (no NVIDIA driver or GPU?): %s: %s" % (
                type(exc).__name__,
                exc,
            )
            return
        self.mod = pynvml
        count = self.call("nvmlDeviceGetCount")
        for i in range(count if isinstance(count, int) else 0):
            handle = self.call("nvmlDeviceGetHandleByIndex", i)
            if handle is not None:
                self.handles.append((i, handle))
        if not self.handles:
            self.note = "NVML found no GPU" if count == 0 else "NVML could not open any GPU"

    @staticmethod
    def _error_types(mod):
        nvml_error = getattr(mod, "NVMLError", None)
        base = (AttributeError, TypeError, ValueError, OSError, KeyError, IndexError)
        if isinstance(nvml_error, type) and issubclass(nvml_error, BaseException):
            return (nvml_error, *base)
        return base

    def call(self, name, *args):
        """pynvml.<name>(*args), or None when the call is missing or fails."""
        fn = getattr(self.mod, name, None) if self.mod is not None else None
        if fn is None:
            return None
        try:
            return fn(*args)
        except self._errors:
            return None  # n/a: not supported on this GPU/driver, or the GPU is gone

    def first(self, names, *args):
        """The first of several API spellings that exists (NVML renamed some)."""
        for name in names:
            if getattr(self.mod, name, None) is not None:
                return self.call(name, *args)
        return None

    def memory(self, handle):
        """Memory info as nvidia-smi counts it: NVML's v2 struct, whose `used` leaves out
        what the driver reserves (v1 counts it as used: 480 MiB on an H100 with nothing
        running). v1 where the binding (no `nvmlMemory_v2`, no `version` argument) or the
        driver (no nvmlDeviceGetMemoryInfo_v2) lacks v2; self.mem_api says which."""
        v2 = getattr(self.mod, "nvmlMemory_v2", None)
        if v2 is not None and self.mem_api != "v1":
            try:
                mem = self.mod.nvmlDeviceGetMemoryInfo(handle, version=v2)
            except self._errors:
                mem = None
            if mem is not None:
                self.mem_api = "v2"
                return mem
        mem = self.call("nvmlDeviceGetMemoryInfo", handle)
        if mem is not None:
            self.mem_api = "v1"
        return mem

    def sample(self):
        """One tick: about 8 NVML calls per GPU, handles cached since nvmlInit."""
        out = []
        for index, h in self.handles:
            util = self.call("nvmlDeviceGetUtilizationRates", h)
            mem = self.memory(h)
            power_mw = _num(self.call("nvmlDeviceGetPowerUsage", h))
            mask = self.first(
                (
                    "nvmlDeviceGetCurrentClocksEventReasons",
                    "nvmlDeviceGetCurrentClocksThrottleReasons",
                ),
                h,
            )
            out.append(
                {
                    "index": index,
                    # getattr on a None result (call failed) is None too: n/a.
                    "util_pct": _num(getattr(util, "gpu", None)),
                    "mem_used": _num(getattr(mem, "used", None)),
                    "mem_total": _num(getattr(mem, "total", None)),
                    "temp_c": _num(self.call("nvmlDeviceGetTemperature", h, NVML_TEMPERATURE_GPU)),
                    "power_w": None if power_mw is None else power_mw / 1000.0,
                    "sm_clock_mhz": _num(self.call("nvmlDeviceGetClockInfo", h, NVML_CLOCK_SM)),
                    "throttle": throttle_names(mask) or [],
                    "ecc_uncorrected": _num(
                        self.call(
                            "nvmlDeviceGetTotalEccErrors",
                            h,
                            NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                            NVML_VOLATILE_ECC,
                        )
                    ),
                }
            )
        return out


def _text(value):
    if value is None:
        return "?"
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _num(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


# --------------------------------------------------------------------------- host counters


def read_fast(path, limit=None):
    """A /proc or /sys file via os.open/os.read: half the CPU of open().read(), which
    matters once per tick. `limit` reads only the head (the first line of /proc/stat)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    chunks = []
    try:
        while True:
            chunk = os.read(fd, limit or 65536)
            if not chunk:
                break
            chunks.append(chunk)
            if limit:
                break
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(chunks).decode("ascii", "replace")


def read_netdev():
    """{name: (rx_bytes, tx_bytes)} from /proc/net/dev (every interface, lo included)."""
    out = {}
    text = read_fast("/proc/net/dev") or ""
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        fields = rest.split()
        if sep and len(fields) >= 9:
            try:
                out[name.strip()] = (int(fields[0]), int(fields[8]))
            except ValueError:
                continue
    return out


def ib_ports(root):
    """[("mlx5_0:1", counters dir)] for every InfiniBand/RoCE port."""
    ports = []
    try:
        devices = sorted(os.listdir(root))
    except OSError:
        return ports
    for dev in devices:
        try:
            numbers = sorted(os.listdir(os.path.join(root, dev, "ports")), key=_port_key)
        except OSError:
            continue
        for port in numbers:
            ports.append(("%s:%s" % (dev, port), os.path.join(root, dev, "ports", port)))
    return ports


def _port_key(text):
    return int(text) if text.isdigit() else 0


def read_ib(ports):
    """{port: (rcv_bytes, xmit_bytes)}: the counters count 4-byte words (hence x4).
    RDMA traffic never shows in /proc/net/dev."""
    out = {}
    for name, path in ports:
        rcv = read_fast(path + "/counters/port_rcv_data")
        xmit = read_fast(path + "/counters/port_xmit_data")
        try:
            out[name] = (int(rcv) * 4, int(xmit) * 4)
        except (TypeError, ValueError):
            continue
    return out


def read_cpu_times():
    """(busy, total) jiffies from the first line of /proc/stat; None where unreadable."""
    text = read_fast("/proc/stat", 4096) or ""
    fields = text.split("\n", 1)[0].split()
    if len(fields) < 5 or fields[0] != "cpu":
        return None
    try:
        values = [int(v) for v in fields[1:9]]
    except ValueError:
        return None
    total = sum(values)
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return total - idle, total


def read_mem():
    """(used, total) bytes; used = total - MemAvailable (what pressure is about)."""
    total = avail = None
    for line in (read_fast("/proc/meminfo") or "").splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable"):
            try:
                value = int(rest.split()[0]) * 1024
            except (IndexError, ValueError):
                continue
            if key == "MemTotal":
                total = value
            else:
                avail = value
        if total is not None and avail is not None:
            break
    if total is None:
        return None, None
    return (total - avail if avail is not None else None), total


def rates(now, before, dt):
    """{name: {"rx_Bps", "tx_Bps"}} from two counter reads; a counter that went
    backwards (reset, re-created interface) gives null, never a negative rate."""
    out = {}
    for name, (rx, tx) in now.items():
        prev = before.get(name)
        if prev is None or dt <= 0:
            continue
        drx, dtx = rx - prev[0], tx - prev[1]
        out[name] = {
            "rx_Bps": round(drx / dt, 1) if drx >= 0 else None,
            "tx_Bps": round(dtx / dt, 1) if dtx >= 0 else None,
        }
    return out


class Host:
    """CPU% from /proc/stat deltas (a third of psutil.cpu_percent's cost per tick);
    psutil where /proc is unreadable. Memory from /proc/meminfo, psutil likewise."""

    def __init__(self):
        self.cpu_prev = read_cpu_times()
        self.psutil = None
        if self.cpu_prev is None or read_mem()[1] is None:
            try:
                import psutil

                self.psutil = psutil
                psutil.cpu_percent(None)  # starts psutil's delta
            except ImportError:
                pass

    def cpu_pct(self):
        if self.cpu_prev is None and self.psutil is not None:
            return float(self.psutil.cpu_percent(None))
        now = read_cpu_times()
        prev, self.cpu_prev = self.cpu_prev, now
        if now is None or prev is None or now[1] <= prev[1]:
            return None
        return round(100.0 * (now[0] - prev[0]) / (now[1] - prev[1]), 1)

    def mem(self):
        used, total = read_mem()
        if total is None and self.psutil is not None:
            vm = self.psutil.virtual_memory()
            return int(vm.total - vm.available), int(vm.total)
        return used, total


def load1():
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


# --------------------------------------------------------------------------- main loop


def hello(interval, nvml, host, nics, ports, ib_root):
    mem_total = host.mem()[1]
    emit(
        "hello",
        pid=os.getpid(),
        interval=interval,
        gpus=len(nvml.handles),
        gpu_names=[_text(nvml.call("nvmlDeviceGetName", h)) for _, h in nvml.handles],
        gpu_source="nvml" if nvml.handles else "none",
        gpu_mem_api=nvml.mem_api,
        note=nvml.note,
        nics=sorted(nics),
        nic_kinds=dict((n, _link_kind(n, None)) for n in sorted(nics)),
        nic_speed_mbps=dict((n, _speed(n)) for n in sorted(nics)),
        ib=[name for name, _ in ports],
        ib_rate=dict((name, read_text(path + "/rate")) for name, path in ports),
        ib_root=ib_root,
        cpus=os.cpu_count(),
        mem_total=mem_total,
        psutil=host.psutil is not None,
    )


def main():
    interval = max(0.05, float(PARAMS.get("interval", 1.0)))
    max_s = float(PARAMS.get("max_s", 86400))
    ib_root = str(PARAMS.get("ib_root") or "/sys/class/infiniband")
    nvml = Nvml()
    host = Host()
    ports = ib_ports(ib_root)
    nic_prev = read_netdev()
    ib_prev = read_ib(ports)
    for _, h in nvml.handles[:1]:
        nvml.memory(h)  # which NVML memory API answers, for the hello record
    hello(interval, nvml, host, nic_prev, ports, ib_root)
    start = time.monotonic()
    prev_read = start
    cpu_prev = time.process_time()
    tick = 0
    while True:
        # Drift-free: sleep to the next multiple of interval since start; a late
        # tick (overloaded node) skips ahead instead of bursting to catch up.
        now = time.monotonic()
        tick = max(tick + 1, math.floor((now - start) / interval) + 1)
        deadline = start + tick * interval
        if deadline - start > max_s:
            emit("end", reason="max_s", max_s=max_s)
            return
        time.sleep(max(0.0, deadline - now))
        read_at = time.monotonic()
        dt = read_at - prev_read
        nic_now = read_netdev()
        ib_now = read_ib(ports)
        mem_used, mem_total = host.mem()
        sample = {
            "t": time.time(),
            "cpu_pct": host.cpu_pct(),
            "mem_used": mem_used,
            "mem_total": mem_total,
            "load1": load1(),
            "gpus": nvml.sample(),
            "nics": rates(nic_now, nic_prev, dt),
            "ib": rates(ib_now, ib_prev, dt),
        }
        nic_prev, ib_prev, prev_read = nic_now, ib_now, read_at
        cpu_now = time.process_time()
        # This probe's own CPU time since the previous sample (collection + emit).
        sample["probe_cpu_ms"] = round((cpu_now - cpu_prev) * 1000.0, 3)
        cpu_prev = cpu_now
        emit("sample", **sample)


if __name__ == "__main__":
    main()
