"""Charts for the reports (stdlib only, pure): the metric series a node's samples hold,
as inline-SVG sparklines (HTML) or block-character ones (Markdown)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from ddptui.metrics import human_rate
from ddptui.metrics import sparkline as sparkline_text

__all__ = ["human_rate"]

Number = float | int | None


def finite(value: object) -> float | None:
    """value as a float when it is a JSON number and finite (bools and NaN are not)."""
    kind = type(value)  # exact types, not isinstance: bool is an int, and this is hot
    if kind is float:
        return value if math.isfinite(value) else None  # type: ignore[arg-type,return-value]
    return float(value) if kind is int else None  # type: ignore[arg-type]


def downsample(values: Sequence[Number], limit: int) -> list[float | None]:
    """At most `limit` points; each bucket keeps its largest value, so spikes survive."""
    clean = [finite(v) for v in values]
    if limit <= 0 or len(clean) <= limit:
        return clean
    out: list[float | None] = []
    for i in range(limit):
        bucket = [
            v
            for v in clean[i * len(clean) // limit : (i + 1) * len(clean) // limit]
            if v is not None
        ]
        out.append(max(bucket) if bucket else None)
    return out


def sparkline(
    values: Sequence[Number],
    *,
    width: int = 200,
    height: int = 36,
    ceiling: float | None = None,
    colour: str = "#1a73e8",
    label: str = "",
) -> str:
    """An inline <svg> sparkline: a polyline per run of known values (None leaves a gap),
    with a light area under it. The y axis runs from 0 to `ceiling` (100 for percent) or
    to the largest value. `label` becomes the chart's accessible title."""
    pad = 2.0
    points = downsample(values, max(2, width // 2))
    known = [v for v in points if v is not None]
    top = max(ceiling or 0.0, *known) if known else (ceiling or 1.0)
    top = top if top > 0 else 1.0
    head = (
        f'<svg class="spark" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(label)}"><title>{escape(label)}</title>'
    )
    base = height - pad
    axis = (
        f'<line x1="{pad:g}" y1="{base:g}" x2="{width - pad:g}" y2="{base:g}" '
        'stroke="#c8ccd0" stroke-width="1"/>'
    )
    if not known:
        text = (
            f'<text x="{width / 2:g}" y="{height / 2 + 4:g}" text-anchor="middle" '
            'font-size="11" fill="#80868b">no data</text>'
        )
        return head + axis + text + "</svg>"
    step = (width - 2 * pad) / max(1, len(points) - 1)
    runs: list[list[tuple[float, float]]] = [[]]
    for i, v in enumerate(points):
        if v is None:
            if runs[-1]:
                runs.append([])
            continue
        x = pad + i * step
        y = base - (min(v, top) / top) * (height - 2 * pad)
        runs[-1].append((x, y))
    body = [axis]
    for found in (r for r in runs if r):
        run = found
        if len(run) == 1:  # a lone sample: a short dash, so it is visible
            x, y = run[0]
            run = [(max(pad, x - 1.5), y), (min(width - pad, x + 1.5), y)]
        coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in run)
        area = f"{run[0][0]:.1f},{base:g} {coords} {run[-1][0]:.1f},{base:g}"
        body.append(f'<polygon points="{area}" fill="{escape(colour)}" fill-opacity="0.12"/>')
        body.append(
            f'<polyline points="{coords}" fill="none" stroke="{escape(colour)}" '
            'stroke-width="1.5" stroke-linejoin="round" stroke-linecap="round"/>'
        )
    return head + "".join(body) + "</svg>"


def text_sparkline(
    values: Sequence[Number], *, width: int = 24, ceiling: float | None = None
) -> str:
    """The same idea in block characters for Markdown: '▁▃▇█▅'; a gap is a space. The
    TUI's sparkline (metrics.sparkline) on the downsampled values."""
    points = downsample(values, width)
    known = [v for v in points if v is not None]
    if not known:
        return ""
    top = max(ceiling or 0.0, *known)
    return sparkline_text(points, 0.0, top if top > 0 else 1.0)


def series(samples: Iterable[Any]) -> dict[str, Any]:
    """Per-node metric series from metrics samples: cpu, mem (%), gpus {index: util}
    (gpu_records: each GPU's raw records, for gpu_peaks), and the busiest NIC and IB
    port by total rx+tx (loopback only if nothing else).
    Samples are parsed JSON (dicts); a 32-node session holds ~20k of them, so this stays
    one tight pass."""
    rows = [s for s in samples if isinstance(s, dict)]
    n = len(rows)
    cpu = [finite(s.get("cpu_pct")) for s in rows]
    mem: list[float | None] = [None] * n
    gpus: dict[str, list[float | None]] = {}
    records: dict[str, list[dict[str, Any]]] = {}
    for i, s in enumerate(rows):
        used, total = finite(s.get("mem_used")), finite(s.get("mem_total"))
        if used is not None and total:
            mem[i] = 100 * used / total
        for j, gpu in enumerate(s.get("gpus") or ()):
            if isinstance(gpu, dict):
                key = str(gpu.get("index", j))
                util = gpus.get(key)
                if util is None:
                    util = gpus[key] = [None] * n
                    records[key] = []
                util[i] = finite(gpu.get("util_pct"))
                records[key].append(gpu)
    return {
        "cpu": cpu,
        "mem": mem,
        "gpus": gpus,
        "gpu_records": records,
        "nic": _busiest(rows, "nics"),
        "ib": _busiest(rows, "ib"),
    }


def _busiest(rows: Sequence[dict[str, Any]], key: str) -> tuple[str, list[float | None]] | None:
    per: dict[str, list[float | None]] = {}
    totals: dict[str, float] = {}
    for i, s in enumerate(rows):
        ports = s.get(key)
        if not isinstance(ports, dict):
            continue
        for name, rates in ports.items():
            if not isinstance(rates, dict):
                continue
            rx, tx = finite(rates.get("rx_Bps")), finite(rates.get("tx_Bps"))
            if rx is None and tx is None:
                continue
            values = per.get(name)
            if values is None:
                values = per[name] = [None] * len(rows)
                totals[name] = 0.0
            values[i] = (rx or 0.0) + (tx or 0.0)
            totals[name] += values[i] or 0.0
    # Loopback only when nothing else carried traffic: one host's ranks (host: local)
    # talk over lo, and an idle eth0 at 0 B/s would hide that.
    busy = [n for n in per if totals[n] > 0]
    real = (
        sorted(n for n in busy if n != "lo")
        or sorted(busy)
        or sorted(n for n in per if n != "lo")
        or sorted(per)
    )
    if not real:
        return None
    name = max(real, key=lambda n: totals[n])
    return str(name), per[name]


def _peak(values: list[Any]) -> float | None:
    """The largest finite number among JSON values; fast when they are all numbers."""
    try:
        top = max(values) if values else None
    except TypeError:  # a None, a string or a list among them: the careful way
        top = None
    if top is not None and type(top) in (int, float) and math.isfinite(top):
        return float(top)
    return max((f for f in map(finite, values) if f is not None), default=None)


def gpu_peaks(per_gpu: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per GPU index, the peaks a GPU card shows beside its utilisation: memory used (and
    the total), temperature, power, and every reason its clocks were held back. From
    series()'s "gpu_records"; a list comprehension per field keeps 32 nodes x 8 GPUs x
    600 samples quick."""
    out: dict[str, dict[str, Any]] = {}
    for key, records in per_gpu.items():
        row: dict[str, Any] = {}
        for field in ("mem_used", "mem_total", "temp_c", "power_w"):
            row[field] = _peak([g.get(field) for g in records])
        held = [t for t in (g.get("throttle") for g in records) if t and isinstance(t, list)]
        row["throttle"] = list({r: None for t in held for r in t if isinstance(r, str)})
        out[key] = row
    return out


def peak(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None
