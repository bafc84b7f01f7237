"""Round 7's blind batch J (tests/fixtures/corpus/round7j.yaml): its one false alarm, a
healthy single-process vLLM start-up whose only scary line is gloo's loopback fallback
(vllm-metal#171), and the same line where a failure follows it."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from ddptui.cli import main

# the line as pasted in vllm-metal#171 (a world of one on a Mac)
FALLBACK = (
    "[W317 12:26:02.241986000 ProcessGroupGloo.cpp:547] Warning: Unable to resolve hostname to"
    " a (local) address. Using the loopback address as fallback. Manually set the network"
    " interface to bind to with GLOO_SOCKET_IFNAME. (function operator())\n"
    "(EngineCore_DP0 pid=42271) INFO 03-17 12:26:03 [parallel_state.py:1425] rank 0 in world"
    " size 1 is assigned as DP rank 0, PP rank 0, PCP rank 0, TP rank 0, EP rank N/A\n"
)
# gloo's own failure when a peer advertised loopback (the testbed's loopback_fallback)
FAILS = (
    "RuntimeError: Gloo connectFullMesh failed with [/__w/pytorch/pytorch/third_party/gloo/"
    "gloo/transport/tcp/pair.cc:152] timed out connecting: SO_ERROR: Connection refused, "
    "remote=[127.0.0.1]:22949$0\n"
)


def diagnose(tmp_path: Path, text: str) -> tuple[int, dict]:
    log = tmp_path / "rank.log"
    log.write_text(text)
    result = CliRunner().invoke(main, ["diagnose", str(log), "--json", "-"])
    return result.exit_code, json.loads(result.stdout)


def test_loopback_fallback_alone_is_a_warning(tmp_path: Path) -> None:
    code, doc = diagnose(tmp_path, FALLBACK)
    assert code == 0 and doc["first_failure"] is None
    (f,) = [f for f in doc["steps"][0]["findings"] if f["id"] == "GLOO-LOOPBACK"]
    assert f["severity"] == "warning"


def test_loopback_fallback_before_a_gloo_failure_stays_an_error(tmp_path: Path) -> None:
    code, doc = diagnose(tmp_path, FALLBACK + FAILS)
    assert code == 1
    assert doc["first_failure"]["finding"] in {"GLOO-LOOPBACK", "GLOO-MESH-LOOPBACK"}
    assert {f["severity"] for f in doc["steps"][0]["findings"] if "LOOPBACK" in f["id"]} == {"error"}
