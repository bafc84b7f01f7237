"""`ddptui replay`: a saved session in the TUI, read-only, and the log screen's marks
(the line behind a finding, where it happened in the node's stream). No testbed."""

from __future__ import annotations

import asyncio
import copy
import json
import re
from pathlib import Path
from typing import Any

from textual.widgets import DataTable, Log

from ddptui.diagnosis.finding import Finding
from ddptui.report.html import render_html
from ddptui.ui.app import DdptuiApp
from ddptui.ui.banner import Banner
from ddptui.ui.log_screen import marked_lines

REPORTS = Path(__file__).parent / "fixtures" / "reports"
WARN = "NCCL WARN NET/Socket : Connection closed by remote peer 10.0.0.3<36021>"


def log_lines(app: DdptuiApp) -> list[str]:
    log = app.screen.query_one(Log)
    return [str(log.lines[i]) for i in range(log.line_count)]


def test_mark_lines_marks_the_quoted_line_in_place() -> None:
    lines = ["[r1] NCCL INFO Bootstrap", f"[r1] node1:1234:99 [0] {WARN}", "[r1] done"]
    f = Finding("NCCL-REMOTE-CLOSED", "error", ("node1",), "s", "c", "x", (f"node1: {WARN}",))
    out = marked_lines("node1", lines, [], [f])
    assert out[0] == lines[0] and out[2] == lines[2]
    assert out[1] == f"⟶ NCCL-REMOTE-CLOSED │ {lines[1]}"
    short = Finding("X", "error", ("node1",), "s", "c", "x", ("short",))
    assert marked_lines("node1", lines, [], [short]) == lines  # too short to match


def test_marked_lines_follow_line_ids_not_text() -> None:
    """Two identical lines: only the one the finding cites by id is marked."""
    lines = [f"[r1] {WARN}", "[r1] between", f"[r1] {WARN}"]
    f = Finding("NCCL-REMOTE-CLOSED", "error", ("node1",), "s", "c", "x", (f"node1: {WARN}",),
                lines=("node1#3",))
    out = marked_lines("node1", lines, ["node1#1", "node1#2", "node1#3"], [f])
    assert out[0] == lines[0] and out[2].startswith("⟶ NCCL-REMOTE-CLOSED")


def test_replay_shows_the_saved_session_read_only(tmp_path: Path) -> None:
    report = json.loads((REPORTS / "session_port_env.json").read_text())
    saved = copy.deepcopy(report)

    async def scenario() -> None:
        app = DdptuiApp.replay(report, "session.json")
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.pause(0.2)
            table = app.query_one("#checklist", DataTable)
            assert str(table.get_cell("port", "node1")).startswith("✘")
            assert str(table.get_cell("allreduce", "node0")).startswith("✔")
            banner = str(app.query_one(Banner).render())
            assert "FAIL at port" in banner and "iptables -I INPUT" in banner
            assert app.checklist.selected() == ("port", "node1")  # lands on the first failure
            assert "REPLAY" in str(app.query_one("#header").render())
            # The metrics timeline came back with the session.
            view = app.metrics.snapshot().node("node2")
            assert view is not None and len(view.samples) >= 5
            for key in ("enter", "a", "r", "s"):
                await pilot.press(key)
            await pilot.pause(0.2)
            assert app.session is None and app.running is None
            assert app.results["port"].status == "fail"  # nothing re-ran, nothing skipped
            # `e` in a replay exports the saved session as it is.
            assert app.current_report() == saved
            await pilot.press("q")

    asyncio.run(scenario())


def test_replay_log_screen_marks_the_signature_line() -> None:
    report = json.loads((REPORTS / "session_port_env.json").read_text())
    ar = next(s for s in report["steps"] if s["id"] == "allreduce")
    ar["status"] = "fail"
    ar["nodes"]["node1"]["status"] = "fail"
    ar["findings"] = [
        {
            "id": "NCCL-REMOTE-CLOSED",
            "severity": "error",
            "nodes": ["node1"],
            "summary": "a peer closed the connection",
            "cause": "c",
            "fix": "f",
            "evidence": [f"node1: {WARN}"],
        }
    ]
    report["logs"]["node1"]["tail"].insert(3, f"[r1] node1:77:88 [0] {WARN}")

    async def scenario() -> None:
        app = DdptuiApp.replay(report, "session.json")
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.pause(0.2)
            app.checklist.move_to("allreduce", 2 + app.node_names.index("node1"))
            await pilot.press("l")
            await pilot.pause(0.3)
            lines = log_lines(app)
            assert f"• NCCL-REMOTE-CLOSED: node1: {WARN}" in lines[:4]  # the findings first
            marked = [x for x in lines if x.startswith("⟶ NCCL-REMOTE-CLOSED │ ")]
            assert len(marked) == 1 and WARN in marked[0]
            await pilot.press("escape")
            await pilot.press("q")

    asyncio.run(scenario())


