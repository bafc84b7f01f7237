"""Live metrics: the real probe through the local transport (this Python and 3.8), the model
its samples land in, and the streamer across several local "nodes". No GPU and no InfiniBand
here: GPU behaviour runs against a stub `pynvml` (tests named *_without_gpu_stub), IB against
a fake sysfs tree (*_fake_ib_sysfs); on a GPU node the probe test checks real NVML."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_probes_local import PYTHONS

from ddptui.checklist.metrics_stream import MetricsStreamer, backoff_delay
from ddptui.metrics import MetricsModel, NodeSample, NodeSeries, human_bytes, human_rate, sparkline
from ddptui.probeset import probe_source
from ddptui.transport.base import NodeTarget
from ddptui.transport.local import LocalTransport


def local(name: str = "n0", python: str = sys.executable) -> LocalTransport:
    return LocalTransport(NodeTarget(name, "local", 0, python))


def gone(pid: int) -> bool:
    """No process, or only a zombie nobody reaped yet."""
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


@contextlib.contextmanager
def traffic(ib_root: Path) -> Iterator[list[int]]:
    """~13 MB/s over TCP on 127.0.0.1 (so `lo` counters move), and a fake IB port under
    ib_root whose receive counter rises by 1 M four-byte words per 0.1 s (40 MB/s)."""
    ib_counters = ib_root / "mlx5_0" / "ports" / "1" / "counters"
    ib_counters.mkdir(parents=True)
    (ib_counters.parent / "rate").write_text("200 Gb/sec (4X HDR)\n")
    for name in ("port_rcv_data", "port_xmit_data"):
        (ib_counters / name).write_text("0\n")
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    peer.setblocking(False)
    stop, sent = threading.Event(), [0]

    def pump() -> None:
        words, next_ib = 0, time.monotonic()
        while not stop.is_set():
            sent[0] += client.send(b"x" * 65536)
            with contextlib.suppress(BlockingIOError):
                while peer.recv(1 << 20):
                    pass
            if time.monotonic() >= next_ib:
                words, next_ib = words + 1_000_000, next_ib + 0.1
                tmp = ib_counters / "tmp"
                tmp.write_text(f"{words}\n")
                tmp.replace(ib_counters / "port_rcv_data")  # atomic: never half a number
            time.sleep(0.005)

    th = threading.Thread(target=pump, daemon=True)
    th.start()
    try:
        yield sent
    finally:
        stop.set()
        th.join(5)
        for sock in (client, peer, server):
            sock.close()


async def collect(python: str, params: dict[str, Any], seconds: float) -> list[dict[str, Any]]:
    """Every record the probe sends in `seconds`; then stop() and check its pid is gone."""
    run = await local(python=python).start_probe("metrics", params)
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + seconds
    with contextlib.suppress(asyncio.TimeoutError):
        while (rec := await run.next_record(timeout=deadline - time.monotonic())) is not None:
            records.append(rec)
    out = await run.stop()
    assert records and records[0]["kind"] == "hello", (records, out.stderr)
    assert gone(records[0]["pid"]), "the probe outlived stop()"
    return records


# --------------------------------------------------------------- the probe; NVML stubbed


@pytest.mark.parametrize("python", PYTHONS)
def test_probe_streams_real_counters_and_fake_ib_sysfs(python: str, tmp_path: Path) -> None:
    with traffic(tmp_path) as sent:
        params = {"interval": 0.2, "ib_root": str(tmp_path)}
        records = asyncio.run(collect(python, params, 1.7))
    hello, samples = records[0], [r for r in records if r["kind"] == "sample"]
    # No GPU here: the note says why. On a GPU node the same test checks the real NVML path.
    assert (hello["gpus"] == 0 and hello["note"]) or hello["gpu_source"] == "nvml"
    assert "lo" in hello["nics"] and hello["nic_kinds"]["lo"] == "loopback"
    assert hello["cpus"] >= 1 and hello["mem_total"] > 0 and hello["interval"] == 0.2
    assert hello["ib"] == ["mlx5_0:1"] and hello["ib_rate"]["mlx5_0:1"].startswith("200 Gb")
    assert 5 <= len(samples) <= 9, samples
    for s in samples:
        assert len(s["gpus"]) == hello["gpus"] and 0.0 <= s["cpu_pct"] <= 100.0
        assert 0 < s["mem_used"] < s["mem_total"] == hello["mem_total"] and s["load1"] >= 0
        for rate in [*s["nics"].values(), *s["ib"].values()]:
            assert all(isinstance(v, float) and v >= 0 for v in rate.values()), rate
    ts = [s["t"] for s in samples]  # drift-free ticks: 0.2 s apart on average
    assert 0.15 < (ts[-1] - ts[0]) / (len(ts) - 1) < 0.3
    ib_rx = sorted(s["ib"]["mlx5_0:1"]["rx_Bps"] for s in samples)
    assert 20e6 < ib_rx[len(ib_rx) // 2] < 80e6, ib_rx  # x4 words: 10 MB/s without it
    assert sent[0] > 1_000_000
    series = NodeSeries("n0")
    for rec in records:
        series.add(rec)
    assert series.busiest_nic(include_loopback=True) == "lo" and series.busiest_ib() == "mlx5_0:1"
    assert max(v or 0 for v in series.spark("nic_rx:lo", 8)) > 1e6
    cost = [s["probe_cpu_ms"] for s in samples[1:]]
    print(f"probe CPU per sample on {python}: mean {sum(cost) / len(cost):.2f} ms")
    assert sum(cost) / len(cost) < 20


def probe_namespace() -> dict[str, Any]:
    """The probe's functions, loaded without running its main loop."""
    ns: dict[str, Any] = {"__name__": "metrics_probe", "PARAMS": {}}
    exec(compile(probe_source("metrics"), "<metrics probe>", "exec"), ns)  # noqa: S102
    return ns


