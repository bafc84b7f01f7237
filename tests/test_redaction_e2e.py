"""Redaction end to end, on the namespace testbed: canary secrets are planted in a
node's login environment, in the config's env (global and per node) and in the log
lines the training environment prints at every interpreter start (a sitecustomize.py
on one node's PYTHONPATH, as a wandb/HF login hook would). Then every output is
searched for them: the headless run's stdout and stderr, its JSON, Markdown and HTML
reports and the autosaved session; the TUI's log view, screen and exports. None may
hold a canary, nor its first 12 characters. The diagnostic variables (NCCL_*,
TORCH_*, MASTER_*, *_SOCKET_IFNAME, CUDA_*, PATH, LD_LIBRARY_PATH) stay visible.

Canaries are random per run, so no output can match one by accident or by memory.
"""

from __future__ import annotations

import asyncio
import base64
import html
import json
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from checkrun import assert_nodes_quiet, check
from testbed import Testbed

pytestmark = pytest.mark.testbed

LOG_NODE = 1  # its python prints tokens at every start; its login env holds secrets too
NODE_ENV_NODE = 2  # the config's per-node env with secrets
EXPORTS = {"json": "json", "markdown": "md", "html": "html"}  # TUI export format -> suffix


@dataclass
class Planted:
    config: Path
    canaries: dict[str, str]  # where it was planted -> the secret value
    visible: dict[str, dict[str, str]]  # node -> diagnostic variable -> value to show


def _aws_secret() -> str:
    return base64.b64encode(secrets.token_bytes(30)).decode()  # 40 base64 characters


def _sitecustomize(tokens: dict[str, str]) -> str:
    """Runs at every start of the node's python (probes, torchrun, each rank): prints
    tokens on stdout and stderr, as careless login hooks and training scripts do."""
    return f"""import os as _os, sys as _sys
_lines = [
    "wandb: logging in with token=" + {tokens["token"]!r},
    "export HF_TOKEN=" + {tokens["hf"]!r},
    "requests: Authorization: Bearer " + {tokens["bearer"]!r},
    "db: connecting to postgresql://trainer:" + {tokens["url"]!r} + "@db.internal:5432/runs",
    "run.py --api-key " + {tokens["flag"]!r},
    "wandb: WANDB_API_KEY is " + _os.environ.get("WANDB_API_KEY", "unset"),
]
for _s in (_sys.stderr, _sys.stdout):
    _s.write("\\n".join(_lines) + "\\n")
    _s.flush()
"""


def plant(tb: Testbed) -> Planted:
    c = {
        "login HF_TOKEN": "hf_" + secrets.token_hex(17),
        "login WANDB_API_KEY": secrets.token_hex(20),
        "login DATABASE_URL password": "Pw" + secrets.token_hex(10),
        "login AWS_SECRET_ACCESS_KEY": _aws_secret(),
        "config OPENAI_API_KEY": "sk-proj-" + secrets.token_hex(20),
        "config DB_PASSWORD": "Cfg" + secrets.token_hex(10),
        "node SERVICE_SECRET": "Svc" + secrets.token_hex(10),
        "node HUB_URL password": "Hub" + secrets.token_hex(10),
        "log token=": secrets.token_hex(20),
        "log export HF_TOKEN": "hf_" + secrets.token_hex(17),
        "log Bearer": secrets.token_urlsafe(24),
        "log URL password": "Url" + secrets.token_hex(10),
        "log --api-key": "Flag" + secrets.token_hex(10),
    }
    site = tb.workdir / f"site-node{LOG_NODE}"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        _sitecustomize(
            {
                "token": c["log token="],
                "hf": c["log export HF_TOKEN"],
                "bearer": c["log Bearer"],
                "url": c["log URL password"],
                "flag": c["log --api-key"],
            }
        )
    )
    lib = f"/opt/ddptui-visible-{secrets.token_hex(3)}/lib"
    tb.set_env(
        LOG_NODE,
        {
            "HF_TOKEN": c["login HF_TOKEN"],
            "WANDB_API_KEY": c["login WANDB_API_KEY"],
            "DATABASE_URL": f"postgres://u:{c['login DATABASE_URL password']}@h/db",
            "AWS_SECRET_ACCESS_KEY": c["login AWS_SECRET_ACCESS_KEY"],
            "PYTHONPATH": str(site),
            "LD_LIBRARY_PATH": lib,
            "NCCL_DEBUG_SUBSYS": "INIT,NET",
        },
    )
    master = tb.config_dict()["master"]
    common = {
        "NCCL_SOCKET_IFNAME": "eth0",
        "GLOO_SOCKET_IFNAME": "eth0",
        "NCCL_IB_DISABLE": "1",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "CUDA_VISIBLE_DEVICES": "0",
        "MASTER_ADDR": str(master["addr"]),
        "MASTER_PORT": str(master["port"]),
    }
    nodes = tb.config_dict()["nodes"]
    nodes[NODE_ENV_NODE]["env"] = {
        "SERVICE_SECRET": c["node SERVICE_SECRET"],
        "HUB_URL": f"https://alice:{c['node HUB_URL password']}@hub.internal/x",
    }
    config = tb.write_config(
        env={
            **common,
            "OPENAI_API_KEY": c["config OPENAI_API_KEY"],
            "DB_PASSWORD": c["config DB_PASSWORD"],
        },
        nodes=nodes,
        timeouts={"step": 20, "allreduce": 40},
    )
    visible = {n.name: dict(common) for n in tb.nodes}
    visible[tb.nodes[LOG_NODE].name].update(
        {"LD_LIBRARY_PATH": lib, "NCCL_DEBUG_SUBSYS": "INIT,NET"}
    )
    return Planted(config, c, visible)


