"""GPU memory used as nvidia-smi shows it: NVML's v2 memory struct (used without the
driver's reserved memory), v1 only where v2 is missing.

There is no GPU on this machine, so these tests run the metrics probe against a FAKE
`pynvml` module that answers with the numbers a real H100 gave
(shared reference gpu-h100/nccl-env/nvml-memory.txt, copied below):

    meminfo v1 used 503316480 total 85520809984
    meminfo v2 used 0 reserved 503316480 total 85520809984
"""

from __future__ import annotations

import json
import sys
import types
from typing import Any

import pytest

from ddptui.probeset import probe_source

H100_TOTAL = 85520809984
H100_RESERVED = 503316480  # 480 MiB: v1 reports it as used on an idle GPU
NVML_MEMORY_V2 = 40 | (2 << 24)  # sizeof(c_nvmlMemory_v2_t) | 2 << 24, as nvidia-ml-py


class FakeNVMLError(Exception):
    pass


def fake_pynvml(*, binding_has_v2: bool = True, driver_has_v2: bool = True) -> types.ModuleType:
    """A fake pynvml (no GPU here) with one idle H100: v1 and v2 memory structs as the
    real one answered. `binding_has_v2=False` is an nvidia-ml-py too old to know the v2
    struct (no `nvmlMemory_v2`, no `version` argument); `driver_has_v2=False` a driver
    without nvmlDeviceGetMemoryInfo_v2 (the binding raises FunctionNotFound)."""
    calls: list[str] = []

    def v1() -> Any:
        return types.SimpleNamespace(
            total=H100_TOTAL, free=H100_TOTAL - H100_RESERVED, used=H100_RESERVED
        )

    def memory_info(handle: int, version: int | None = None) -> Any:
        if not version:
            calls.append("v1")
            return v1()
        calls.append("v2")
        if version != NVML_MEMORY_V2:
            raise FakeNVMLError("Argument version mismatch")
        if not driver_has_v2:
            raise FakeNVMLError("Function Not Found")
        return types.SimpleNamespace(
            version=version,
            total=H100_TOTAL,
            reserved=H100_RESERVED,
            free=H100_TOTAL - H100_RESERVED,
            used=0,
        )

    def old_memory_info(handle: int) -> Any:
        calls.append("v1")
        return v1()

    mod = types.ModuleType("pynvml")
    mod.__dict__.update(
        NVMLError=FakeNVMLError,
        nvmlInit=lambda: None,
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: "NVIDIA H100 80GB HBM3",
        nvmlDeviceGetMemoryInfo=memory_info if binding_has_v2 else old_memory_info,
        calls=calls,
    )
    if binding_has_v2:
        mod.nvmlMemory_v2 = NVML_MEMORY_V2
    return mod


def probe(monkeypatch: pytest.MonkeyPatch, mod: types.ModuleType) -> dict[str, Any]:
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    ns: dict[str, Any] = {"__name__": "metrics_probe", "PARAMS": {}}
    exec(compile(probe_source("metrics"), "<metrics probe>", "exec"), ns)  # noqa: S102
    return ns


def test_fake_pynvml_h100_memory_used_comes_from_v2_without_reserved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mod = fake_pynvml()
    nvml = probe(monkeypatch, mod)["Nvml"]()
    gpu = nvml.sample()[0]
    # nvidia-smi on that idle H100 showed 0 MiB used; v1 would have said 480 MiB.
    assert (gpu["mem_used"], gpu["mem_total"]) == (0, H100_TOTAL)
    assert nvml.mem_api == "v2" and mod.calls == ["v2"]


@pytest.mark.parametrize(
    ("binding_has_v2", "driver_has_v2", "calls"),
    [(False, True, ["v1", "v1"]), (True, False, ["v2", "v1", "v1"])],
    ids=["old-binding", "old-driver"],
)
def test_fake_pynvml_without_v2_falls_back_to_v1_and_stops_asking(
    monkeypatch: pytest.MonkeyPatch, binding_has_v2: bool, driver_has_v2: bool, calls: list[str]
) -> None:
    mod = fake_pynvml(binding_has_v2=binding_has_v2, driver_has_v2=driver_has_v2)
    nvml = probe(monkeypatch, mod)["Nvml"]()
    first, second = nvml.sample()[0], nvml.sample()[0]
    assert first["mem_used"] == second["mem_used"] == H100_RESERVED  # v1's figure: all it has
    assert first["mem_total"] == H100_TOTAL
    assert nvml.mem_api == "v1"
    assert mod.calls == calls  # a missing v2 is tried once, not on every tick


def test_fake_pynvml_hello_says_which_memory_api_answered(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    ns = probe(monkeypatch, fake_pynvml())
    ns["PARAMS"].update(interval=0.05, max_s=0.12)
    ns["main"]()
    records = [json.loads(line) for line in capfd.readouterr().out.splitlines() if line]
    hello = next(r for r in records if r.get("kind") == "hello")
    samples = [r for r in records if r.get("kind") == "sample"]
    assert hello["gpu_mem_api"] == "v2" and hello["gpus"] == 1
    assert samples and all(s["gpus"][0]["mem_used"] == 0 for s in samples)
