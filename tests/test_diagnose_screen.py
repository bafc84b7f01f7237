"""The TUI's diagnosis screen (key `d`): shows a report, or asks for paths and runs one."""

from __future__ import annotations

import asyncio
from pathlib import Path

from textual.app import App
from textual.widgets import Input, Static

from ddptui.logs.session import run_diagnosis
from ddptui.ui.diagnose_screen import DiagnoseScreen, diagnosis_text, expand_specs

GPU = Path(__file__).parent / "fixtures" / "gpu-h100"


def body(app: App[None]) -> str:
    return str(app.screen.query_one("#diag-body", Static).render())


async def wait_for(app: App[None], pilot: object, text: str, timeout: float = 20.0) -> str:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        await pilot.pause(0.1)  # type: ignore[attr-defined]
        if text in body(app):
            return body(app)
    raise AssertionError(f"{text!r} never shown; screen says: {body(app)}")


def test_screen_shows_a_report() -> None:
    _, report, _ = run_diagnosis([str(GPU / "job-hang/watchdog-timeout.log")])

    async def go() -> None:
        app: App[None] = App()
        async with app.run_test(size=(140, 50)) as pilot:
            await app.push_screen(DiagnoseScreen(report))
            await pilot.pause()
            text = body(app)
            assert "First cause: WATCHDOG, rank 0" in text
            assert "SeqNum=4, OpType=ALLREDUCE" in text
            assert "Timeline per rank" in text and "rank 0" in text
            await pilot.press("escape")
            assert not isinstance(app.screen, DiagnoseScreen)

    asyncio.run(go())


def test_screen_without_report_asks_for_paths_and_diagnoses(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text((GPU / "nccl-env/net_bogus.log").read_text())

    async def go() -> None:
        app: App[None] = App()
        async with app.run_test(size=(140, 50)) as pilot:
            await app.push_screen(DiagnoseScreen())
            await pilot.pause()
            assert isinstance(app.focused, Input)
            app.screen.query_one(Input).value = f"{tmp_path}/*.log"
            await pilot.press("enter")
            text = await wait_for(app, pilot, "First cause")
            assert "NET-NOPLUGIN" in text
            app.screen.query_one(Input).value = str(tmp_path / "missing.log")
            await pilot.press("enter")
            text = await wait_for(app, pilot, "no such file")

    asyncio.run(go())


def test_healthy_report_and_expansion(tmp_path: Path) -> None:
    _, report, _ = run_diagnosis([str(GPU / "raw-torchrun/healthy-1gpu.log")])
    assert "Nothing wrong found" in diagnosis_text(report).plain
    (tmp_path / "x 1.log").write_text("")
    assert expand_specs(f"'{tmp_path}'/*.log node0:/var/log/*.log -") == [
        str(tmp_path / "x 1.log"), "node0:/var/log/*.log", "-"
    ]
