"""The run core: one lifecycle for `check` and the TUI. A step that raises (a bug in
ddptui) becomes status "error" with a one-line reason: in the TUI within a second, and
`check` exits 3. Events reach every subscriber; the log store keeps line ids."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from click.testing import CliRunner
from textual.widgets import DataTable

from ddptui import cli
from ddptui.checklist import registry
from ddptui.checklist.base import Step, StepContext
from ddptui.checklist.run import RunCore, RunEvent
from ddptui.demo import demo_config
from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.model import NodeResult
from ddptui.ui.app import DdptuiApp


class BrokenStep(Step):
    id = "inventory"
    title = "Node inventory and version skew"

    async def check(
        self, ctx: StepContext, nodes: dict[str, NodeResult]
    ) -> tuple[list[Finding], dict[str, Any]]:
        raise KeyError("gpus")  # a bug: a key the code expected is missing


@pytest.fixture
def broken_inventory(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setitem(registry.STEPS, "inventory", BrokenStep)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))


def test_core_turns_a_raising_step_into_an_error_result(broken_inventory: None) -> None:
    events: list[RunEvent] = []

    async def scenario() -> None:
        core = RunCore(demo_config(), "<demo>", metrics=False)
        core.subscribe(events.append)
        try:
            await core.run_steps(["ssh", "inventory"])
        finally:
            await core.stop()
        result = core.results["inventory"]
        assert result.status == "error"
        assert {r.status for r in result.nodes.values()} == {"error"}
        assert "KeyError: 'gpus'" in result.findings[0].summary
        assert core.snapshot().label.startswith("ERROR")
        assert core.saver is not None and core.saver.path.exists()

    asyncio.run(scenario())
    kinds = [e.kind for e in events]
    assert kinds.count("step-started") == 2 and kinds.count("step") == 2
    assert kinds.index("step-started") < kinds.index("step")


def test_check_exits_3_when_a_step_raises(broken_inventory: None) -> None:
    out = CliRunner().invoke(cli.main, ["check", "--steps", "ssh,inventory", "--no-metrics"])
    assert out.exit_code == 3, out.output
    assert "ddptui could not run the inventory step (KeyError: 'gpus')" in out.output
    assert "Traceback" not in out.output


def test_tui_shows_error_in_the_cell_within_a_second(broken_inventory: None) -> None:
    async def scenario() -> None:
        app = DdptuiApp(demo_config(), "<demo>")
        async with app.run_test(size=(160, 50)) as pilot:
            deadline = time.monotonic() + 20
            while "ssh" not in app.results and time.monotonic() < deadline:
                await pilot.pause(0.05)
            pressed = time.monotonic()
            await pilot.press("enter")
            while "inventory" not in app.results and time.monotonic() - pressed < 5:
                await pilot.pause(0.02)
            took = time.monotonic() - pressed
            table = app.query_one("#checklist", DataTable)
            assert str(table.get_cell("inventory", "node0")).startswith("? ddptui error")
            assert str(table.get_cell("inventory", "status")).startswith("? error")
            assert took < 1.0, took
            assert app.running is None  # the cell does not stay "running"
            await pilot.press("q")

    asyncio.run(scenario())


def test_tui_j_opens_the_job_view(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """`j` looks at the user's job through the nodes already connected; with no
    torchrun job on this machine it says so (and nothing runs or stays behind)."""
    from ddptui.ui.job_screen import JobScreen

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))  # the job view remembers log paths there

    async def scenario() -> None:
        app = DdptuiApp(demo_config(), "<demo>")
        async with app.run_test(size=(160, 50)) as pilot:
            deadline = time.monotonic() + 20
            while "ssh" not in app.results and time.monotonic() < deadline:
                await pilot.pause(0.05)
            await pilot.press("j")
            deadline = time.monotonic() + 40
            while not isinstance(app.screen, JobScreen) and time.monotonic() < deadline:
                await pilot.pause(0.1)
            assert isinstance(app.screen, JobScreen)
            assert app.screen.report["steps"][0]["id"] == "job"
            await pilot.press("escape")
            await pilot.press("q")

    asyncio.run(scenario())


def test_tui_d_opens_the_log_diagnosis(tmp_path: Any) -> None:
    """`d` in the checklist opens the diagnosis of log files: a path in, the cause out."""
    from textual.widgets import Input

    from ddptui.ui.diagnose_screen import DiagnoseScreen

    log = tmp_path / "rank1.log"
    log.write_text(
        "[rank1]: torch.distributed.DistNetworkError: The server socket has failed to listen "
        "on any local network address. port: 29500, useIpv6: false, code: -98, name: "
        "EADDRINUSE, message: address already in use\n"
    )

    async def scenario() -> None:
        app = DdptuiApp(demo_config(), "<demo>", autoconnect=False)
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.press("d")
            await pilot.pause(0.2)
            assert isinstance(app.screen, DiagnoseScreen)
            app.screen.query_one(Input).value = str(log)
            await pilot.press("enter")
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                await pilot.pause(0.1)
                shot = app.export_screenshot()
                if "PORT-INUSE" in shot:
                    break
            assert "PORT-INUSE" in app.export_screenshot()
            await pilot.press("escape")

    asyncio.run(scenario())


def test_script_is_audited_before_launch_in_check_and_tui(tmp_path: Any) -> None:
    """`script:` in cluster.yaml: the training script is linted before anything runs;
    check prints the headline and the report carries the findings; the TUI's banner
    says it."""
    import json

    from ddptui.config import load_config

    (tmp_path / "train.py").write_text(
        "import torch\nmodel = torch.nn.DataParallel(torch.nn.Linear(2, 2))\n"
    )
    cfg_path = tmp_path / "cluster.yaml"
    cfg_path.write_text(
        "master: {addr: 127.0.0.1, port: 29500}\nnodes: [{host: local, name: node0}]\n"
        "script: train.py\n"
    )
    report_path = tmp_path / "r.json"
    env = {"XDG_STATE_HOME": str(tmp_path)}
    out = CliRunner(env=env).invoke(
        cli.main, ["check", str(cfg_path), "--steps", "ssh", "--no-metrics",
                   "--json", str(report_path)]
    )
    assert "script train.py: 1 warning (first: DDP-DATAPARALLEL at line 2)" in out.output
    lint = json.loads(report_path.read_text())["lint"]
    assert lint["findings"][0]["id"] == "DDP-DATAPARALLEL" and lint["findings"][0]["line"] == 2

    async def scenario() -> None:
        app = DdptuiApp(load_config(cfg_path), str(cfg_path))
        async with app.run_test(size=(160, 50)) as pilot:
            deadline = time.monotonic() + 20
            while "ssh" not in app.results and time.monotonic() < deadline:
                await pilot.pause(0.05)
            await pilot.pause(0.2)
            assert "DDP-DATAPARALLEL" in str(app.query_one("#banner").render())
            await pilot.press("q")

    asyncio.run(scenario())
