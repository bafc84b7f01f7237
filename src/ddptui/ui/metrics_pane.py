"""Live metrics, one small widget per node (a DataTable would re-render whole on every
sample); only the nodes in view repaint. The app shows at most METRICS_NODES of them,
the ones its matrix shows first: every key that resizes the detail pane reflows the
screen, and 256 widgets made that reflow ~0.14 s of CPU."""

from __future__ import annotations

import math
from typing import Any

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from ddptui.metrics import NA, human_bytes, human_rate, sparkline

METRICS_NODES = 24  # widgets in the pane at most (a 50-row screen shows about 6)
REPAINT_S = 0.5  # metrics repaint at most ~2 Hz, and only when the model changed
IDLE_BPS = 10_000.0  # below 10 kB/s a NIC is idle as far as a sparkline is concerned


class NodeMetrics(Static):
    DEFAULT_CSS = """
    NodeMetrics { height: auto; padding: 0 1; margin-bottom: 1; }
    """

    def __init__(self, node: str) -> None:
        super().__init__(f"{node}: waiting for the first sample", markup=False)
        self.node = node
        self.rendered = False  # painted from a sample at least once
        self.stale = False

    def render_from(self, series: Any, width: int) -> None:
        if series is None:
            return
        self.rendered, self.stale = True, False
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
            Text(f"  {'cpu':<7} {'':2} {f'{cpu:.1f}%' if cpu is not None else NA:>11}  ")
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
            util = f"{g.util_pct:5.1f}%" if g.util_pct is not None else f"{NA:>6}"
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
                spark = series.spark(f"{kind}_{d}:{name}", spark_w)
                lines.append(
                    Text(f"  {name[:7]:<7} {d} {human_rate(value):>11}  ")
                    + Text(sparkline(spark, 0, rate_top(spark)), style="magenta")
                )
        self.update(Text("\n").join(lines))


def rate_top(values: list[float | None]) -> float:
    """The top of a rate sparkline: the window's peak, but at least IDLE_BPS, so an idle
    link's heartbeats (a few B/s beside "0 B/s") draw as a flat line, not full bars."""
    present = [v for v in values if v is not None and not math.isnan(v)]
    return max([IDLE_BPS, *present])


def _na(value: float | None, unit: str) -> str:
    return f"{value:.0f}{unit}" if value is not None else f"{NA}{unit}"


class MetricsPane(VerticalScroll):
    DEFAULT_CSS = """
    MetricsPane { width: 40%; min-width: 30; border-left: solid $panel; }
    """

    def __init__(self, nodes: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.nodes = nodes
        self.model: Any = None
        self._seen: tuple[int, int] | None = None
        self._hidden: int | None = None  # set_nodes() before mounting: composed then

    def compose(self) -> Any:
        yield Static(Text("live metrics", style="bold"))
        for node in self.nodes:
            yield NodeMetrics(node)
        if self._hidden is not None:
            yield Static(self._hidden_text(self._hidden), classes="metrics-hidden")

    def on_mount(self) -> None:
        self.set_interval(REPAINT_S, self.repaint)

    def set_nodes(self, nodes: list[str], hidden: int = 0) -> None:
        """One NodeMetrics per node shown (the nodes are known once the config has loaded);
        `hidden`: how many more the cluster has, said in a last line."""
        if not self.is_attached:  # the screen is still being built: compose() draws them
            self.nodes, self._hidden = nodes, hidden
            return
        if nodes == self.nodes and len(self.query(NodeMetrics)) == len(nodes):
            self._say_hidden(hidden)
            return
        self.nodes = nodes
        self.query(NodeMetrics).remove()
        self.query(".metrics-hidden").remove()
        self.mount_all([NodeMetrics(node) for node in nodes])
        self.mount(Static("", classes="metrics-hidden"))
        self._say_hidden(hidden)
        self._seen = None

    def _say_hidden(self, hidden: int) -> None:
        for note in self.query(".metrics-hidden").results(Static):
            note.update(self._hidden_text(hidden))

    @staticmethod
    def _hidden_text(hidden: int) -> Text | str:
        return Text(f" {hidden} more node(s): / filters the nodes shown", style="dim") if hidden else ""

    def repaint(self) -> None:
        # Inside the scrollbar (many nodes) and each NodeMetrics' padding: a line any
        # wider wraps its sparkline onto a line of its own.
        width = self.scrollable_content_region.width - 2
        # The width is part of what was painted: a replay's model never changes, and its
        # first paint can come before the layout gave the pane its width.
        if self.model is None or width <= 0 or (self.model.version, width) == self._seen:
            return
        self._seen = (self.model.version, width)
        snap = self.model.snapshot()
        top = self.scroll_offset.y
        bottom = top + self.size.height
        for widget in self.query(NodeMetrics):
            region = widget.virtual_region
            if widget.rendered and (region.bottom < top or region.y > bottom):
                widget.stale = True  # off screen: painted when it scrolls into view
                continue
            widget.render_from(snap.node(widget.node), width)

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if any(w.stale for w in self.query(NodeMetrics)):
            self._seen = None  # the nodes scrolled into view get painted at the next tick