def needles(canary: str) -> set[str]:
    """The canary, its first 12 characters, and each long alphanumeric run in it (a
    Markdown export escapes '_', an HTML one may split at punctuation)."""
    return {canary, canary[:12], *re.findall(r"[A-Za-z0-9]{10,}", canary)}


def leaks(canaries: dict[str, str], outputs: dict[str, str]) -> list[str]:
    found = []
    for where, text in outputs.items():
        variants = text + "\n" + html.unescape(text).replace("\\", "")
        for label, canary in canaries.items():
            hits = sorted(n for n in needles(canary) if n in variants)
            if hits:
                at = variants.find(hits[0])
                found.append(f"{label} in {where}: ...{variants[max(0, at - 80) : at + 60]!r}")
    return found


def session_files(state: Path) -> list[Path]:
    return sorted(state.glob("ddptui/sessions/*.json"))


def test_no_canary_in_any_headless_output(testbed: Testbed, tmp_path: Path) -> None:
    planted = plant(testbed)
    state = tmp_path / "state"
    reports = {fmt: tmp_path / f"report.{fmt}" for fmt in ("md", "html")}
    run = check(
        planted.config,
        "--markdown",
        str(reports["md"]),
        "--html",
        str(reports["html"]),
        env={**os.environ, "XDG_STATE_HOME": str(state)},
        timeout=150,
    )
    assert run.rc == 0, run.stdout + run.stderr
    outputs = {
        "stdout": run.stdout,
        "stderr": run.stderr,
        "json": planted.config.with_suffix(".report.json").read_text(),
        "markdown": reports["md"].read_text(),
        "html": reports["html"].read_text(),
    }
    saved = session_files(state)
    outputs.update({f"autosave {p.name}": p.read_text() for p in saved})
    assert not leaks(planted.canaries, outputs)

    # The planted lines did reach ddptui, redacted: the search above had something to find.
    ar = run.step("allreduce")
    assert ar["status"] == "pass", run.stdout
    for redacted in ("token=<redacted:", "Bearer <redacted:", "--api-key <redacted:"):
        assert redacted in outputs["json"]

    # Diagnostic variables stay visible, with their values, in each node's launch env.
    env_step = run.step("env")
    for node, expected in planted.visible.items():
        launch = env_step["nodes"][node]["data"]["launch_env"]
        assert {k: launch.get(k) for k in expected} == expected, node
        assert "/usr/bin" in launch["PATH"] and "<redacted" not in launch["PATH"]
    assert_nodes_quiet(testbed)
    # Last, so a missing autosave never hides a leak: the session was autosaved.
    assert saved, f"no autosaved session under {state}"


