"""`diagnose --config` with a `host: local` node: the logread probe through the local
transport (no testbed): gzip, binary files and secrets handled on the "node"."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from click.testing import CliRunner

from ddptui.cli import main

GPU = Path(__file__).parent / "fixtures" / "gpu-h100"
TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def test_local_node_reads_gzip_refuses_binary_and_redacts(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("master: {addr: 127.0.0.1, port: 29555}\nnodes:\n  - {host: local, name: n0}\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    text = (GPU / "raw-torchrun/nccl-net-ib-without-ib.log").read_text()
    text = text.replace(
        "NCCL WARN Failed to initialize any NET plugin",
        f"NCCL WARN Failed to initialize any NET plugin (url https://u:{TOKEN}@example.com)",
    )
    (logs / "a.log.gz").write_bytes(gzip.compress(text.encode()))
    (logs / "core.bin").write_bytes(bytes(range(256)) * 64)
    result = CliRunner().invoke(
        main, ["diagnose", "--config", str(cfg), f"n0:{logs}/*", "--json", "-"]
    )
    assert result.exit_code == 2, result.output  # the binary file is an unreadable input
    assert f"n0:{logs}/core.bin: binary data" in result.stderr
    doc = json.loads(result.stdout)
    assert doc["first_failure"]["finding"] == "NET-NOPLUGIN"
    assert doc["first_failure"]["nodes"] == [f"n0:{logs}/a.log.gz"]
    assert TOKEN not in result.output
    evidence = next(f for f in doc["steps"][0]["findings"] if f["id"] == "NET-NOPLUGIN")["evidence"]
    assert "Failed to initialize any NET plugin (url https://u:" in evidence[0]
