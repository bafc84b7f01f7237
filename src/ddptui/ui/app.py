"""The interactive checklist walkthrough: steps x nodes, the first failure with its fix,
details as Markdown, live metrics per node.

Views never call the transport: they ask the session (runner) to run steps in workers
and receive immutable results through callbacks on the app's own event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from ddptui.diagnosis.model import NodeResult, StepResult
from ddptui.report.json_report import first_failure, verdict
from ddptui.stepmeta import ORDER, TITLES
from ddptui.ui.render import GLYPH, STYLE, banner_text, detail_markdown
from ddptui.ui.widgets import Banner, ChecklistTable, HeaderBar, MetricsPane

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ddptui.checklist.runner import Session
    from ddptui.config import ClusterConfig

LOG_LINES = 5000
QUIT_BOUND_S = 8.0
STATUS_CHARS = 12  # "✘ fail 28.1s"


def _append_time(path: str) -> None:
    with contextlib.suppress(OSError), Path(path).open("a") as f:
        f.write(f"{time.time():.6f}\n")


class DdptuiApp(App[int]):
    """`ddptui CONFIG`: walk the checklist on a live cluster, or replay a saved session."""

    CSS_PATH = "app.tcss"
    TITLE = "ddptui"
    BINDINGS: ClassVar[list[BindingType]] = [
        # enter/space: on the checklist (ChecklistTable), where the focus stays.
        Binding("enter", "next_step", "Next step", show=False),
        Binding("space", "next_step", "Next step", show=False),
        Binding("a", "run_all", "All"),
        Binding("r", "rerun", "Re-run"),
        Binding("s", "skip", "Skip"),
        Binding("n", "next_failure", "Next fail"),
        Binding("p", "prev_failure", "Prev fail"),
        Binding("l", "logs", "Logs"),
        Binding("e", "export", "Export"),
        Binding("q", "quit_app", "Quit"),
        Binding("ctrl+c", "quit_app", "Quit", show=False, priority=True),
    ]

    def __init__(
        self,
        config: ClusterConfig | None,
        source: str,
        *,
        autoconnect: bool = True,
        replay: dict[str, Any] | None = None,
        load: Callable[[], ClusterConfig] | None = None,
    ) -> None:
        """config, or load: a function that returns it, called after the first frame
        (pydantic and the YAML parser stay off the start-up path). A ConfigError it
        raises ends the app with return code 2, the error in `config_error`."""
        super().__init__()
        if config is None and load is None:
            raise ValueError("give a config or a function that loads it")
        self._load = load
        self.config_error: Exception | None = None
        # None only until _load_config() has run (the first frame); never None after.
        self.config: ClusterConfig = config  # type: ignore[assignment]
        self.source = source
        self.autoconnect = autoconnect and replay is None
        self.replay_data = replay  # a saved session shown read-only (`ddptui replay`)
        self.saver: Any = None  # the session's Autosaver once connected
        self._autosave_warned = False
        self._queued: bool | None = None  # enter (True) / a (False) pressed while connecting
        self.session: Session | None = None
        self.results: dict[str, StepResult] = {}
        self.running: str | None = None
        self.clock = time.monotonic  # the header's elapsed time (tests freeze it)
        self.started = self.clock()
        # The session's own logs once connected; a saved session's in replay.
        self.logs: dict[str, deque[str]] = {}
        self.node_names: list[str] = []
        self.metrics: Any = None  # MetricsModel once connected
        self._streamer: Any = None
        self._quitting = False
        self.detail_source = ""
        self.elapsed_frozen = 0.0

    @classmethod
    def replay(cls, report: dict[str, Any], source: str) -> DdptuiApp:
        """The TUI on a saved session (a report JSON), read-only."""
        from ddptui.config import ClusterConfig

        nodes = [{"host": n["host"], "name": n["name"]} for n in report["nodes"]]
        master = report.get("master") or {}
        interval = (report.get("metrics") or {}).get("interval_s") or 1.0
        config = ClusterConfig.model_validate(
            {
                "name": report.get("cluster") or None,
                "master": {
                    "addr": master.get("addr") or (nodes[0]["host"] if nodes else "localhost"),
                    "port": master.get("port") or 29500,
                },
                "nodes": nodes,
                "metrics_interval": interval,
            }
        )
        return cls(config, source, replay=report)

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        with Horizontal(id="body"):
            with Vertical(id="left"):
                yield ChecklistTable(id="checklist", cursor_type="cell", zebra_stripes=False)
                yield Banner(id="banner")
                with VerticalScroll(id="detail-scroll"):
                    yield Static(id="detail")
            yield MetricsPane([], id="metrics")
        yield Footer()

    def on_mount(self) -> None:
        trace = os.environ.get("DDPTUI_TRACE_FIRST_FRAME")
        if trace:  # for bench/bench_tui.py: when the first frame was drawn (wall clock)
            self.call_after_refresh(_append_time, trace)
        self.query_one("#checklist", DataTable).focus()
        self.set_interval(1.0, self._tick)
        if self.config is None:
            # First frame: the checklist without node columns; the config (pydantic,
            # the YAML parser) loads right after it.
            self._build_table()
            self._refresh_chrome()
            self.call_after_refresh(self._load_config)
            return
        self._config_ready()

    def _load_config(self) -> None:
        assert self._load is not None
        try:
            self.config = self._load()
        except Exception as exc:  # noqa: BLE001 - the caller reports it after the app exits
            self.config_error = exc
            self.exit(2, return_code=2)
            return
        self._config_ready()

    def _config_ready(self) -> None:
        self.node_names = [n.display for n in self.config.nodes]
        self.logs = {name: deque(maxlen=LOG_LINES) for name in self.node_names}
        self.query_one(MetricsPane).set_nodes(self.node_names)
        self._build_table()
        if self.replay_data is not None:
            self._load_replay(self.replay_data)
        self._refresh_chrome()
        if self.autoconnect:
            # The frame comes first; the session (asyncssh, steps) loads after it.
            self.call_after_refresh(self._connect)

    def _build_table(self) -> None:
        table = self.query_one("#checklist", DataTable)
        table.clear(columns=True)
        table.add_column("step", key="step")
        table.add_column("status", key="status", width=STATUS_CHARS)
        # Node columns share the checklist's width (left of the metrics pane): readable
        # summaries with few nodes, compact glyphs with many, never a sideways scroll.
        left = int(self.size.width * 0.6) - 2
        share = (left - 11 - STATUS_CHARS - 2) // max(1, len(self.node_names)) - 2
        width = max(6, min(40, share))
        self.cell_chars = width
        for name in self.node_names:
            table.add_column(name, key=name, width=width)
        for step_id in ORDER:
            table.add_row(
                step_id,
                self._cell("pending", ""),
                *[self._cell("pending", "") for _ in self.node_names],
                key=step_id,
            )

    def _cell(self, status: str, text: str, limit: int | None = None) -> Text:
        label = f"{GLYPH[status]} {text}".rstrip()
        limit = limit or int(getattr(self, "cell_chars", 30))
        if len(label) > limit:
            label = label[: limit - 1] + "…"
        return Text(label, style=STYLE[status])

    # ------------------------------------------------------------------ session plumbing

    def _make_session(self) -> Session:
        from ddptui.checklist.runner import Session

        return Session(
            self.config,
            self.source,
            on_node=self._on_node,
            on_step=self._on_step,
        )

    def _connect(self) -> None:
        from ddptui.report.autosave import Autosaver

        self.session = self._make_session()
        self.saver = Autosaver(self.config.name)
        self.session.info = self.saver.info
        self.logs = self.session.logs
        self.run_steps_worker(["ssh"], then_metrics=True)

    def _load_replay(self, report: dict[str, Any]) -> None:
        """Show a saved session as it was: results, logs, the metrics timeline."""
        from ddptui.metrics import MetricsModel
        from ddptui.report.load import results_from_report

        for result in results_from_report(report).values():
            self._on_step(result)
        for node, log in (report.get("logs") or {}).items():
            lines: list[str] = []
            for ex in log.get("excerpts") or ():
                lines.append(f"── excerpt at line {ex.get('first_line')} ({ex.get('finding')}) ──")
                lines += [str(x) for x in ex.get("lines") or ()]
            total, tail = log.get("lines_total") or 0, log.get("tail") or []
            if lines:
                lines.append(f"── last {len(tail)} of {total} lines ──")
            self.logs[node] = deque([*lines, *map(str, tail)], maxlen=LOG_LINES)
        if report.get("metrics"):
            self.metrics = MetricsModel.from_export(report["metrics"], self.node_names)
            self.query_one(MetricsPane).model = self.metrics
        self.elapsed_frozen = float((report.get("timings") or {}).get("total_s") or 0.0)
        first = first_failure(self.results)
        if first is not None and first["nodes"] and first["nodes"][0] in self.node_names:
            self._move_to(first["step"], 2 + self.node_names.index(first["nodes"][0]))

    def _autosave(self, *, now: bool = False) -> None:
        """Save the session: in the background after a step, at once on quit."""
        if self.saver is None or self.session is None:
            return
        from ddptui.report.json_report import build_report

        report = build_report(self.session, metrics=self.metrics)
        if now:
            self.saver.flush(timeout=5)
            self.saver.save(report)
        else:
            self.saver.save_later(report)
        if self.saver.error and not self._autosave_warned:
            self._autosave_warned = True  # once: it would say the same after every step
            self.notify(self.saver.error, severity="warning", timeout=10)

    def _on_node(self, step: str, node: str, result: NodeResult) -> None:
        table = self.query_one("#checklist", DataTable)
        table.update_cell(step, node, self._cell(result.status, result.summary), update_width=False)
        self._refresh_detail()

    def _on_step(self, result: StepResult) -> None:
        self.results[result.id] = result
        table = self.query_one("#checklist", DataTable)
        table.update_cell(
            result.id,
            "status",
            self._cell(result.status, f"{result.status} {result.duration_s:.1f}s", STATUS_CHARS),
        )
        for node, nr in result.nodes.items():
            if node in self.node_names:
                table.update_cell(
                    result.id, node, self._cell(nr.status, nr.summary), update_width=False
                )
        self._refresh_chrome()
        self._autosave()

    def run_steps_worker(self, step_ids: list[str], *, then_metrics: bool = False) -> None:
        """The one way steps run: a declared worker, one batch at a time. Busy from now,
        not from when the worker starts: a key in between would replace the batch."""
        self.running = step_ids[0]
        self.run_worker(
            self._run_steps(step_ids, then_metrics),
            name=f"steps {','.join(step_ids)}",
            group="steps",
            exclusive=True,
            exit_on_error=False,
            description=f"run {', '.join(step_ids)}",
        )

    async def _run_steps(self, step_ids: list[str], then_metrics: bool = False) -> None:
        assert self.session is not None
        for step_id in step_ids:
            self.running = step_id
            self._move_to(step_id)  # the detail pane follows the step being run
            table = self.query_one("#checklist", DataTable)
            table.update_cell(step_id, "status", self._cell("running", "running", STATUS_CHARS))
            self._refresh_chrome()
            try:
                await self.session.run_step(step_id)
            finally:
                self.running = None
                self._refresh_chrome()
            if then_metrics:
                self._start_metrics()
        first = first_failure(self.results)
        if first is not None and first["nodes"]:
            # Land on the first failure: its cause and fix are in the detail pane.
            self._move_to(first["step"], 2 + self.node_names.index(first["nodes"][0]))
        if self._queued is not None:  # enter / a pressed while connecting
            first_only, self._queued = self._queued, None
            self.call_later(self._run_pending, first_only=first_only)  # after this worker

    def _start_metrics(self) -> None:
        if self._streamer is not None or self.session is None:
            return
        from ddptui.metrics import MetricsModel

        self.metrics = MetricsModel(self.node_names)
        self._streamer = self.session.metrics_streamer(self.metrics)
        self.query_one(MetricsPane).model = self.metrics
        self.run_worker(
            self._streamer.start(),
            name="metrics",
            group="metrics",
            exclusive=True,
            exit_on_error=False,
            description="stream node metrics",
        )

    # ------------------------------------------------------------------ chrome

    def _tick(self) -> None:
        replay = self.replay_data is not None
        if self.config is None:
            self.query_one(HeaderBar).update(f"ddptui · loading {self.source} …")
            return
        self.query_one(HeaderBar).update_state(
            self.config.name or self.source,
            len(self.node_names),
            self.elapsed_frozen if replay else self.clock() - self.started,
            self._verdict(),
            replay=(self.replay_data or {}).get("started_at") or "" if replay else None,
        )

    def _verdict(self) -> str:
        if self.running:
            return "running"
        if not self.results:
            return "connecting" if self.session is not None and not self.results else "ready"
        return verdict(self.results)

    def _refresh_chrome(self) -> None:
        self._tick()
        done = all(s in self.results for s in ORDER)
        text, kind = banner_text(first_failure(self.results), self.running, done)
        self.query_one(Banner).show(text, kind)
        self._refresh_detail()

    def _selected(self) -> tuple[str, str | None]:
        table = self.query_one("#checklist", DataTable)
        row, col = table.cursor_coordinate
        step = ORDER[min(max(row, 0), len(ORDER) - 1)]
        node = self.node_names[col - 2] if col >= 2 and col - 2 < len(self.node_names) else None
        return step, node

    def _refresh_detail(self) -> None:
        step, node = self._selected()
        text = detail_markdown(self.results.get(step), TITLES[step], node, step == self.running)
        if text == self.detail_source:
            return  # nothing changed: skip the re-render (it is the costly part of a key)
        self.detail_source = text
        if not self.results:
            # First frame: plain text. rich.markdown (markdown-it) loads once there is
            # something worth formatting, off the start-up path.
            self.query_one("#detail", Static).update(Text(text))
            return
        from rich.markdown import Markdown

        self.query_one("#detail", Static).update(Markdown(text))

    def on_data_table_cell_highlighted(self, event: DataTable.CellHighlighted) -> None:
        self._refresh_detail()

    # ------------------------------------------------------------------ actions

    def action_next_step(self) -> None:
        self._run_pending(first_only=True)

    def action_run_all(self) -> None:
        self._run_pending(first_only=False)

    def _read_only(self) -> bool:
        if self.replay_data is not None:
            self.notify("Replay of a saved session: read-only (e exports, l shows logs).")
            return True
        return False

    def _run_pending(self, *, first_only: bool) -> None:
        if self._read_only():
            return
        todo = [s for s in ORDER if s not in self.results]
        if not todo:
            self.notify("Every step has run; r re-runs the selected one.")
            return
        if self.session is None or "ssh" not in self.results:
            # Still loading or connecting: run it as soon as the nodes are connected.
            self._queued = first_only
            self.notify("Connecting to the nodes; the steps run once they are connected.")
            return
        if self._busy():
            return
        self.run_steps_worker(todo[:1] if first_only else todo)

    def action_rerun(self) -> None:
        if self._read_only() or self._busy():
            return
        step, _ = self._selected()
        self.run_steps_worker([step])

    def action_skip(self) -> None:
        if self._read_only() or self._busy() or self.session is None:
            return
        step, _ = self._selected()
        self.session.skip_step(step)

    def _busy(self) -> bool:
        if self.running is not None or self.session is None:
            self.notify("A step is running; wait for it (or q to quit).", severity="warning")
            return True
        return False

    def _move_to(self, step: str, col: int | None = None) -> None:
        table = self.query_one("#checklist", DataTable)
        _, current = table.cursor_coordinate
        table.move_cursor(row=ORDER.index(step), column=current if col is None else col)

    def _failures(self) -> list[tuple[int, int]]:
        cells = []
        for r, step in enumerate(ORDER):
            res = self.results.get(step)
            if res is None:
                continue
            for c, name in enumerate(self.node_names):
                if res.nodes.get(name) and res.nodes[name].status in ("fail", "error"):
                    cells.append((r, c + 2))
        return cells

    def _jump(self, direction: int) -> None:
        cells = self._failures()
        if not cells:
            self.notify("No failures.")
            return
        table = self.query_one("#checklist", DataTable)
        here = (table.cursor_coordinate.row, table.cursor_coordinate.column)
        ahead = [c for c in cells if (c > here if direction > 0 else c < here)]
        target = (
            (ahead[0] if direction > 0 else ahead[-1])
            if ahead
            else (cells[0] if direction > 0 else cells[-1])
        )
        table.move_cursor(row=target[0], column=target[1])

    def action_next_failure(self) -> None:
        self._jump(+1)

    def action_prev_failure(self) -> None:
        self._jump(-1)

    def action_logs(self) -> None:
        from ddptui.ui.screens import LogScreen

        if not self.node_names:
            return  # the config is still loading
        _, node = self._selected()
        node = node or self.node_names[0]
        quoted = [
            (f.id, e)
            for step in ORDER
            if (r := self.results.get(step)) is not None
            for f in r.findings
            if node in f.nodes
            for e in f.evidence
        ]
        self.push_screen(LogScreen(node, list(self.logs.get(node, [])), quoted))

    def action_export(self) -> None:
        from ddptui.ui.screens import ExportScreen

        self.push_screen(ExportScreen(), self._export)

    def current_report(self) -> dict[str, Any] | None:
        """What `e` exports: the live session's report, or the replayed one as saved."""
        if self.replay_data is not None:
            return self.replay_data
        if self.session is None:
            return None
        from ddptui.report.json_report import build_report

        return build_report(self.session, metrics=self.metrics)

    def _export(self, choice: tuple[str, str] | None) -> None:
        report = self.current_report() if choice else None
        if not choice or report is None:
            return
        fmt, path = choice
        from ddptui.report.export import write_report

        # The screen as it is now goes into an HTML report (Textual renders it as SVG).
        shot = (
            self.export_screenshot(title=f"ddptui {self.config.name or ''}")
            if fmt == "html"
            else None
        )
        try:
            written = write_report(report, fmt, path, screenshot_svg=shot)
        except OSError as exc:
            saved = (
                f"; the session is saved in {self.saver.path}"
                if self.saver and self.saver.saves
                else ""
            )
            self.notify(
                f"Cannot write {path}: {exc.strerror or exc}{saved}", severity="error", timeout=10
            )
            return
        self.notify(f"Report written: {written}")

    def action_quit_app(self) -> None:
        if self._quitting:
            return
        self._quitting = True
        self.query_one(Banner).show("stopping everything on the nodes…", "running")
        self.run_worker(
            self._stop_and_exit(),
            name="quit",
            group="quit",
            exclusive=True,
            exit_on_error=False,
            description="stop the nodes' probes and quit",
        )

    async def _stop_and_exit(self) -> None:
        self.workers.cancel_group(self, "steps")
        # Bounded: if a node does not answer, exiting still closes every lifeline (the
        # local probes' stdin, the SSH connections), which kills the probes there.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stop_nodes(), QUIT_BOUND_S)
        self.exit(0)

    async def _stop_nodes(self) -> None:
        if self._streamer is not None:
            await self._streamer.stop()
        if self.session is not None:
            await self.session.close()
            self._autosave(now=True)  # the last metrics and logs too

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for key, title, help_text, action in (
            (
                "enter",
                "Run next step",
                "Run the next step of the walkthrough",
                self.action_next_step,
            ),
            ("a", "Run all steps", "Run every remaining step", self.action_run_all),
            ("r", "Re-run selected step", "Run the selected step again", self.action_rerun),
            ("s", "Skip selected step", "Mark the selected step skipped", self.action_skip),
            ("n", "Next failure", "Jump to the next failing cell", self.action_next_failure),
            (
                "p",
                "Previous failure",
                "Jump to the previous failing cell",
                self.action_prev_failure,
            ),
            ("l", "Logs of selected node", "Open the node's log", self.action_logs),
            ("e", "Export report", "Write JSON / Markdown / HTML", self.action_export),
            ("q", "Quit", "Stop everything on the nodes and quit", self.action_quit_app),
        ):
            yield SystemCommand(f"{title} ({key})", help_text, action)
