"""A hostfile given to SSH keeps every SSH rule: the hosts it names go through the
config's ssh settings and the OpenSSH client config (an alias with HostName/User)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from testbed import DELETE, Testbed


def test_hostfile_over_ssh_keeps_ssh_config_aliases(
    shared_testbed: Testbed, tmp_path: Path
) -> None:
    tb = shared_testbed
    aliases = "".join(
        f"Host tbhost{n.index}\n  HostName {n.ip}\n  User root\n  Port 22\n" for n in tb.nodes
    )
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(aliases)
    hostfile = tmp_path / "hosts"
    hostfile.write_text(
        "# the job's hosts\n" + "".join(f"tbhost{n.index} slots=1\n" for n in tb.nodes)
    )
    cfg = tb.config_dict(nodes=DELETE, master=DELETE)
    cfg["hostfile"] = str(hostfile)
    cfg["ssh"]["config"] = str(ssh_config)
    cfg["master"] = {"addr": tb.nodes[0].ip}
    path = tmp_path / "cluster.yaml"
    path.write_text(json.dumps(cfg))
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "ddptui", "check", str(path), "--steps", "ssh,ping",
         "--no-metrics", "--json", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert [n["host"] for n in report["nodes"]] == [f"tbhost{n.index}" for n in tb.nodes]
    ssh = report["steps"][0]
    assert all(r["summary"].startswith("connected as root") for r in ssh["nodes"].values())
    # junk in the hostfile: a clear error naming file and line, exit 2
    hostfile.write_text("tbhost0\nnot a host line\n")
    proc = subprocess.run(
        [sys.executable, "-m", "ddptui", "check", str(path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and f"{hostfile}:2:" in proc.stderr, proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "ddptui", "check", "--hostfile", str(hostfile)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and f"--hostfile: {hostfile}:2:" in proc.stderr, proc.stderr
