"""The checklist at 64-256 nodes stays readable: the columns that fit go to the
failing nodes first, the passing rest collapse into one counted column, and `/`
filters the nodes by name."""

from __future__ import annotations

import asyncio

from textual.widgets import DataTable, Input

from ddptui.config import parse_config
from ddptui.diagnosis.model import NodeResult, StepResult
from ddptui.ui.app import DdptuiApp
from ddptui.ui.matrix import GROUP, node_columns

N = 64


def config_text(n: int) -> str:
    nodes = ", ".join(f"{{host: 10.1.{i // 250}.{i % 250 + 1}, name: node{i}}}" for i in range(n))
    return f"master: {{addr: 10.1.0.1, port: 29500}}\nnodes: [{nodes}]\n"


def results(n: int, failing: set[int]) -> dict[str, StepResult]:
    def nodes(bad: set[int]) -> dict[str, NodeResult]:
        return {
            f"node{i}": NodeResult("fail" if i in bad else "pass", "x" if i in bad else "ok")
            for i in range(n)
        }

    return {
        "ssh": StepResult("ssh", "SSH reachability", "pass", 1.0, nodes(set())),
        "port": StepResult("port", "MASTER_PORT and all-pairs TCP", "fail", 2.0, nodes(failing)),
    }


def test_failing_nodes_first_and_the_rest_collapsed() -> None:
    cols = node_columns([f"node{i}" for i in range(N)], results(N, {17, 40}), room=90)
    assert cols.nodes[:2] == ("node17", "node40")
    assert cols.rest and len(cols.nodes) + len(cols.rest) == N
    assert cols.keys[-1] == GROUP
    few = node_columns(["a", "b", "c"], {}, room=90)
    assert few.nodes == ("a", "b", "c") and not few.rest  # few nodes: all shown, in order


def test_tui_at_64_nodes_shows_failures_first_and_filters() -> None:
    async def scenario() -> None:
        cfg = parse_config(config_text(N), "big.yaml")
        app = DdptuiApp(cfg, "big.yaml", autoconnect=False)
        async with app.run_test(size=(160, 50)) as pilot:
            for r in results(N, {17, 40}).values():
                app._on_step(r)
            await pilot.pause()
            table = app.query_one("#checklist", DataTable)
            labels = [str(c.label) for c in table.columns.values()]
            assert labels[2:4] == ["node17", "node40"]  # failing nodes lead
            assert labels[-1].startswith("+") and labels[-1].endswith("more")
            rest = str(table.get_cell("port", GROUP))
            assert rest.startswith("✔") and str(N - len(labels) + 3) in rest
            assert len(labels) < 30  # no sideways scroll through 64 columns
            await pilot.press("n")  # the first failing cell
            assert app.checklist.selected() == ("port", "node17")
            await pilot.press("slash")
            await pilot.pause()
            app.screen.query_one(Input).value = "node4"
            await pilot.press("enter")
            await pilot.pause()
            labels = [str(c.label) for c in table.columns.values()]
            matching = {"node4", *(f"node4{i}" for i in range(10))}
            shown = set(labels[2:-1])
            assert shown < matching and labels[-1] == f"+{len(matching - shown)} more"
            assert "node40" in shown  # still the failing one first
            await pilot.press("q")

    asyncio.run(scenario())