def nvml_stub(*, init_fails: bool = False, old_api: bool = False) -> types.ModuleType:
    """A pynvml stand-in: GPU 0 answers some calls, GPU 1 has fallen off the bus."""

    class NVMLError(Exception):
        pass

    def gpu0(value: Any) -> Callable[..., Any]:
        def call(h: int = 0, *args: Any) -> Any:
            if h != 0 or value is NVMLError:
                raise NVMLError("Not Supported" if h == 0 else "GPU is lost")
            return value(*args) if callable(value) else value

        return call

    mod = types.ModuleType("pynvml")
    mod.__dict__.update(
        NVMLError=NVMLError,
        nvmlInit=gpu0(NVMLError if init_fails else None),
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3",
        nvmlDeviceGetUtilizationRates=gpu0(types.SimpleNamespace(gpu=97, memory=40)),
        nvmlDeviceGetMemoryInfo=gpu0(types.SimpleNamespace(used=30 << 30, total=80 << 30)),
        nvmlDeviceGetTemperature=gpu0(NVMLError),
        nvmlDeviceGetTotalEccErrors=gpu0(NVMLError),
        nvmlDeviceGetClockInfo=gpu0(lambda kind: 1980 if kind == 1 else 0),
        # nvmlDeviceGetPowerUsage is missing altogether (an old nvidia-ml-py).
    )
    name = "Throttle" if old_api else "Event"  # NVML renamed the call in 12.x
    # SwPowerCap, HwThermalSlowdown and a bit this probe does not know.
    setattr(mod, f"nvmlDeviceGetCurrentClocks{name}Reasons", gpu0(0x4 | 0x40 | 0x1000))
    return mod


