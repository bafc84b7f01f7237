"""Small widgets: header, failure banner, live metrics per node (one widget per node:
a DataTable would re-render whole on every sample)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from ddptui.ui.render import GLYPH, STYLE

REPAINT_S = 0.5  # metrics repaint at most ~2 Hz, and only when the model changed


class ChecklistTable(DataTable[Any]):
    """The steps x nodes matrix. `enter`/`space` run the next step (a DataTable would
    take enter for itself, and its hidden binding would keep the app's out of the footer)."""

    BINDINGS = [  # noqa: RUF012 - Textual's declaration style
        Binding("enter", "app.next_step", "Next step"),
        Binding("space", "app.next_step", "Next step", show=False),
    ]


class HeaderBar(Static):
    DEFAULT_CSS = """
    HeaderBar { height: 1; background: $primary-background; color: $text; padding: 0 1; }
    """

    def update_state(
        self, name: str, nodes: int, elapsed: float, verdict: str, replay: str | None = None
    ) -> None:
        status = {"pass": "pass", "warn": "warn", "fail": "fail", "error": "error"}.get(
            verdict, "running" if verdict in ("running", "connecting") else "pending"
        )
        text = Text.assemble(
            ("ddptui ", "bold"),
            (f"{name}", "bold"),
            f" · {nodes} node(s) · ",
            f"{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d} · ",
            (f"{GLYPH[status]} {verdict.upper()}", STYLE[status]),
        )
        if replay is not None:
            text.append(f" · REPLAY of {replay or 'a saved session'} (read-only)", "bold reverse")
        self.update(text)


class Banner(Static):
    """The first failure, its cause in one line, and the fix: where the eye lands."""

    DEFAULT_CSS = """
    Banner { height: auto; min-height: 2; padding: 0 1; border: tall $panel; }
    Banner.fail { border: tall $error; color: $text; background: $error 20%; text-style: bold; }
    Banner.pass { border: tall $success; background: $success 15%; }
    Banner.running { border: tall $accent; }
    """

    def show(self, text: str, kind: str) -> None:
        self.set_classes(kind)
        self.update(text)


class NodeMetrics(Static):
    DEFAULT_CSS = """
    NodeMetrics { height: auto; padding: 0 1; margin-bottom: 1; }
    """

    def __init__(self, node: str) -> None:
        super().__init__(f"{node}: waiting for the first sample", markup=False)
        self.node = node

    def render_from(self, series: Any, width: int) -> None:
        from ddptui.metrics import human_bytes, human_rate, sparkline

        if series is None:
            return
        spark_w = max(8, width - 26)  # labels take 24 columns, plus padding
        state = series.state
        if state == "lost":
            retry = f", retry in {series.retry_delay_s:.0f}s" if series.retry_delay_s else ""
            state = f"LOST ({series.lost_why or 'stream ended'}{retry})"
        lines = [
            Text.assemble(
                (self.node, "bold"), (f"  {state}", "bold red" if series.state == "lost" else "")
            )
        ]
        latest = series.latest()
        if latest is None:
            lines.append(Text("  no sample yet", style="dim"))
            self.update(Text("\n").join(lines))
            return
        cpu = latest.cpu_pct
        lines.append(
            Text(f"  {'cpu':<7} {'':2} {f'{cpu:.1f}%' if cpu is not None else 'n/a':>11}  ")
            + Text(sparkline(series.spark("cpu_pct", spark_w), 0, 100), style="cyan")
        )
        lines.append(
            Text(f"  mem {human_bytes(latest.mem_used)} / {human_bytes(latest.mem_total)}")
        )
        if not latest.gpus:
            note = series.hello.note if series.hello is not None and series.hello.note else ""
            short = note.split(" (")[0].split(":")[0][: max(10, width - 12)] if note else ""
            lines.append(Text("  no GPU" + (f" ({short})" if short else ""), style="dim"))
        for g in latest.gpus:
            util = f"{g.util_pct:5.1f}%" if g.util_pct is not None else "  n/a"
            lines.append(
                Text(f"  {'gpu' + str(g.index):<10} {util:>11}  ")
                + Text(
                    sparkline(series.spark(f"gpu_util:{g.index}", spark_w), 0, 100), style="green"
                )
            )
            lines.append(
                Text(
                    f"    {human_bytes(g.mem_used)}/{human_bytes(g.mem_total)} "
                    f"{_na(g.temp_c, '°C')} {_na(g.power_w, 'W')} {_na(g.sm_clock_mhz, 'MHz')}"
                    + (f" throttle:{','.join(g.throttle)}" if g.throttle else "")
                    + (f" ECC:{g.ecc_uncorrected}" if g.ecc_uncorrected else ""),
                    style="dim",
                )
            )
        # The NIC (or IB port) carrying the most traffic: during the allreduce, the one in use.
        for kind, name in (("nic", series.busiest_nic()), ("ib", series.busiest_ib())):
            if name is None:
                continue
            rate = (latest.nics if kind == "nic" else latest.ib).get(name)
            for d, value in (
                ("rx", rate.rx_Bps if rate else None),
                ("tx", rate.tx_Bps if rate else None),
            ):
                lines.append(
                    Text(f"  {name[:7]:<7} {d} {human_rate(value):>11}  ")
                    + Text(sparkline(series.spark(f"{kind}_{d}:{name}", spark_w)), style="magenta")
                )
        self.update(Text("\n").join(lines))


def _na(value: float | None, unit: str) -> str:
    return f"{value:.0f}{unit}" if value is not None else f"n/a{unit}"


class MetricsPane(VerticalScroll):
    DEFAULT_CSS = """
    MetricsPane { width: 40%; min-width: 30; border-left: solid $panel; }
    """

    def __init__(self, nodes: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.nodes = nodes
        self.model: Any = None
        self._seen = -1

    def compose(self) -> Any:
        yield Static(Text("live metrics", style="bold"))
        for node in self.nodes:
            yield NodeMetrics(node)

    def on_mount(self) -> None:
        self.set_interval(REPAINT_S, self.repaint)

    def set_nodes(self, nodes: list[str]) -> None:
        """One NodeMetrics per node (the nodes are known once the config has loaded)."""
        if nodes == self.nodes and len(self.query(NodeMetrics)) == len(nodes):
            return
        self.nodes = nodes
        self.query(NodeMetrics).remove()
        self.mount_all([NodeMetrics(node) for node in nodes])
        self._seen = -1

    def repaint(self) -> None:
        if self.model is None or self.model.version == self._seen:
            return
        self._seen = self.model.version
        snap = self.model.snapshot()
        width = self.size.width - 2
        for widget in self.query(NodeMetrics):
            widget.render_from(snap.node(widget.node), width)
