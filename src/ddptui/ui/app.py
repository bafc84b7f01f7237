"""The interactive checklist walkthrough: steps x nodes, the first failure with its fix,
details as Markdown, live metrics per node.

The app only lays out and renders: the run core (checklist/run.py) owns the session,
the metrics, the autosave and the logs, and the app subscribes to its events. Steps
run in declared workers; a step that raises shows `error` in its cell (the core turns
it into a result).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from ddptui.diagnosis.model import NodeResult, StepResult
from ddptui.glyphs import GLYPH
from ddptui.report.json_report import first_failure, run_state
from ddptui.stepmeta import ORDER, TITLES
from ddptui.ui.banner import Banner
from ddptui.ui.checklist_table import ChecklistTable
from ddptui.ui.header import HeaderBar
from ddptui.ui.layout import STATUS_CHARS, STEP_CHARS, node_room
from ddptui.ui.matrix import GROUP, Columns, group_cell, node_columns
from ddptui.ui.metrics_pane import METRICS_NODES, MetricsPane
from ddptui.ui.render import STYLE, banner_text, detail_markdown

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ddptui.checklist.run import RunCore, RunEvent
    from ddptui.checklist.runner import Session
    from ddptui.config import ClusterConfig
    from ddptui.glance import Glance
    from ddptui.ui.replay import Replay

QUIT_BOUND_S = 8.0


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
        Binding("j", "job", "Job"),
        Binding("d", "diagnose", "Diagnose logs"),
        Binding("slash", "filter_nodes", "Filter", show=False),
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
        glance: Glance | None = None,
    ) -> None:
        """config, or load: a function that returns it, called after the first frame
        (pydantic and the YAML parser stay off the start-up path). A ConfigError it
        raises ends the app with return code 2, the error in `config_error`. glance:
        the cluster's name and nodes as a glance at its file saw them, for the first
        frame's header and node columns until the config is loaded."""
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
        self._replay: Replay | None = None
        self.core: RunCore | None = None
        self._autosave_warned = False
        self._queued: bool | None = None  # enter (True) / a (False) pressed while connecting
        self.results: dict[str, StepResult] = {}
        self.running: str | None = None
        self.clock = time.monotonic  # the header's elapsed time (tests freeze it)
        self.started = self.clock()
        self.glance = glance if config is None else None
        self.node_names: list[str] = list(self.glance.nodes) if self.glance else []
        self.node_filter = ""
        self.columns = Columns((), (), 6)
        self._replay_metrics: Any = None
        self._quitting = False
        self.detail_source = ""
        self.elapsed_frozen = 0.0

    @classmethod
    def replay(cls, report: dict[str, Any], source: str) -> DdptuiApp:
        """The TUI on a saved session (a report JSON), read-only."""
        from ddptui.ui.replay import load_replay

        view = load_replay(report)
        app = cls(view.config, source, replay=report)
        app._replay = view
        return app

    # ------------------------------------------------------------------ what views read

    @property
    def _main(self) -> Screen[Any]:
        """The checklist's screen, also while a modal (logs, job, diagnosis) is on top:
        the clock and the run's events keep updating it underneath."""
        return self.screen_stack[0] if self.screen_stack else self.screen

    @property
    def session(self) -> Session | None:
        return self.core.session if self.core is not None else None

    @property
    def saver(self) -> Any:
        return self.core.saver if self.core is not None else None

    @property
    def metrics(self) -> Any:
        return self.core.model if self.core is not None else self._replay_metrics

    def log_lines(self, node: str) -> tuple[list[str], list[str], dict[int, str]]:
        """(lines, their ids, known marks) of a node's log, live or replayed."""
        if self._replay is not None:
            log = self._replay.logs.get(node)
            return (list(log.lines), list(log.ids), dict(log.marks)) if log else ([], [], {})
        if self.core is None:
            return [], [], {}
        kept = self.core.logs.lines(node)
        return [ln.tagged() for ln in kept], [ln.id for ln in kept], {}

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
        self._main.query_one("#checklist", DataTable).focus()
        self.set_interval(1.0, self._tick)
        if self.config is None:
            # First frame: the checklist, with the node columns a glance at the file
            # found; the config (pydantic, the YAML parser) loads right after it.
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
        if self._replay is not None:
            self._show_replay(self._replay)
        self._build_table()
        first = first_failure(self.results)
        if first is not None and first["nodes"]:
            self._move_to(first["step"], node=first["nodes"][0])  # replay lands there
        self._refresh_chrome()
        if self.autoconnect:
            # The frame comes first; the session (asyncssh, steps) loads after it.
            self.call_after_refresh(self._connect)

    def _room(self) -> int:
        """Characters the node columns share (left of the metrics pane)."""
        return node_room(self.size.width)

    def _build_table(self) -> None:
        """The matrix: step rows, one column per node that fits (failing nodes first,
        the passing rest collapsed into one column); rebuilt when that set changes."""
        table = self._main.query_one("#checklist", DataTable)
        cursor = table.cursor_coordinate
        self.columns = node_columns(self.node_names, self.results, self._room(), self.node_filter)
        table.clear(columns=True)
        # A fixed width: an auto-sized column is measured on the table's next idle, and
        # a rebuild (filter, failing nodes moving first) could show it at its label's 4.
        table.add_column("step", key="step", width=STEP_CHARS)
        table.add_column("status", key="status", width=STATUS_CHARS)
        for name in self.columns.nodes:
            table.add_column(name, key=name, width=self.columns.width)
        if self.columns.rest:
            label = f"+{len(self.columns.rest)} more"
            table.add_column(label, key=GROUP, width=max(self.columns.width, len(label) + 2))
        for step_id in ORDER:
            table.add_row(step_id, *self._row_cells(step_id), key=step_id)
        table.move_cursor(row=cursor.row, column=cursor.column)
        # The metrics pane follows the matrix: its nodes first (failing ones lead), the
        # filter applies, at most METRICS_NODES widgets.
        shown = [*self.columns.nodes, *self.columns.rest]
        self._main.query_one(MetricsPane).set_nodes(
            shown[:METRICS_NODES], len(self.node_names) - min(len(shown), METRICS_NODES)
        )

    def _row_cells(self, step_id: str) -> list[Text]:
        result = self.results.get(step_id)
        if step_id == self.running:
            status = self._cell("running", "running", STATUS_CHARS)
        elif result is None:
            status = self._cell("pending", "")
        else:
            status = self._cell(
                result.status, f"{result.status} {result.duration_s:.1f}s", STATUS_CHARS
            )
        cells = [status]
        for name in self.columns.nodes:
            nr = result.nodes.get(name) if result is not None else None
            cells.append(self._cell(nr.status, nr.summary) if nr else self._cell("pending", ""))
        if self.columns.rest:
            state, text = group_cell(result, self.columns.rest)
            cells.append(self._cell(state, text, 40, glyph=False))  # counts carry glyphs
        return cells

    def _cell(
        self, status: str, text: str, limit: int | None = None, *, glyph: bool = True
    ) -> Text:
        label = f"{GLYPH[status]} {text}".rstrip() if glyph else text
        limit = limit or self.columns.width
        if len(label) > limit:
            label = label[: limit - 1] + "…"
        return Text(label, style=STYLE[status])

    def _refresh_row(self, step_id: str) -> None:
        wanted = node_columns(self.node_names, self.results, self._room(), self.node_filter)
        if wanted.keys != self.columns.keys:
            self._build_table()  # failing nodes move to the front
            return
        table = self._main.query_one("#checklist", DataTable)
        cells = self._row_cells(step_id)
        for key, cell in zip(("status", *self.columns.keys), cells, strict=True):
            table.update_cell(step_id, key, cell, update_width=False)

    # ------------------------------------------------------------------ the run core

    def _connect(self) -> None:
        from ddptui.checklist.run import RunCore

        self.core = RunCore(self.config, self.source)
        self.core.subscribe(self._on_event)
        self.run_steps_worker(["ssh"])

    def _show_replay(self, view: Replay) -> None:
        """A saved session as it was: results, logs, the metrics timeline."""
        for result in view.results.values():
            self.results[result.id] = result
        if view.metrics is not None:
            self._replay_metrics = view.metrics
            self._main.query_one(MetricsPane).model = view.metrics
        self.elapsed_frozen = view.elapsed_s

    def _on_event(self, event: RunEvent) -> None:
        if event.kind == "node" and event.step and event.node and event.node_result:
            self._on_node(event.step, event.node, event.node_result)
        elif event.kind == "step" and event.result is not None:
            self._on_step(event.result)
        elif event.kind == "step-started" and event.step:
            self.running = event.step
            self._move_to(event.step)  # the detail pane follows the step being run
            self._refresh_row(event.step)
            self._refresh_chrome()
        elif event.kind == "metrics" and self.core is not None:
            self._main.query_one(MetricsPane).model = self.core.model
        elif event.kind == "saved" and event.message and not self._autosave_warned:
            self._autosave_warned = True  # once: it would say the same after every step
            self.notify(event.message, severity="warning", timeout=10)

    def _on_node(self, step: str, node: str, result: NodeResult) -> None:
        table = self._main.query_one("#checklist", DataTable)
        if node in self.columns.nodes:
            table.update_cell(step, node, self._cell(result.status, result.summary))
        self._refresh_detail()

    def _on_step(self, result: StepResult) -> None:
        self.results[result.id] = result
        if self.running == result.id:
            self.running = None
        self._refresh_row(result.id)
        self._refresh_chrome()

    def run_steps_worker(self, step_ids: list[str]) -> None:
        """The one way steps run: a declared worker, one batch at a time. Busy from now,
        not from when the worker starts: a key in between would replace the batch."""
        self.running = step_ids[0]
        self.run_worker(
            self._run_steps(step_ids),
            name=f"steps {','.join(step_ids)}",
            group="steps",
            exclusive=True,
            exit_on_error=False,
            description=f"run {', '.join(step_ids)}",
        )

    async def _run_steps(self, step_ids: list[str]) -> None:
        assert self.core is not None
        try:
            await self.core.run_steps(step_ids)
        finally:
            self.running = None
            self._refresh_chrome()
        first = first_failure(self.results)
        if first is not None and first["nodes"]:
            # Land on the first failure: its cause and fix are in the detail pane.
            self._move_to(first["step"], node=first["nodes"][0])
        if self._queued is not None:  # enter / a pressed while connecting
            first_only, self._queued = self._queued, None
            self.call_later(self._run_pending, first_only=first_only)  # after this worker

    # ------------------------------------------------------------------ chrome

    def _tick(self) -> None:
        replay = self.replay_data is not None
        if self.config is None:
            glance = self.glance
            self._main.query_one(HeaderBar).update(
                f"ddptui {glance.name or self.source} · {len(glance.nodes)} node(s) · loading …"
                if glance
                else f"ddptui · loading {self.source} …"
            )
            return
        state, label = self._state()
        self._main.query_one(HeaderBar).update_state(
            self.config.name or self.source,
            len(self.node_names),
            self.elapsed_frozen if replay else self.clock() - self.started,
            state,
            label,
            replay=(self.replay_data or {}).get("started_at") or "" if replay else None,
        )

    def _state(self) -> tuple[str, str]:
        """The header's (state, label): never PASS while a step is pending."""
        if not self.results and self.running is None:
            state = "connecting" if self.core is not None else "ready"
            return state, state.upper()
        return run_state(self.results, ORDER, self.running)

    def _verdict(self) -> str:
        return self._state()[1]

    def _refresh_chrome(self) -> None:
        self._tick()
        done = all(s in self.results for s in ORDER)
        text, kind = banner_text(first_failure(self.results), self.running, done, self.results)
        script = self.core.script_headline() if self.core is not None else None
        if script and kind != "fail":
            text += f"\n  {script} (ddptui lint for the details)"
        self._main.query_one(Banner).show(text, kind)
        self._refresh_detail()

    def _selected(self) -> tuple[str, str | None]:
        table = self._main.query_one("#checklist", DataTable)
        row, col = table.cursor_coordinate
        step = ORDER[min(max(row, 0), len(ORDER) - 1)]
        keys = self.columns.nodes
        node = keys[col - 2] if 2 <= col < 2 + len(keys) else None
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
            plain = text.replace("## ", "").replace("**", "")  # no Markdown syntax on screen
            self._main.query_one("#detail", Static).update(Text(plain))
            return
        from rich.markdown import Markdown

        self._main.query_one("#detail", Static).update(Markdown(text))

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
        if self.core is None or "ssh" not in self.results:
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
        if self._read_only() or self._busy() or self.core is None:
            return
        step, _ = self._selected()
        self.core.skip_step(step)

    def _busy(self) -> bool:
        if self.running is not None or self.core is None:
            self.notify("A step is running; wait for it (or q to quit).", severity="warning")
            return True
        return False

    def _move_to(self, step: str, col: int | None = None, *, node: str | None = None) -> None:
        table = self._main.query_one("#checklist", DataTable)
        if node is not None:
            col = 2 + self.columns.nodes.index(node) if node in self.columns.nodes else None
        _, current = table.cursor_coordinate
        table.move_cursor(row=ORDER.index(step), column=current if col is None else col)

    def _failures(self) -> list[tuple[int, int]]:
        cells = []
        for r, step in enumerate(ORDER):
            res = self.results.get(step)
            if res is None:
                continue
            for c, name in enumerate(self.columns.nodes):
                if res.nodes.get(name) and res.nodes[name].status in ("fail", "error"):
                    cells.append((r, c + 2))
        return cells

    def _jump(self, direction: int) -> None:
        cells = self._failures()
        if not cells:
            self.notify("No failures.")
            return
        table = self._main.query_one("#checklist", DataTable)
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

    def action_filter_nodes(self) -> None:
        from ddptui.ui.filter_screen import FilterScreen

        if not self.node_names:
            return
        self.push_screen(FilterScreen(self.node_filter), self._set_filter)

    def _set_filter(self, text: str | None) -> None:
        if text is None:
            return
        self.node_filter = text.strip()
        self._build_table()
        shown = len(self.columns.nodes) + len(self.columns.rest)
        self.notify(
            f"nodes matching {self.node_filter!r}: {shown} of {len(self.node_names)}"
            if self.node_filter
            else f"all {len(self.node_names)} nodes"
        )

    def action_logs(self) -> None:
        from ddptui.ui.log_screen import LogScreen, marked_lines

        if not self.node_names:
            return  # the config is still loading
        _, node = self._selected()
        node = node or (self.columns.nodes or tuple(self.node_names))[0]
        findings = [
            f
            for step in ORDER
            if (r := self.results.get(step)) is not None
            for f in r.findings
            if node in f.nodes
        ]
        quoted = [(f.id, e) for f in findings for e in f.evidence]
        lines, ids, marks = self.log_lines(node)
        self.push_screen(LogScreen(node, marked_lines(node, lines, ids, findings, marks), quoted))

    def action_job(self) -> None:
        """The user's own job on every node (read-only): who is stuck or dead, where."""
        if self.replay_data is not None:
            self.notify("Replay of a saved session: `ddptui job CONFIG` looks at a live job.")
            return
        if self.core is None or "ssh" not in self.results:
            self.notify("Connecting to the nodes; press j again once they are connected.")
            return
        self.notify(f"Looking at your job on {len(self.node_names)} node(s) (read-only)…")
        self.run_worker(
            self._open_job(),
            name="job",
            group="job",
            exclusive=True,
            exit_on_error=False,
            description="look at the user's job on every node",
        )

    async def _job_report(self) -> dict[str, Any]:
        from ddptui.job.report import build_job_report
        from ddptui.job.run import JobOptions, look_at_job

        assert self.core is not None
        look = await look_at_job(
            self.config, self.source, JobOptions(), transports=self.core.session.transports
        )
        master = {"addr": self.config.master.addr, "port": self.config.master.port}
        return build_job_report(look, self.config.name, master)

    async def _open_job(self) -> None:
        from ddptui.ui.job_screen import JobScreen

        try:
            report = await self._job_report()
        except Exception as exc:  # noqa: BLE001 - a bug in the job view must not end the app
            self.notify(f"ddptui could not look at the job: {exc}", severity="error", timeout=10)
            return
        self.push_screen(JobScreen(report, relook=self._job_report))

    def action_diagnose(self) -> None:
        """Post-mortem of log files (local paths, or NODE:GLOB read on the nodes)."""
        from ddptui.ui.diagnose_screen import DiagnoseScreen

        config_path = None if self.source.startswith("<") else self.source
        self.push_screen(DiagnoseScreen(config_path=config_path))

    def action_export(self) -> None:
        from ddptui.ui.export_screen import ExportScreen

        self.push_screen(ExportScreen(), self._export)

    def current_report(self) -> dict[str, Any] | None:
        """What `e` exports: the live session's report, or the replayed one as saved."""
        if self.replay_data is not None:
            return self.replay_data
        return self.core.report() if self.core is not None else None

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
            saver = self.saver
            saved = f"; the session is saved in {saver.path}" if saver and saver.saves else ""
            self.notify(
                f"Cannot write {path}: {exc.strerror or exc}{saved}", severity="error", timeout=10
            )
            return
        self.notify(f"Report written: {written}")

    def action_quit_app(self) -> None:
        if self._quitting:
            return
        self._quitting = True
        self._main.query_one(Banner).show("stopping everything on the nodes…", "running")
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
        if self.core is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.core.stop(save_timeout=5), QUIT_BOUND_S)
        # Everything alive now dies with the process: keep the interpreter's last garbage
        # collection off it (256 streaming nodes: CPU from q to exit 1.0-1.8 s -> 0.4-0.9 s).
        gc.freeze()
        self.exit(0)

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
            ("j", "Job view", "Your running or hung job: who is stuck, where", self.action_job),
            ("d", "Diagnose log files", "Classify log files: the first cause and its fix", self.action_diagnose),
            ("/", "Filter nodes", "Show only nodes whose name contains…", self.action_filter_nodes),
            ("e", "Export report", "Write JSON / Markdown / HTML", self.action_export),
            ("q", "Quit", "Stop everything on the nodes and quit", self.action_quit_app),
        ):
            yield SystemCommand(f"{title} ({key})", help_text, action)
