"""GPU-FELL-OFF-BUS: the driver's Xid 79, named in words by three excerpts of the corpus that
were collected before the id existed ([NEW] then: Lambda's support note on a GSP timeout
followed by Xid 79, NVIDIA GPU Operator's troubleshooting page twice), read through the real
log diagnosis, both feeds (lines in memory, a file's byte chunks)."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

import pytest
from corpus_excerpts import CORPUS, excerpt, lead
from logchunks import first_via_chunks

from ddptui.logs.diagnose import diagnose_lines


@pytest.mark.parametrize(
    "eid",
    [
        "w2-xid119-gsp-rpc-timeout-lambda",  # "Xid (PCI:0000:??:00): 79  - GPU has fallen off the bus"
        "y3-gpuop-xid79-device-unhealthy",  # the device plugin: "XidCriticalError: Xid=79 on Device=GPU-..."
        "y3-gpuop-gfd-crashloop-xid79",  # kubectl describe: the container hook fails, dmesg's Xid 79
    ],
)
def test_a_gpu_that_fell_off_the_bus_is_named(eid: str) -> None:
    assert lead(excerpt(eid)) == "GPU-FELL-OFF-BUS"
    assert first_via_chunks(list(CORPUS[eid].lines), "k.log") == "GPU-FELL-OFF-BUS"


def test_the_fix_names_gsp_and_draining_the_node() -> None:
    d = excerpt("w2-xid119-gsp-rpc-timeout-lambda")
    assert d.first is not None and "NVreg_EnableGpuFirmware=0" in d.first.fix and "drain" in d.first.fix


def test_nvml_after_the_fall_and_dmesgs_own_line() -> None:
    # dmesg's form (the driver prints the PCI address, the pid and the words) and NVML's
    # answer for that GPU afterwards, as nvidia-smi prints it
    dmesg = ["[Tue Mar  5 10:11:12 2024] NVRM: Xid (PCI:0000:3b:00): 79, pid=12345, name=python, GPU has fallen off the bus."]
    smi = ["Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  Reboot the system to recover this GPU"]
    assert lead(diagnose_lines(dmesg)) == "GPU-FELL-OFF-BUS"
    assert lead(diagnose_lines(smi)) == "GPU-FELL-OFF-BUS"


def test_other_xids_are_not_a_gpu_lost() -> None:
    # Xid 63 and 92 are the driver's records of what it corrected (training survives them);
    # 790 is no 79
    for line in (
        "NVRM: Xid (PCI:0000:3b:00): 63, pid=1, Row Remapper: New row marked for remapping, reset gpu to activate.",
        "NVRM: Xid (PCI:0000:3b:00): 92, pid=1, High single-bit ECC error rate",
        "NVRM: Xid (PCI:0000:3b:00): 790, pid=1, something else",
    ):
        assert "GPU-FELL-OFF-BUS" not in [f.id for f in diagnose_lines([line]).findings]
