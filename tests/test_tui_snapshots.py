"""Snapshots of the TUI's main states, built from recorded results (a real testbed run,
saved as JSON) so they are deterministic. Regenerate with `pytest --snapshot-update`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ddptui.config import parse_config
from ddptui.report.load import results_from_report
from ddptui.ui.app import DdptuiApp

REPORTS = Path(__file__).parent / "fixtures" / "reports"
CONFIG = """
name: testbed
master: {addr: 10.90.0.1, port: 29500}
nodes: [{host: 10.90.0.1, name: node0}, {host: 10.90.0.2, name: node1},
        {host: 10.90.0.3, name: node2}]
"""


def recorded_app(report: str) -> tuple[DdptuiApp, Any]:
    app = DdptuiApp(parse_config(CONFIG, "cluster.yaml"), "cluster.yaml", autoconnect=False)
    results = results_from_report(json.loads((REPORTS / f"{report}.json").read_text()))

    async def load(pilot: Any) -> None:
        await pilot.pause()  # the checklist screen is composed
        for result in results.values():
            app._on_step(result)
        first = app.checklist.failures()
        if first:
            app.query_one("#checklist").move_cursor(row=first[0][0], column=first[0][1])
        app.clock = lambda: app.started  # 00:00 whatever the machine's load
        app.checklist.tick()
        await pilot.pause()

    return app, load


@pytest.mark.parametrize("size", [(160, 50), (100, 30)])
def test_port_blocked_state(snap_compare: Any, size: tuple[int, int]) -> None:
    app, load = recorded_app("port_blocked")
    assert snap_compare(app, terminal_size=size, run_before=load)


def test_healthy_state(snap_compare: Any) -> None:
    app, load = recorded_app("healthy")
    assert snap_compare(app, terminal_size=(160, 50), run_before=load)


def test_healthy_state_wide(snap_compare: Any) -> None:
    app, load = recorded_app("healthy")
    assert snap_compare(app, terminal_size=(200, 60), run_before=load)
