"""The checklist screen: the steps x nodes matrix, the banner with the first failure and
its fix, the detail pane, live metrics per node; jumps between failures, the node
filter, and what opens from here (a node's log, the user's job, log diagnosis, export).

It draws what its host (the app) hands it: a RunSnapshot of the run, live or replayed,
and the node names. It keeps references to its widgets and no copy of the results."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from ddptui.glyphs import GLYPH
from ddptui.stepmeta import ORDER, TITLES
from ddptui.ui.banner import Banner
from ddptui.ui.checklist_table import ChecklistTable
from ddptui.ui.header import HeaderBar
from ddptui.ui.layout import STATUS_CHARS, STEP_CHARS, node_room
from ddptui.ui.matrix import GROUP, Columns, excluded, group_cell, head, node_columns
from ddptui.ui.metrics_pane import METRICS_NODES, MetricsPane
from ddptui.ui.render import STYLE, banner_text, detail_markdown

if TYPE_CHECKING:
    from ddptui.checklist.run import RunCore
    from ddptui.checklist.snapshot import RunSnapshot
    from ddptui.config import ClusterConfig
    from ddptui.diagnosis.model import NodeResult
    from ddptui.glance import Glance
    from ddptui.report.export import Report


# The command palette's entries: (key, title, help, action of the screen or the app).
COMMANDS = (
    ("enter", "Run next step", "Run the next step of the walkthrough", "next_step"),
    ("a", "Run all steps", "Run every remaining step", "run_all"),
    ("r", "Re-run selected step", "Run the selected step again", "rerun"),
    ("s", "Skip selected step", "Mark the selected step skipped", "skip"),
    ("n", "Next failure", "Jump to the next failing cell", "next_failure"),
    ("p", "Previous failure", "Jump to the previous failing cell", "prev_failure"),
    ("l", "Logs of selected node", "Open the node's log", "logs"),
    ("j", "Job view", "Your running or hung job: who is stuck, where", "job"),
    ("d", "Diagnose log files", "Classify log files: the first cause and its fix", "diagnose"),
    ("/", "Filter nodes", "Show only nodes whose name contains…", "filter_nodes"),
    ("e", "Export report", "Write JSON / Markdown / HTML", "export"),
    ("q", "Quit", "Stop everything on the nodes and quit", "quit_app"),
)


class RunHost(Protocol):
    """What the screen reads from the app that runs (or replays) the checklist."""

    source: str
    node_names: list[str]
    glance: Glance | None
    replay_data: dict[str, Any] | None

    @property
    def config(self) -> ClusterConfig | None: ...
    @property
    def core(self) -> RunCore | None: ...
    @property
    def replaying(self) -> bool: ...
    @property
    def saver(self) -> Any: ...
    def snapshot(self) -> RunSnapshot: ...
    def elapsed(self) -> float: ...
    def log_lines(self, node: str) -> tuple[list[str], list[str], dict[int, str]]: ...
    def current_report(self) -> Report | None: ...


def _append_time(path: str) -> None:
    with contextlib.suppress(OSError), Path(path).open("a") as f:
        f.write(f"{time.time():.6f}\n")


class ChecklistScreen(Screen[None]):
    """See the module docstring. Its actions are bound in the app's BINDINGS as
    `screen.<action>` (one footer, in one order)."""

    def __init__(self, host: RunHost) -> None:
        super().__init__()
        self.host = host
        self.node_filter = ""
        self.columns = Columns((), (), 6)
        self.marked: frozenset[str] = frozenset()  # nodes marked for `exclude`
        self.detail_source = ""
        self.header = HeaderBar(id="header")
        self.table = ChecklistTable(id="checklist", cursor_type="cell", zebra_stripes=False)
        self.banner = Banner(id="banner")
        self.detail = Static(id="detail")
        self.metrics_pane = MetricsPane([], id="metrics")

    def compose(self) -> ComposeResult:
        yield self.header
        with Horizontal(id="body"):
            with Vertical(id="left"):
                yield self.table
                yield self.banner
                with VerticalScroll(id="detail-scroll"):
                    yield self.detail
            yield self.metrics_pane
        yield Footer()

    def on_mount(self) -> None:
        self.table.focus()
        trace = os.environ.get("DDPTUI_TRACE_FIRST_FRAME")
        if trace:  # for bench/bench_tui.py: when the first frame was drawn (wall clock)
            self.call_after_refresh(_append_time, trace)

    # ------------------------------------------------------------------ the matrix

    def build_table(self) -> None:
        """The matrix: step rows, one column per node that fits (failing nodes first,
        the passing rest collapsed into one column); rebuilt when that set changes."""
        snap = self.host.snapshot()
        table = self.table
        cursor = table.cursor_coordinate
        self.columns = self._columns(snap)
        table.clear(columns=True)
        # A fixed width: an auto-sized column is measured on the table's next idle, and
        # a rebuild (filter, failing nodes moving first) could show it at its label's 4.
        table.add_column("step", key="step", width=STEP_CHARS)
        table.add_column("status", key="status", width=STATUS_CHARS)
        self.marked = excluded(snap.results)
        for name in self.columns.nodes:
            table.add_column(head(name, self.marked), key=name, width=self.columns.width)
        if self.columns.rest:
            label = f"+{len(self.columns.rest)} more"
            table.add_column(label, key=GROUP, width=max(self.columns.width, len(label) + 2))
        for step_id in ORDER:
            table.add_row(step_id, *self._row_cells(snap, step_id), key=step_id)
        table.move_cursor(row=cursor.row, column=cursor.column)
        # The metrics pane follows the matrix: its nodes first (failing ones lead), the
        # filter applies, at most METRICS_NODES widgets.
        shown = [*self.columns.nodes, *self.columns.rest]
        names = self.host.node_names
        self.metrics_pane.set_nodes(
            shown[:METRICS_NODES], len(names) - min(len(shown), METRICS_NODES)
        )

    def _columns(self, snap: RunSnapshot) -> Columns:
        room = node_room(self.app.size.width)
        return node_columns(self.host.node_names, snap.results, room, self.node_filter)

    def _row_cells(self, snap: RunSnapshot, step_id: str) -> list[Text]:
        result = snap.results.get(step_id)
        if step_id == snap.running:
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

    def refresh_row(self, step_id: str) -> None:
        snap = self.host.snapshot()
        if self._columns(snap).keys != self.columns.keys or excluded(snap.results) != self.marked:
            self.build_table()  # failing nodes move to the front; excluded ones get a mark
            return
        cells = self._row_cells(snap, step_id)
        for key, cell in zip(("status", *self.columns.keys), cells, strict=True):
            self.table.update_cell(step_id, key, cell, update_width=False)

    def node_done(self, step: str, node: str, result: NodeResult) -> None:
        if node in self.columns.nodes:
            self.table.update_cell(step, node, self._cell(result.status, result.summary))
        self.refresh_detail()

    # ------------------------------------------------------------------ chrome

    def tick(self) -> None:
        """The header: cluster, nodes, elapsed time, the run's state (every second); while
        the config loads, what a glance at it saw."""
        host, config, glance = self.host, self.host.config, self.host.glance
        if config is None:
            self.header.update(
                f"ddptui {glance.name or host.source} · {len(glance.nodes)} node(s) · loading …"
                if glance is not None
                else f"ddptui · loading {host.source} …"
            )
            return
        snap = host.snapshot()
        replay = (host.replay_data.get("started_at") or "") if host.replay_data is not None else None
        self.header.update_state(
            config.name or host.source, len(host.node_names), host.elapsed(), snap.state,
            snap.label, replay=replay,
        )  # fmt: skip

    def refresh_chrome(self) -> None:
        self.tick()
        snap = self.host.snapshot()
        done = all(s in snap.results for s in ORDER)
        text, kind = banner_text(snap.first, snap.running, done, snap.results)
        core = self.host.core
        script = core.script_headline() if core is not None else None
        if script and kind != "fail":
            text += f"\n  {script} (ddptui lint for the details)"
        self.banner.show(text, kind)
        self.refresh_detail()

    def selected(self) -> tuple[str, str | None]:
        row, col = self.table.cursor_coordinate
        step = ORDER[min(max(row, 0), len(ORDER) - 1)]
        keys = self.columns.nodes
        node = keys[col - 2] if 2 <= col < 2 + len(keys) else None
        return step, node

    def refresh_detail(self) -> None:
        snap = self.host.snapshot()
        step, node = self.selected()
        text = detail_markdown(snap.results.get(step), TITLES[step], node, step == snap.running)
        if text == self.detail_source:
            return  # nothing changed: skip the re-render (it is the costly part of a key)
        self.detail_source = text
        if not snap.results:
            # First frame: plain text. rich.markdown (markdown-it) loads once there is
            # something worth formatting, off the start-up path.
            plain = text.replace("## ", "").replace("**", "")  # no Markdown syntax on screen
            self.detail.update(Text(plain))
            return
        from rich.markdown import Markdown

        self.detail.update(Markdown(text))

    def on_data_table_cell_highlighted(self, event: ChecklistTable.CellHighlighted) -> None:
        self.refresh_detail()

    # ------------------------------------------------------------------ jumps, filter

    def move_to(self, step: str, col: int | None = None, *, node: str | None = None) -> None:
        if node is not None:
            col = 2 + self.columns.nodes.index(node) if node in self.columns.nodes else None
        _, current = self.table.cursor_coordinate
        self.table.move_cursor(row=ORDER.index(step), column=current if col is None else col)

    def land_on_first_failure(self) -> None:
        """The cursor on the first failure's first node: its cause and fix are in the detail."""
        first = self.host.snapshot().first
        if first is not None and first.nodes:
            self.move_to(first.step, node=first.nodes[0])

    def failures(self) -> list[tuple[int, int]]:
        results = self.host.snapshot().results
        cells = []
        for r, step in enumerate(ORDER):
            res = results.get(step)
            if res is None:
                continue
            for c, name in enumerate(self.columns.nodes):
                if res.nodes.get(name) and res.nodes[name].status in ("fail", "error"):
                    cells.append((r, c + 2))
        return cells

    def _jump(self, direction: int) -> None:
        cells = self.failures()
        if not cells:
            self.notify("No failures.")
            return
        here = (self.table.cursor_coordinate.row, self.table.cursor_coordinate.column)
        ahead = [c for c in cells if (c > here if direction > 0 else c < here)]
        target = (
            (ahead[0] if direction > 0 else ahead[-1])
            if ahead
            else (cells[0] if direction > 0 else cells[-1])
        )
        self.table.move_cursor(row=target[0], column=target[1])

    def action_next_failure(self) -> None:
        self._jump(+1)

    def action_prev_failure(self) -> None:
        self._jump(-1)

    def action_filter_nodes(self) -> None:
        from ddptui.ui.filter_screen import FilterScreen

        if not self.host.node_names:
            return
        self.app.push_screen(FilterScreen(self.node_filter), self.set_filter)

    def set_filter(self, text: str | None) -> None:
        if text is None:
            return
        self.node_filter = text.strip()
        self.build_table()
        shown = len(self.columns.nodes) + len(self.columns.rest)
        total = len(self.host.node_names)
        self.notify(
            f"nodes matching {self.node_filter!r}: {shown} of {total}"
            if self.node_filter
            else f"all {total} nodes"
        )

    # ------------------------------------------------------------------ what opens from here

    def action_logs(self) -> None:
        from ddptui.ui.log_screen import LogScreen, marked_lines

        names = self.host.node_names
        if not names:
            return  # the config is still loading
        results = self.host.snapshot().results
        _, node = self.selected()
        node = node or (self.columns.nodes or tuple(names))[0]
        findings = [
            f
            for step in ORDER
            if (r := results.get(step)) is not None
            for f in r.findings
            if node in f.nodes
        ]
        quoted = [(f.id, e) for f in findings for e in f.evidence]
        lines, ids, marks = self.host.log_lines(node)
        self.app.push_screen(
            LogScreen(node, marked_lines(node, lines, ids, findings, marks), quoted)
        )

    def action_job(self) -> None:
        """The user's own job on every node (read-only): who is stuck or dead, where."""
        if self.host.replaying:
            self.notify("Replay of a saved session: `ddptui job CONFIG` looks at a live job.")
            return
        if self.host.core is None or "ssh" not in self.host.snapshot().results:
            self.notify("Connecting to the nodes; press j again once they are connected.")
            return
        self.notify(f"Looking at your job on {len(self.host.node_names)} node(s) (read-only)…")
        self.run_worker(
            self._open_job(),
            name="job",
            group="job",
            exclusive=True,
            exit_on_error=False,
            description="look at the user's job on every node",
        )

    async def _job_report(self) -> dict[str, Any]:
        from ddptui.job.report import look_report

        core, config = self.host.core, self.host.config
        assert core is not None and config is not None
        report = await look_report(config, self.host.source, transports=core.session.transports)
        return report.document()

    async def _open_job(self) -> None:
        from ddptui.ui.job_screen import JobScreen

        try:
            report = await self._job_report()
        except Exception as exc:  # noqa: BLE001 - a bug in the job view must not end the app
            self.notify(f"ddptui could not look at the job: {exc}", severity="error", timeout=10)
            return
        self.app.push_screen(JobScreen(report, relook=self._job_report))

    def action_diagnose(self) -> None:
        """Post-mortem of log files (local paths, or NODE:GLOB read on the nodes)."""
        from ddptui.ui.diagnose_screen import DiagnoseScreen

        source = self.host.source
        self.app.push_screen(DiagnoseScreen(config_path=None if source.startswith("<") else source))

    def action_export(self) -> None:
        from ddptui.ui.export_screen import ExportScreen

        self.app.push_screen(ExportScreen(), self.export)

    def export(self, choice: tuple[str, str] | None) -> None:
        """Write the report as chosen (format, path); HTML carries this screen's picture."""
        report = self.host.current_report() if choice else None
        if not choice or report is None:
            return
        fmt, path = choice
        from ddptui.report.export import write_report

        config = self.host.config
        name = config.name if config is not None else None
        # The screen as it is now goes into an HTML report (Textual renders it as SVG).
        shot = self.app.export_screenshot(title=f"ddptui {name or ''}") if fmt == "html" else None
        try:
            written = write_report(report, fmt, path, screenshot_svg=shot)
        except OSError as exc:
            saver = self.host.saver
            saved = f"; the session is saved in {saver.path}" if saver and saver.saves else ""
            self.notify(
                f"Cannot write {path}: {exc.strerror or exc}{saved}", severity="error", timeout=10
            )
            return
        self.notify(f"Report written: {written}")