def test_crash_text_quoted_as_evidence_is_scrubbed(testbed: Testbed, tmp_path: Path) -> None:
    """A node whose python dies before any probe runs, printing credentials on the way
    out (a broken activation hook): its raw stderr and stdout become finding evidence on
    the login node, outside the probes' redaction."""
    c = {
        "token=": secrets.token_hex(20),
        "HF_TOKEN": "hf_" + secrets.token_hex(17),
        "Bearer": secrets.token_urlsafe(24),
        "password:": "Crash" + secrets.token_hex(10),
        "URL": "Url" + secrets.token_hex(10),
    }
    wrapper = tmp_path / "python-broken"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"echo 'wandb: logging in with token={c['token=']}'\n"
        f"echo 'Authorization: Bearer {c['Bearer']}' >&2\n"
        f"echo 'export HF_TOKEN={c['HF_TOKEN']}' >&2\n"
        f"echo 'mirror https://ci:{c['URL']}@pypi.internal/simple unreachable' >&2\n"
        f"echo 'activate: login failed, password: {c['password:']}' >&2\n"
        "exit 1\n"
    )
    wrapper.chmod(0o755)
    nodes = testbed.config_dict()["nodes"]
    nodes[2]["python"] = str(wrapper)
    config = testbed.write_config(nodes=nodes)
    md = tmp_path / "crash.md"
    run = check(config, "--steps", "ssh,inventory", "--markdown", str(md))
    assert run.rc == 1, run.stdout
    failed = run.finding("inventory", "NODE-PROBE-FAILED")
    assert failed["nodes"] == ["node2"]
    evidence = "\n".join(failed["evidence"])
    assert "password: <redacted:" in evidence and "Bearer <redacted:" in evidence, evidence
    outputs = {
        "stdout": run.stdout,
        "stderr": run.stderr,
        "json": config.with_suffix(".report.json").read_text(),
        "markdown": md.read_text(),
    }
    assert not leaks(c, outputs)


# --------------------------------------------------------------------------- the TUI


async def _wait_for(pilot: Any, cond: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the UI")
        await pilot.pause(0.1)


def test_no_canary_on_the_tui_screens_or_exports(
    testbed: Testbed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from textual.widgets import DataTable, Input, Log, Select

    from ddptui.config import load_config
    from ddptui.stepmeta import ORDER
    from ddptui.ui.app import DdptuiApp

    planted = plant(testbed)
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    cfg = load_config(planted.config)
    screens: dict[str, str] = {}
    exports = {fmt: tmp_path / f"tui-report.{ext}" for fmt, ext in EXPORTS.items()}

    async def scenario() -> None:
        app = DdptuiApp(cfg, "cluster.yaml")
        async with app.run_test(size=(160, 50)) as pilot:
            await _wait_for(pilot, lambda: "ssh" in app.results, 30)
            await pilot.press("a")
            await _wait_for(
                pilot, lambda: app.running is None and len(app.results) == len(ORDER), 180
            )
            assert app.results["allreduce"].status == "pass"
            table = app.query_one("#checklist", DataTable)
            table.move_cursor(row=ORDER.index("allreduce"), column=2 + LOG_NODE)
            await pilot.pause(0.3)
            screens["detail"] = app.checklist.detail_source
            screens["main screen"] = app.export_screenshot()
            await pilot.press("l")
            await pilot.pause(0.3)
            log = app.screen.query_one(Log)
            screens["log view"] = "\n".join(log.lines)
            screens["log screen"] = app.export_screenshot()
            screens["app logs"] = "\n".join(
                "\n".join(app.log_lines(node)[0]) for node in app.node_names
            )
            await pilot.press("escape")
            for fmt, path in exports.items():
                await pilot.press("e")
                await pilot.pause(0.2)
                app.screen.query_one("#fmt", Select).value = fmt
                await pilot.pause(0.1)
                app.screen.query_one("#path", Input).value = str(path)
                await pilot.click("#go")
                await _wait_for(pilot, path.exists, 10)
            await pilot.press("q")
            await _wait_for(pilot, lambda: not app.is_running, 20)

    asyncio.run(scenario())
    outputs = dict(screens)
    outputs.update({f"export {fmt}": p.read_text() for fmt, p in exports.items()})
    saved = session_files(state)
    outputs.update({f"autosave {p.name}": p.read_text() for p in saved})
    assert not leaks(planted.canaries, outputs)
    assert saved, f"no autosaved session under {state}"
    # The log view did show the planted lines, redacted.
    assert "logging in with token=<redacted:" in screens["log view"], screens["log view"][-2000:]
    json.loads(exports["json"].read_text())  # the export is a real report
    assert_nodes_quiet(testbed)