def test_export_from_replay_equals_the_saved_session(tmp_path: Path) -> None:
    report = json.loads((REPORTS / "session_healthy.json").read_text())

    async def scenario() -> None:
        app = DdptuiApp.replay(copy.deepcopy(report), "s.json")
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause(0.1)
            app.checklist.export(("json", str(tmp_path / "again.json")))
            await pilot.pause(0.1)
            await pilot.press("q")

    asyncio.run(scenario())
    assert json.loads((tmp_path / "again.json").read_text()) == report


def test_first_frame_comes_before_the_config_loads(tmp_path: Path) -> None:
    from ddptui.config import ConfigError, load_config

    good = tmp_path / "ok.yaml"
    good.write_text(
        "name: two\nmaster: {addr: 127.0.0.1, port: 29511}\n"
        "nodes: [{host: local, name: a}, {host: local, name: b}]\n"
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("master: {addr: 10.0.0.1, port: 29500}\nnodes: [{host: a, bogus: 1}]\n")

    async def scenario() -> None:
        loaded: list[float] = []

        def load() -> Any:
            loaded.append(1.0)
            return load_config(good)

        app = DdptuiApp(None, str(good), autoconnect=False, load=load)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause(0.2)
            assert loaded and app.node_names == ["a", "b"]
            table = app.query_one("#checklist", DataTable)
            assert [str(c.label) for c in table.columns.values()] == ["step", "status", "a", "b"]
            assert "ddptui two" in str(app.query_one("#header").render())
            await pilot.press("q")

        app = DdptuiApp(None, str(bad), load=lambda: load_config(bad))
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause(0.3)
        assert app.return_code == 2
        assert isinstance(app.config_error, ConfigError)
        assert "bogus" in str(app.config_error.problems)

    asyncio.run(scenario())


def test_html_export_from_the_tui_embeds_the_screen(tmp_path: Path) -> None:
    report = json.loads((REPORTS / "session_port_env.json").read_text())
    out = tmp_path / "r.html"

    async def scenario() -> None:
        app = DdptuiApp.replay(report, "s.json")
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.pause(0.2)
            app.checklist.export(("html", str(out)))
            await pilot.press("q")

    asyncio.run(scenario())
    html = out.read_text()
    without = render_html(report)
    assert html.count("<svg") == without.count("<svg") + 1  # the screen, as Textual drew it
    assert "REPLAY" in html and "REPLAY" not in without
    assert "<script" not in html
    assert set(re.findall(r"https?://[^\s\"')]+", html)) <= {"http://www.w3.org/2000/svg"}


def test_replayed_tail_marks_the_lines_the_live_view_marked() -> None:
    """A finding cites a line by id; the saved session's tail (the last 300 lines) marks
    that line as the live log view did, and only that one of two identical lines (CI,
    round 20: the replayed tail lost the live view's mark)."""
    from ddptui.diagnosis.logstore import LogStore
    from ddptui.report.json_report import TAIL_LINES, log_excerpts
    from ddptui.ui.replay import node_log

    store = LogStore(["node0"])
    for i in range(TAIL_LINES + 40):
        store.append("node0", WARN if i in (100, 320) else f"NCCL INFO step {i}", rank=0)
    cited = store.lines("node0")[320]
    assert cited.text == WARN
    f = Finding("NCCL-REMOTE-CLOSED", "error", ("node0",), "s", "c", "x",
                (f"node0: [r0] {WARN}",), lines=(cited.id,))  # fmt: skip
    kept = store.lines("node0")
    live = marked_lines("node0", [ln.tagged() for ln in kept], [ln.id for ln in kept], [f])
    step = {"id": "allreduce", "findings": [{"id": f.id, "nodes": ["node0"],
                                             "evidence": list(f.evidence), "lines": [cited.id]}]}  # fmt: skip
    saved = log_excerpts([step], store)["node0"]
    log = node_log(json.loads(json.dumps(saved)), "node0")
    replay = marked_lines("node0", list(log.lines), list(log.ids), [f], log.marks)
    assert replay[-TAIL_LINES:] == live[-TAIL_LINES:]
    assert sum(x.startswith("⟶ NCCL-REMOTE-CLOSED") for x in live) == 1
    # ... and the excerpt above the tail marks it too.
    assert sum(x.startswith("⟶ NCCL-REMOTE-CLOSED") for x in replay) == 2
