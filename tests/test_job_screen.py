"""The job view (ui/job_screen.py) under Pilot, on a real report: `ddptui job` on a hung
3-node gloo job of the testbed (bench/bench_job.py --save, paths made neutral)."""

from __future__ import annotations

import asyncio
import copy
import json
import os
from pathlib import Path
from typing import Any

from textual.app import App
from textual.widgets import DataTable, Label

from ddptui.ui.job_screen import JobScreen, rank_cells

FIX = Path(__file__).parent / "fixtures" / "job"
DOCS = Path(__file__).resolve().parents[1] / "docs"


def hung_report() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIX / "report-hung-3nodes.json").read_text())
    return data


class _Host(App[None]):
    def __init__(self, screen: JobScreen) -> None:
        super().__init__()
        self.job_screen = screen

    def on_mount(self) -> None:
        self.push_screen(self.job_screen)


def test_job_view_shows_verdict_ranks_and_the_odd_rank() -> None:
    asyncio.run(_view_shows_verdict_ranks_and_the_odd_rank())


async def _view_shows_verdict_ranks_and_the_odd_rank() -> None:
    screen = JobScreen(hung_report())
    app = _Host(screen)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        verdict = str(screen.query_one("#job-verdict", Label).render())
        assert "HUNG" in verdict and "rank 1 (node1) is in `evaluate`" in verdict
        table = screen.query_one("#job-ranks", DataTable)
        assert table.row_count == 3
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(3)]
        assert rows[1][0] == "1" and "evaluate" in rows[1][-1]
        assert "all_reduce" in rows[0][-1] and "all_reduce" in rows[2][-1]
        groups = str(screen.query_one("#job-groups").render())
        assert "▶ rank 1 (node1): is in `evaluate`" in groups
        if os.environ.get("DDPTUI_WRITE_DOCS"):
            (DOCS / "job-hung.svg").write_text(app.export_screenshot(title="ddptui job"))
        await pilot.press("r")  # a saved look: says so instead of looking again
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is not screen


def test_r_looks_again_with_the_given_relook() -> None:
    asyncio.run(_r_looks_again())


async def _r_looks_again() -> None:
    healthy = copy.deepcopy(hung_report())
    healthy["job"]["state"] = "healthy"
    healthy["job"]["headline"] = "healthy: 3 ranks running of 3, 3 progressed"
    healthy["job"]["stack_groups"] = []
    calls = []

    async def relook() -> dict[str, Any]:
        calls.append(1)
        return healthy

    screen = JobScreen(hung_report(), relook=relook)
    async with _Host(screen).run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        await pilot.press("r")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        assert calls == [1]
        assert "HEALTHY" in str(screen.query_one("#job-verdict", Label).render())


def test_missing_facts_read_na() -> None:
    cells = rank_cells({"rank": 0, "node": "node0", "pid": 5, "state": "S"})
    assert cells[4:7] == ("n/a", "n/a", "n/a")


def test_look_report_on_this_machine_feeds_the_view(tmp_path: Path) -> None:
    """A real look (host: local, whatever runs here) is a valid report the view shows."""
    from ddptui.config import ClusterConfig
    from ddptui.job.report import look_report
    from ddptui.report.schema import ReportModel

    config = ClusterConfig.model_validate(
        {"master": {"addr": "127.0.0.1", "port": 29500}, "nodes": [{"host": "local"}]}
    )
    report = asyncio.run(look_report(config, str(tmp_path / "c.yaml")))
    assert isinstance(report, ReportModel)
    assert report.steps[0].id == "job" and report.job and report.job["state"]

    async def relook() -> Any:
        return report

    async def scenario() -> None:
        screen = JobScreen(hung_report(), relook=relook)
        async with _Host(screen).run_test(size=(140, 40)) as pilot:
            await pilot.press("r")
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()
            label = str(screen.query_one("#job-verdict", Label).render())
            assert "HUNG" not in label or (report.job or {}).get("state") == "hung"

    asyncio.run(scenario())
