"""The interactive checklist walkthrough: the app loads the config, owns the run core's
subscription, the workers that run steps, and quitting; the ChecklistScreen draws. Live and
replay both render from one RunSnapshot (`snapshot()`): the run core's results live, the
saved session's in a replay. Steps run in declared workers; a step that raises shows
`error` in its cell (the core turns it into a result)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from typing import TYPE_CHECKING, Any, ClassVar

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen

from ddptui.checklist.snapshot import RunSnapshot
from ddptui.report.json_report import run_state
from ddptui.stepmeta import ORDER
from ddptui.ui.checklist_screen import COMMANDS, ChecklistScreen

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ddptui.checklist.run import RunCore, RunEvent
    from ddptui.checklist.runner import Session
    from ddptui.config import ClusterConfig
    from ddptui.diagnosis.model import StepResult
    from ddptui.glance import Glance
    from ddptui.report.export import Report
    from ddptui.ui.replay import Replay

QUIT_BOUND_S = 8.0


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
        Binding("n", "screen.next_failure", "Next fail"),
        Binding("p", "screen.prev_failure", "Prev fail"),
        Binding("l", "screen.logs", "Logs"),
        Binding("j", "screen.job", "Job"),
        Binding("d", "screen.diagnose", "Diagnose logs"),
        Binding("slash", "screen.filter_nodes", "Filter", show=False),
        Binding("e", "screen.export", "Export"),
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
        """config, or load: a function that returns it, called after the first frame (off
        the start-up path: pydantic, YAML); a ConfigError it raises ends the app with code
        2 (`config_error`). glance: the name and nodes shown until the config is loaded."""
        super().__init__()
        if config is None and load is None:
            raise ValueError("give a config or a function that loads it")
        self._load = load
        self.config_error: Exception | None = None
        # None only until _load_config() has run (the first frame); never None after.
        self.config = config
        self.source = source
        self.autoconnect = autoconnect and replay is None
        self.replay_data = replay  # a saved session shown read-only (`ddptui replay`)
        self._replay: Replay | None = None
        self.core: RunCore | None = None
        # Results shown while no run core exists (none is made with autoconnect=False).
        self._held: dict[str, StepResult] = {}
        self._autosave_warned = False
        self._queued: bool | None = None  # enter (True) / a (False) pressed while connecting
        self.running: str | None = None  # the step the steps worker runs (or is about to)
        self.clock = time.monotonic  # the header's elapsed time (tests freeze it)
        self.started = self.clock()
        self.glance = glance if config is None else None
        self.node_names: list[str] = list(self.glance.nodes) if self.glance else []
        self._quitting = False
        self.checklist = ChecklistScreen(self)

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
    def replaying(self) -> bool:
        return self.replay_data is not None

    def snapshot(self) -> RunSnapshot:
        """The run as the views draw it: the core's results live, the saved ones in a
        replay; the header's state never PASS while a step is pending."""
        if self.core is not None:
            results = self.core.snapshot().results
        else:
            results = dict(self._replay.results if self._replay is not None else self._held)
        if not results and self.running is None:
            state = "connecting" if self.core is not None else "ready"
            return RunSnapshot(results, None, ORDER, state, state.upper())
        return RunSnapshot(results, self.running, ORDER, *run_state(results, ORDER, self.running))

    @property
    def results(self) -> dict[str, StepResult]:
        return self.snapshot().results

    def elapsed(self) -> float:
        """Seconds the header shows: since start, or the saved session's length."""
        return self._replay.elapsed_s if self._replay else self.clock() - self.started

    @property
    def session(self) -> Session | None:
        return self.core.session if self.core is not None else None

    @property
    def saver(self) -> Any:
        return self.core.saver if self.core is not None else None

    @property
    def metrics(self) -> Any:
        return self.core.model if self.core else (self._replay.metrics if self._replay else None)

    def log_lines(self, node: str) -> tuple[list[str], list[str], dict[int, str]]:
        """(lines, their ids, known marks) of a node's log, live or replayed."""
        if self._replay is not None:
            log = self._replay.logs.get(node)
            return (list(log.lines), list(log.ids), dict(log.marks)) if log else ([], [], {})
        kept = self.core.logs.lines(node) if self.core is not None else []
        return [ln.tagged() for ln in kept], [ln.id for ln in kept], {}

    def current_report(self) -> Report | None:
        """What `e` exports: the live session's report, or the replayed one as saved."""
        if self.replay_data is not None:
            return self.replay_data
        return self.core.report() if self.core is not None else None

    # ------------------------------------------------------------------ start-up

    def get_default_screen(self) -> Screen[Any]:
        return self.checklist

    def on_mount(self) -> None:
        """The first frame, then the config (if still to load) and the connection."""
        self.set_interval(1.0, self.checklist.tick)
        if self.config is None:
            # First frame: the checklist, with the node columns a glance at the file
            # found; the config (pydantic, the YAML parser) loads right after it.
            self.checklist.build_table()
            self.checklist.refresh_chrome()
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
        assert self.config is not None
        self.node_names = [n.display for n in self.config.nodes]
        if self._replay is not None:  # the saved metrics timeline
            self.checklist.metrics_pane.model = self._replay.metrics
        self.checklist.build_table()
        self.checklist.land_on_first_failure()  # a replay lands there
        self.checklist.refresh_chrome()
        if self.autoconnect:
            # The frame comes first; the session (asyncssh, steps) loads after it.
            self.call_after_refresh(self._connect)

    # ------------------------------------------------------------------ the run core

    def _connect(self) -> None:
        from ddptui.checklist.run import RunCore

        assert self.config is not None
        self.core = RunCore(self.config, self.source)
        self.core.subscribe(self._on_event)
        self.run_steps_worker(["ssh"])

    def _on_event(self, event: RunEvent) -> None:
        if event.kind == "node" and event.step and event.node and event.node_result:
            self.checklist.node_done(event.step, event.node, event.node_result)
        elif event.kind == "step" and event.result is not None:
            self._on_step(event.result)
        elif event.kind == "step-started" and event.step:
            self.running = event.step
            self.checklist.move_to(event.step)  # the detail pane follows the step being run
            self.checklist.refresh_row(event.step)
            self.checklist.refresh_chrome()
        elif event.kind == "metrics" and self.core is not None:
            self.checklist.metrics_pane.model = self.core.model
        elif event.kind == "saved" and event.message and not self._autosave_warned:
            self._autosave_warned = True  # once: it would say the same after every step
            self.notify(event.message, severity="warning", timeout=10)

    def _on_step(self, result: StepResult) -> None:
        """A step's result is in (from the core; without one, it is held here)."""
        if self.core is None:
            self._held[result.id] = result
        if self.running == result.id:
            self.running = None
        self.checklist.refresh_row(result.id)
        self.checklist.refresh_chrome()

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
            self.checklist.refresh_chrome()
        self.checklist.land_on_first_failure()
        if self._queued is not None:  # enter / a pressed while connecting
            first_only, self._queued = self._queued, None
            self.call_later(self._run_pending, first_only=first_only)  # after this worker

    # ------------------------------------------------------------------ running steps

    def action_next_step(self) -> None:
        self._run_pending(first_only=True)

    def action_run_all(self) -> None:
        self._run_pending(first_only=False)

    def _read_only(self) -> bool:
        if self.replaying:
            self.notify("Replay of a saved session: read-only (e exports, l shows logs).")
            return True
        return False

    def _run_pending(self, *, first_only: bool) -> None:
        if self._read_only():
            return
        results = self.results
        todo = [s for s in ORDER if s not in results]
        if not todo:
            self.notify("Every step has run; r re-runs the selected one.")
            return
        if self.core is None or "ssh" not in results:
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
        step, _ = self.checklist.selected()
        self.run_steps_worker([step])

    def action_skip(self) -> None:
        if self._read_only() or self._busy() or self.core is None:
            return
        step, _ = self.checklist.selected()
        self.core.skip_step(step)

    def _busy(self) -> bool:
        if self.running is not None or self.core is None:
            self.notify("A step is running; wait for it (or q to quit).", severity="warning")
            return True
        return False

    # ------------------------------------------------------------------ quitting

    def action_quit_app(self) -> None:
        if self._quitting:
            return
        self._quitting = True
        self.checklist.banner.show("stopping everything on the nodes…", "running")
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
        for key, title, help_text, action in COMMANDS:
            owner = self.checklist if hasattr(self.checklist, f"action_{action}") else self
            yield SystemCommand(f"{title} ({key})", help_text, getattr(owner, f"action_{action}"))
