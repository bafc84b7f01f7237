"""Live metrics: the model the metrics probe's samples land in, and what the UI draws from.

The streamer (checklist/metrics_stream.py) feeds records in; every change bumps
MetricsModel.version, so a view can poll at ~2 Hz and repaint only when something
changed. Views read immutable snapshots (MetricsSnapshot / NodeView), never the
live series. Missing data is None everywhere ("n/a" once formatted). Stdlib only.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, TypeVar, cast

WINDOW_S = 60.0
BUSY_S = 5.0  # "which NIC carries the allreduce" looks at this many recent seconds
MAX_SAMPLES = 20_000  # hard bound per node, whatever the interval
HISTORY_MAX = 600  # the session's timeline kept per node for reports: at most 2x this
SPARK_BLOCKS = "▁▂▃▄▅▆▇█"
HOST_FIELDS = ("cpu_pct", "mem_used", "load1", "probe_cpu_ms")
LINK_FIELDS = ("nic_rx", "nic_tx", "nic", "ib_rx", "ib_tx", "ib")
GPU_KEYS = {"gpu_util": "util_pct", "gpu_mem": "mem_used", "gpu_temp": "temp_c"}
GPU_KEYS.update({"gpu_power": "power_w", "gpu_clock": "sm_clock_mhz"})
T = TypeVar("T")


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def _int(value: Any) -> int | None:
    num = _num(value)
    return None if num is None else int(num)


def _pct(used: int | None, total: int | None) -> float | None:
    return None if used is None or not total else 100.0 * used / total


@dataclass(frozen=True)
class LinkRate:
    """Throughput of one NIC or InfiniBand port, bytes per second (None: n/a)."""

    rx_Bps: float | None  # the record's field names
    tx_Bps: float | None

    @property
    def total(self) -> float | None:
        """rx + tx; None when neither is known."""
        if self.rx_Bps is None and self.tx_Bps is None:
            return None
        return (self.rx_Bps or 0.0) + (self.tx_Bps or 0.0)


NO_RATE = LinkRate(None, None)


def _rates(raw: Any) -> Mapping[str, LinkRate]:
    items = raw.items() if isinstance(raw, dict) else ()
    return MappingProxyType({str(k): _parse(LinkRate, r) for k, r in items if isinstance(r, dict)})


# How each declared field type (a string: `from __future__ import annotations`) is read
# from a record; ill-typed or missing is None (n/a).
_CONVERT: dict[str, Callable[[Any], Any]] = {
    "float | None": _num,
    "int | None": _int,
    "int": lambda v: _int(v) or 0,
    "str | None": lambda v: str(v) if v not in (None, "") else None,
    "tuple[str, ...]": lambda v: tuple(map(str, v)) if isinstance(v, list) else (),
    "Mapping[str, str]": lambda v: MappingProxyType(
        {str(k): str(x) for k, x in v.items()} if isinstance(v, dict) else {}
    ),
    "Mapping[str, LinkRate]": _rates,
}


def _parse(cls: Callable[..., T], rec: Mapping[str, Any], **given: Any) -> T:
    """A record dataclass from a probe record, each field converted by its declared type."""
    names = fields(cast("Any", cls))
    return cls(
        **given,
        **{f.name: _CONVERT[str(f.type)](rec.get(f.name)) for f in names if f.name not in given},
    )


@dataclass(frozen=True)
class GpuSample:
    index: int
    util_pct: float | None
    mem_used: int | None
    mem_total: int | None
    temp_c: float | None
    power_w: float | None
    sm_clock_mhz: float | None
    throttle: tuple[str, ...]  # NVML clock-throttle reasons, e.g. ("SwPowerCap",)
    ecc_uncorrected: int | None


@dataclass(frozen=True)
class NodeSample:
    """One `sample` record, parsed and typed; any field the node could not read is None."""

    t: float  # the node's wall clock (time.time() there)
    cpu_pct: float | None
    mem_used: int | None
    mem_total: int | None
    load1: float | None
    gpus: tuple[GpuSample, ...]
    nics: Mapping[str, LinkRate]
    ib: Mapping[str, LinkRate]
    probe_cpu_ms: float | None  # the probe's own CPU time since the previous sample

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> NodeSample | None:
        """None when the record has no usable timestamp (then it cannot be placed)."""
        t, raw = _num(rec.get("t")), rec.get("gpus")
        raw = raw if isinstance(raw, list) else []
        gpus = tuple(_parse(GpuSample, g) for g in raw if isinstance(g, dict))
        return None if t is None else _parse(cls, rec, t=t, gpus=gpus)

    def value(self, key: str) -> float | None:
        """The number a spark field names: "cpu_pct", "mem_pct", "mem_used", "load1",
        "gpu_util:0", "gpu_mem:0" (bytes), "gpu_mem_pct:0", "gpu_temp:0", "gpu_power:0",
        "gpu_clock:0", "nic_rx:eth0", "nic_tx:eth0", "nic:eth0" (rx+tx), "ib_rx:mlx5_0:1",
        "ib_tx:mlx5_0:1", "ib:mlx5_0:1". Unknown fields and n/a give None."""
        kind, _, arg = key.partition(":")
        if kind.startswith("gpu_"):
            gpu = next((g for g in self.gpus if str(g.index) == arg), None)
            if gpu is None or kind == "gpu_mem_pct":
                return None if gpu is None else _pct(gpu.mem_used, gpu.mem_total)
            attr = GPU_KEYS.get(kind)
            return _num(getattr(gpu, attr)) if attr else None
        if kind in LINK_FIELDS:
            rate = (self.nics if kind.startswith("nic") else self.ib).get(arg, NO_RATE)
            return {"rx": rate.rx_Bps, "tx": rate.tx_Bps}.get(kind.rpartition("_")[2], rate.total)
        if kind == "mem_pct" and not arg:
            return _pct(self.mem_used, self.mem_total)
        return _num(getattr(self, kind)) if kind in HOST_FIELDS and not arg else None


@dataclass(frozen=True)
class NodeHello:
    """The probe's `hello` record: what the node has."""

    pid: int | None  # the probe's process on the node
    interval: float | None
    gpus: int | None
    gpu_names: tuple[str, ...]
    gpu_source: str | None  # "nvml" or "none"
    note: str | None  # why there is no GPU
    nics: tuple[str, ...]
    nic_kinds: Mapping[str, str]  # "loopback", "ether", "infiniband", "virtual"
    ib: tuple[str, ...]  # "mlx5_0:1"
    cpus: int | None
    mem_total: int | None

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> NodeHello:
        return _parse(cls, rec)