@pytest.mark.parametrize("old_api", [False, True])
def test_nvml_missing_metrics_are_none_without_gpu_stub(
    monkeypatch: pytest.MonkeyPatch, old_api: bool
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", nvml_stub(old_api=old_api))
    nvml = probe_namespace()["Nvml"]()
    assert nvml.note is None and len(nvml.handles) == 2
    ok, lost = nvml.sample()
    assert (ok["index"], ok["util_pct"], ok["sm_clock_mhz"]) == (0, 97, 1980)
    assert (ok["mem_used"], ok["mem_total"]) == (30 << 30, 80 << 30)
    assert ok["temp_c"] is None and ok["power_w"] is None and ok["ecc_uncorrected"] is None
    assert ok["throttle"] == ["SwPowerCap", "HwThermalSlowdown", "0x1000"]
    assert lost["index"] == 1 and lost["throttle"] == []
    assert all(v is None for k, v in lost.items() if k not in ("index", "throttle"))
    monkeypatch.setitem(sys.modules, "pynvml", nvml_stub(init_fails=True))
    broken = probe_namespace()["Nvml"]()
    assert broken.handles == [] and broken.sample() == [] and "NVMLError" in broken.note


def test_probe_main_loop_with_gpus_without_gpu_stub(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The whole probe, in this process, against the stub: hello counts the GPUs, every
    sample carries them, the model reads GPU fields by index, and max_s ends the run."""
    monkeypatch.setitem(sys.modules, "pynvml", nvml_stub())
    ns: dict[str, Any] = {"__name__": "__main__", "PARAMS": {"interval": 0.1, "max_s": 0.25}}
    exec(compile(probe_source("metrics"), "<metrics probe>", "exec"), ns)  # noqa: S102
    records = [json.loads(line) for line in capfd.readouterr().out.splitlines()]
    assert [r["kind"] for r in records] == ["hello", "sample", "sample", "end"]
    hello = records[0]
    assert hello["gpus"] == 2 and hello["gpu_source"] == "nvml" and hello["note"] is None
    assert hello["gpu_names"] == ["NVIDIA H100 80GB HBM3"] * 2
    series = NodeSeries("n0")
    for rec in records:
        series.add(rec)
    latest = series.latest()
    assert latest is not None and len(latest.gpus) == 2 and not series.no_gpu
    assert latest.value("gpu_util:0") == 97 and latest.value("gpu_util:1") is None
    assert latest.value("gpu_mem_pct:0") == 37.5 and latest.value("gpu_temp:0") is None
    assert latest.gpus[0].throttle == ("SwPowerCap", "HwThermalSlowdown", "0x1000")


def test_host_uses_psutil_only_where_proc_is_unreadable() -> None:
    """/proc/stat costs a third of psutil.cpu_percent per tick: psutil is the fallback."""
    pytest.importorskip("psutil")
    ns = probe_namespace()
    for proc_readable in (True, False):
        if not proc_readable:
            ns["read_cpu_times"] = lambda: None
            ns["read_mem"] = lambda: (None, None)
        host = ns["Host"]()
        time.sleep(0.05)
        used, total = host.mem()
        assert (host.psutil is None) == proc_readable
        assert 0.0 <= host.cpu_pct() <= 100.0 and 0 < used < total


# -------------------------------------------------------------- the model and the streamer


def sample(t: float, cpu: float | None = 10.0, **nics: tuple[Any, Any]) -> dict[str, Any]:
    rec: dict[str, Any] = {"v": 1, "kind": "sample", "t": t, "cpu_pct": cpu, "load1": 0.5}
    rec.update(mem_used=1 << 30, mem_total=4 << 30, gpus=[], ib={})
    rec["nics"] = {n: {"rx_Bps": rx, "tx_Bps": tx} for n, (rx, tx) in nics.items()}
    return rec


def test_series_window_and_spark_resampling() -> None:
    s = NodeSeries("n0", window=10.0)
    s.add({"kind": "hello", "interval": 1.0, "gpus": 0})
    for t in range(31):
        s.add(sample(70.0 + t, cpu=float(t * 10 - 200)))
    assert len(s.samples) == 11 and s.samples[0].t == 90.0  # only the last 10 s
    assert s.spark("cpu_pct", 5) == [5.0, 25.0, 45.0, 65.0, 90.0]  # slot means
    wide = s.spark("cpu_pct", 40)  # more slots than samples: the last value holds
    assert len(wide) == 40 and None not in wide and wide[-1] == 100.0
    assert s.spark("cpu_pct", 0) == [] and s.spark("nope", 3) == [None] * 3
    for t in (106, 107):  # 5 s of silence (node lost), then samples again
        s.add(sample(t, cpu=5.0))
    gap = s.spark("cpu_pct", 10)  # 1 s slots from t=97; a value holds two intervals
    assert gap == [70.0, 80.0, 90.0, 100.0, 100.0, 100.0, None, None, None, 5.0]
    s.add(sample(50.0))  # the node's clock stepped back: start over, never interleave
    assert [x.t for x in s.samples] == [50.0]


def test_lost_retry_and_back_live() -> None:
    clock = iter([50.0, 60.0])
    s = NodeSeries("n0", clock=lambda: next(clock))
    assert s.state == "connecting"
    s.add({"kind": "hello", "gpus": 0, "note": "no driver"})
    assert s.state == "live" and s.no_gpu and s.hello and s.hello.note == "no driver"
    s.mark_lost("connection lost")
    s.mark_retry(1.0)
    s.mark_lost("refused")  # still lost: lost_since stays the first time
    s.mark_retry(2.0)
    assert (s.state, s.lost_since, s.lost_why) == ("lost", 50.0, "refused")
    assert (s.retries, s.retry_delay_s) == (2, 2.0)
    s.add(sample(1.0))
    assert (s.state, s.lost_since, s.retries) == ("live", None, 0)


def test_records_are_parsed_tolerantly_and_busiest_nic_skips_loopback() -> None:
    bad = sample(5.0, cpu=None, eth0=(None, 10))
    bad.update(mem_used="12", load1=float("nan"), gpus=[{"index": 3, "util_pct": True}, "x"])
    parsed = NodeSample.from_record(bad)
    assert parsed and (parsed.cpu_pct, parsed.mem_used, parsed.load1) == (None, None, None)
    assert parsed.gpus[0].index == 3 and parsed.gpus[0].util_pct is None
    assert parsed.value("nic:eth0") == 10 and parsed.value("nic_rx:eth0") is None
    assert parsed.value("gpu_util:3") is None and parsed.value("gpu_util:0") is None
    assert NodeSample.from_record({"kind": "sample"}) is None
    s = NodeSeries("n0")
    s.add({"kind": "hello", "nics": ["lo", "eth0", "ib0"], "nic_kinds": {"lo": "loopback"}})
    for t in range(3):
        s.add(sample(float(t), lo=(9e9, 9e9), eth0=(1e6, 2e6), ib0=(5e8, None)))
    assert s.busiest_nic() == "ib0" and s.busiest_nic(include_loopback=True) == "lo"
    s.add(sample(9.0, eth0=(0.0, 0.0)))  # 6 s later, nothing moves
    assert s.busiest_nic() is None and s.busiest_ib() is None


def test_model_version_and_immutable_snapshots() -> None:
    model = MetricsModel(["a", "b"])
    v0, snap = model.version, model.snapshot()
    assert [n.name for n in snap.nodes] == ["a", "b"] and snap.version == v0
    assert model.snapshot_if_changed(v0) is None
    model.add("a", sample(1.0, eth0=(1.0, 2.0)))
    assert model.version > v0
    v1 = model.version
    model.add("a", {"kind": "garbage"})  # ignored: no change
    assert model.snapshot_if_changed(v0) is not None and model.snapshot_if_changed(v1) is None
    later = model.snapshot()
    assert later.node("b") is snap.node("b")  # unchanged node: the cached view is reused
    view = later.node("a")
    assert view is not None and isinstance(view.samples, tuple) and view.state == "live"
    with pytest.raises(AttributeError):
        view.state = "lost"  # type: ignore[misc]
    with pytest.raises(TypeError):
        view.samples[0].nics["eth0"] = None  # type: ignore[index]
    model.add("a", sample(2.0))
    assert len(view.samples) == 1  # the snapshot did not move with the model


def test_sparkline_and_human_units() -> None:
    assert sparkline([0, 50, 100, None], 0, 100) == "▁▅█ "
    assert sparkline([3.0, 3.0]) == "██" and sparkline([0.0, 0.0]) == "▁▁"
    assert sparkline([]) == "" and sparkline([None]) == " "
    assert sparkline([200.0, -5.0], 0, 100) == "█▁"  # clamped
    assert human_rate(12_345_678) == "12.3 MB/s" and human_rate(999) == "999 B/s"
    assert human_rate(None) == "n/a" and human_rate(2.5e9) == "2.5 GB/s"
    assert human_bytes(1536 << 20) == "1.5 GiB" and human_bytes(None) == "n/a"
    assert human_bytes(0) == "0 B"


def test_metrics_core_imports_no_ui_no_ssh_no_torch() -> None:
    code = "import sys, ddptui.metrics, ddptui.checklist.metrics_stream; print(*sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert not {m.split(".")[0] for m in out.stdout.split()} & {"textual", "asyncssh", "torch"}


async def wait_for(cond: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def test_streamer_three_nodes_and_one_without_python() -> None:
    """Three good nodes stream, and restart their probe at max_s without being marked lost;
    a node whose python does not exist is lost and retried with growing delays, and never
    disturbs the others; stop() is prompt and leaves no probe behind."""
    transports = {f"n{i}": local(f"n{i}") for i in range(3)}
    transports["bad"] = local("bad", python="/nonexistent/python3")
    model = MetricsModel(list(transports))
    good, bad = [model.series(f"n{i}") for i in range(3)], model.series("bad")
    delays: list[float] = []
    mark_retry = bad.mark_retry

    def record_retry(delay_s: float) -> None:
        delays.append(delay_s)
        mark_retry(delay_s)

    bad.mark_retry = record_retry  # type: ignore[method-assign]
    pids, states = set[int](), set[str]()

    def streamed() -> bool:
        states.update(s.state for s in good)
        pids.update(s.hello.pid for s in good if s.hello and s.hello.pid)
        return len(pids) >= 6 and all(len(s.samples) >= 3 for s in good) and bad.retries >= 5

    async def scenario() -> float:
        params = {"max_s": 0.5}  # every good probe ends and is restarted at least once
        streamer = MetricsStreamer(transports, model, interval=0.2, params=params)
        streamer.backoff_base, streamer.backoff_cap = 0.05, 0.4
        await streamer.start()
        await wait_for(streamed, 20)
        started = time.monotonic()
        await streamer.stop()
        return time.monotonic() - started

    stop_s = asyncio.run(scenario())
    assert stop_s < 3.0, stop_s
    assert [backoff_delay(a) for a in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert "lost" not in states and all(gone(p) for p in pids)
    assert delays[:6] == [0.05, 0.1, 0.2, 0.4, 0.4, 0.4][: len(delays)]
    view = model.snapshot()
    assert {n.name: n.state for n in view.nodes} == dict.fromkeys(transports, "stopped")
    lost = view.node("bad")
    assert lost is not None and lost.lost_since is not None and lost.retries >= 5
    assert lost.lost_why and "/nonexistent/python3" in lost.lost_why
    assert all(len(n.samples) >= 3 and n.retries == 0 for n in view.nodes if n.name != "bad")


def test_streamer_marks_a_silent_node_lost(tmp_path: Path) -> None:
    """A hung node (its python never says hello) is lost; stopping leaves nothing behind."""
    hung, model = tmp_path / "hung-python", MetricsModel()
    hung.write_text('#!/bin/sh\necho $$ > "$0.pid"\nexec sleep 60\n')
    hung.chmod(0o755)

    async def scenario() -> None:
        node = {"n0": local(python=str(hung))}
        streamer = MetricsStreamer(node, model, interval=0.2, hello_timeout=0.5)
        await streamer.start()
        await wait_for(lambda: model.series("n0").state == "lost", 10)
        await streamer.stop()

    asyncio.run(scenario())
    assert "no metrics from the node" in (model.series("n0").lost_why or "")
    assert gone(int(Path(f"{hung}.pid").read_text()))