class _Queries:
    """Read-side helpers shared by the live series and its immutable views."""

    name: str
    window: float
    hello: NodeHello | None
    samples: Sequence[NodeSample]  # oldest first

    def latest(self) -> NodeSample | None:
        samples = self.samples
        return samples[-1] if samples else None

    @property
    def no_gpu(self) -> bool:
        """The node reported no usable GPU (hello.note says why)."""
        return self.hello is not None and not self.hello.gpus

    def spark(self, key: str, width: int) -> list[float | None]:
        """`width` points over the last `window` seconds (ending at the newest sample):
        the mean of the samples in each slot; an empty slot holds the previous value
        for up to two intervals, so a real gap (node lost, stalled) stays None."""
        samples = self.samples
        if not samples or width <= 0:
            return [None] * max(0, width)
        start, slot = samples[-1].t - self.window, self.window / width
        hold = max(2.0 * ((self.hello.interval if self.hello else None) or 1.0), slot)
        slots: list[list[float]] = [[] for _ in range(width)]
        for s in samples:
            v = s.value(key)
            if v is not None and s.t >= start:
                i = min(width - 1, int((s.t - start) / slot))
                slots[i].append(v)
        out: list[float | None] = []
        prev: float | None = None
        prev_i = -width
        for i, vals in enumerate(slots):
            if vals:
                prev, prev_i = sum(vals) / len(vals), i
            elif (i - prev_i) * slot > hold:
                prev = None
            out.append(prev)
        return out

    def _busiest(self, links: str, keep: Callable[[str], bool]) -> str | None:
        samples = self.samples
        totals: dict[str, float] = {}
        for s in samples:
            if s.t >= samples[-1].t - BUSY_S:
                for name, rate in getattr(s, links).items():
                    if keep(name):
                        totals[name] = totals.get(name, 0.0) + (rate.total or 0.0)
        best = max(sorted(totals), key=totals.__getitem__, default=None)
        return best if best is not None and totals[best] > 0 else None

    def busiest_nic(self, include_loopback: bool = False) -> str | None:
        """The netdev with the most rx+tx over the last few seconds (the one carrying a
        socket allreduce); None when nothing moves. Loopback is left out unless asked:
        traffic between nodes never crosses it."""
        kinds = self.hello.nic_kinds if self.hello else {}

        def keep(n: str) -> bool:
            return include_loopback or not (n == "lo" or kinds.get(n) == "loopback")

        return self._busiest("nics", keep)

    def busiest_ib(self) -> str | None:
        """The InfiniBand/RoCE port with the most traffic (RDMA never shows in netdev)."""
        return self._busiest("ib", lambda _: True)


@dataclass(frozen=True)
class NodeView(_Queries):
    """An immutable copy of one node's series, for the UI."""

    name: str
    state: str
    window: float
    hello: NodeHello | None
    samples: tuple[NodeSample, ...]
    lost_since: float | None
    lost_why: str | None
    retries: int
    retry_delay_s: float | None
    version: int


@dataclass(eq=False)
class NodeSeries(_Queries):
    """One node: the last `window` seconds of samples and the stream's state: "connecting"
    (no hello yet), "live", "lost" (lost_since, lost_why, retries, retry_delay_s), "stopped"."""

    name: str
    window: float = WINDOW_S
    on_change: Callable[[], None] | None = field(default=None, repr=False)
    clock: Callable[[], float] = field(default=time.time, repr=False)
    state: str = "connecting"
    hello: NodeHello | None = None
    lost_since: float | None = None
    lost_why: str | None = None
    retries: int = 0
    retry_delay_s: float | None = None
    version: int = 0
    samples: deque[NodeSample] = field(
        default_factory=lambda: deque(maxlen=MAX_SAMPLES), init=False, repr=False
    )
    # The whole session, downsampled: raw sample records, every `_stride`-th one kept;
    # when the list reaches 2 x HISTORY_MAX every other entry goes and the stride doubles
    # (bounded memory, evenly spaced whatever the session's length).
    history: list[dict[str, Any]] = field(default_factory=list, init=False, repr=False)
    hello_record: dict[str, Any] | None = field(default=None, init=False, repr=False)
    _stride: int = field(default=1, init=False, repr=False)
    _seen: int = field(default=0, init=False, repr=False)
    _view: NodeView | None = field(default=None, init=False, repr=False)

    def _changed(self) -> None:
        self.version += 1
        if self.on_change is not None:
            self.on_change()

    def add(self, rec: Mapping[str, Any]) -> None:
        """Take one probe record (hello / sample); anything else is ignored."""
        sample = NodeSample.from_record(rec) if rec.get("kind") == "sample" else None
        if rec.get("kind") == "hello":
            self.hello = NodeHello.from_record(rec)
            self.hello_record = dict(rec)
        elif sample is None:
            return
        else:
            self._keep(rec)
            if self.samples and sample.t < self.samples[-1].t - 1.0:
                self.samples.clear()  # the node's clock stepped back: a gap, not a tangle
            self.samples.append(sample)
            while self.samples[0].t < sample.t - self.window:
                self.samples.popleft()
        self.state, self.lost_since, self.lost_why, self.retry_delay_s = "live", None, None, None
        self.retries = 0
        self._changed()

    def _keep(self, rec: Mapping[str, Any]) -> None:
        if self._seen % self._stride == 0:
            self.history.append(dict(rec))
            if len(self.history) >= 2 * HISTORY_MAX:
                del self.history[1::2]
                self._stride *= 2
        self._seen += 1

    def export(self, max_samples: int = HISTORY_MAX) -> dict[str, Any]:
        """The session's timeline for a report: the hello record and at most
        max_samples sample records, evenly spaced, oldest first."""
        samples = self.history
        if len(samples) > max_samples:
            step = len(samples) / max_samples
            samples = [samples[int(i * step)] for i in range(max_samples)]
        return {"hello": self.hello_record, "samples": list(samples)}

    def mark_lost(self, why: str) -> None:
        if self.state != "lost":
            self.lost_since = self.clock()
        self.state = "lost"
        self.lost_why = why
        self._changed()

    def mark_retry(self, delay_s: float) -> None:
        """The streamer will try again in delay_s seconds."""
        self.retries += 1
        self.retry_delay_s = delay_s
        self._changed()

    def mark_stopped(self) -> None:
        self.state = "stopped"
        self._changed()

    def view(self) -> NodeView:
        if self._view is None or self._view.version != self.version:
            meta = {f.name: getattr(self, f.name) for f in fields(NodeView) if f.name != "samples"}
            self._view = NodeView(samples=tuple(self.samples), **meta)
        return self._view


@dataclass(frozen=True)
class MetricsSnapshot:
    version: int
    nodes: tuple[NodeView, ...]

    def node(self, name: str) -> NodeView | None:
        return next((n for n in self.nodes if n.name == name), None)


class MetricsModel:
    """Every node's series, in the order given. `version` grows on every change."""

    def __init__(self, names: Sequence[str] = (), window: float = WINDOW_S) -> None:
        self.window, self.version = window, 0
        self._series: dict[str, NodeSeries] = {}
        for name in names:
            self.series(name)

    def _bump(self) -> None:
        self.version += 1

    def series(self, name: str) -> NodeSeries:
        """The node's live series (created on first use)."""
        if name not in self._series:
            self._series[name] = NodeSeries(name, self.window, on_change=self._bump)
            self._bump()
        return self._series[name]

    def add(self, node: str, rec: Mapping[str, Any]) -> None:
        self.series(node).add(rec)

    def snapshot(self) -> MetricsSnapshot:
        """An immutable copy (unchanged nodes reuse their cached view)."""
        return MetricsSnapshot(self.version, tuple(s.view() for s in self._series.values()))

    def snapshot_if_changed(self, seen_version: int) -> MetricsSnapshot | None:
        """For a ~2 Hz repaint timer: a snapshot only when something changed since."""
        return None if self.version == seen_version else self.snapshot()

    def export(self, interval_s: float, max_samples: int = HISTORY_MAX) -> dict[str, Any]:
        """The session's metrics for a report (docs/report-format.md, `metrics`)."""
        return {
            "interval_s": interval_s,
            "nodes": {name: s.export(max_samples) for name, s in self._series.items()},
        }

    @classmethod
    def from_export(cls, data: Mapping[str, Any], names: Sequence[str] = ()) -> MetricsModel:
        """A saved session's metrics, for replay: the window spans the whole timeline,
        so the sparklines show the session from its first sample to its last."""
        nodes = data.get("nodes") if isinstance(data, Mapping) else None
        nodes = nodes if isinstance(nodes, Mapping) else {}
        times = [
            t
            for n in nodes.values()
            if isinstance(n, Mapping) and isinstance(n.get("samples"), list)
            for rec in n["samples"]
            if isinstance(rec, Mapping) and (t := _num(rec.get("t"))) is not None
        ]
        window = max(WINDOW_S, (max(times) - min(times)) + 1.0) if times else WINDOW_S
        model = cls([*names, *(str(n) for n in nodes if n not in names)], window=window)
        for name, node in nodes.items():
            if not isinstance(node, Mapping):
                continue
            series = model.series(str(name))
            if isinstance(node.get("hello"), Mapping):
                series.add({**node["hello"], "kind": "hello"})
            for rec in node.get("samples") or ():
                if isinstance(rec, Mapping):
                    series.add({**rec, "kind": "sample"})
            series.state = "recorded"
        return model


def sparkline(
    values: Sequence[float | None], lo: float | None = None, hi: float | None = None
) -> str:
    """Unicode blocks, one per value; " " for None. lo defaults to min(0, data) and hi to
    the data's max (pass 0/100 for percentages so nodes compare)."""
    present = [v for v in values if v is not None and not math.isnan(v)]
    low = lo if lo is not None else min([0.0, *present])
    high = hi if hi is not None else max(present, default=low)
    span, top = high - low, len(SPARK_BLOCKS) - 1
    chars = []
    for v in values:
        if v is None or math.isnan(v):
            chars.append(" ")
        else:
            frac = min(1.0, max(0.0, (v - low) / span)) if span > 0 else 0.0
            chars.append(SPARK_BLOCKS[round(frac * top)])
    return "".join(chars)


NA = "n/a"  # the one way a missing metric reads, everywhere


def _scaled(n: float | None, units: Sequence[str], step: float) -> str:
    if n is None or math.isnan(n):
        return NA
    for unit in units[:-1]:
        if abs(n) < step:
            return f"{n:.0f} {unit}" if unit in ("B", "B/s") else f"{n:.1f} {unit}"
        n /= step
    return f"{n:.1f} {units[-1]}"


def human_rate(bps: float | None) -> str:
    """Bytes per second in decimal units (as NIC speeds are quoted): "12.3 MB/s"; "n/a"."""
    return _scaled(bps, ("B/s", "kB/s", "MB/s", "GB/s", "TB/s"), 1000.0)


def human_bytes(n: float | None) -> str:
    """Sizes in binary units (as memory is quoted): "1.5 GiB"; "n/a"."""
    return _scaled(n, ("B", "KiB", "MiB", "GiB", "TiB", "PiB"), 1024.0)
