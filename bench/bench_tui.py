#!/usr/bin/env python3
"""TUI responsiveness in a real terminal (tmux): start-up, CPU with 32 streaming nodes,
key-to-repaint latency, quit time.

Usage (needs tmux; no root, no network; about 2 minutes):
    .venv/bin/python bench/bench_tui.py [--startup-runs 7] [--window 30] [--presses 30]
    .venv/bin/python bench/bench_tui.py --nodes 256 --startup-runs 1 --warmup 45
(--nodes N: N local nodes instead of 32; 256 need a longer warm-up for their probes
to start. A quit slower than 20 s is reported as such, not raised.)

1. Start-up: `.venv/bin/ddptui` (embedded local demo) in a 160x50 tmux pane; wall time
   from `tmux new` to the app's first frame (the app writes the time of its first
   refresh to DDPTUI_TRACE_FIRST_FRAME), and to the first capture-pane (polled every
   ~10 ms) that shows the checklist, that shows the cluster's name and its node columns
   (ddptui's plain frame, from a glance at the config before Textual loads), then the
   loaded config (the header's clock runs); median of --startup-runs (--startup-only:
   this part alone). Plus `python -X importtime -c "import ddptui.ui.app"`.
2. 32 `host: local` nodes streaming metrics at 2 Hz (metrics_interval 0.5): after a 10 s
   warm-up, CPU time (utime+stime from /proc/PID/stat) of the app process alone, of its
   probe processes (python descendants of the app) and of the tmux server, over --window s.
3. Key-to-repaint with the same 32 streaming nodes: send Down/Up alternately (at least
   0.3 s apart, and only once the previous repaint has settled) and poll capture-pane
   back to back until the left part of the screen (checklist + detail pane; the header
   clock and the metrics pane change on their own) differs: "first change"; and until it
   has stopped changing for 0.5 s: "settled". The tmux capture-pane call is timed alone
   too, as the resolution of that measurement.
4. Quit: `q`, then time until the app process is gone and no probe process is left.

Prints a Markdown table. Every process it starts is killed by pid in a finally block,
and the tmux server runs on its own socket (-L) and is killed at the end.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from procstat import (
    alive,
    all_procs,
    cmdline,
    cpu_ticks,
    own_cpu_s,
    python_descendants,
    stat,
    system_busy_ticks,
)

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = ROOT / ".venv" / "bin"
SOCK = f"ddptui-bench-{os.getpid()}"
CLK = os.sysconf("SC_CLK_TCK")
COLS, ROWS = 160, 50
QUIET_S = 0.5  # a repaint is over when the screen has not changed for this long
NO_CHANGE_S = 3.0  # a key press with no visible effect this long after it is "missed"

# pid -> starttime of every app / probe process seen, so the finally block can kill
# exactly those (a pid with another starttime has been reused: left alone).
TRACKED: dict[int, int] = {}


# --------------------------------------------------------------------------- tmux


def tmux(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["tmux", "-L", SOCK, *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"tmux {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def capture(name: str) -> str:
    return tmux("capture-pane", "-p", "-t", name, check=False)


def new_session(name: str, command: str) -> None:
    tmux("new-session", "-d", "-s", name, "-x", str(COLS), "-y", str(ROWS), command)


def kill_session(name: str) -> None:
    tmux("kill-session", "-t", name, check=False)


def pane_pid(name: str) -> int:
    return int(tmux("display", "-p", "-t", name, "#{pane_pid}").strip())


def wait_for_text(name: str, text: str, timeout: float, poll: float = 0.01) -> float:
    """perf_counter() of the first capture that contains text."""
    return wait_until(name, lambda screen: text in screen, repr(text), timeout, poll)


def wait_until(
    name: str, seen: Callable[[str], bool], what: str, timeout: float, poll: float = 0.01
) -> float:
    """perf_counter() of the first capture for which seen(capture) holds."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if seen(capture(name)):
            return time.perf_counter()
        time.sleep(poll)
    raise RuntimeError(f"{what} did not appear within {timeout:g} s:\n{capture(name)}")


def shows_node_columns(screen: str, cluster: str, nodes: list[str]) -> bool:
    """The cluster's name in the header and a column per node beside step and status."""
    lines = screen.splitlines()
    heads = [line.split("│")[0].split() for line in lines]
    return bool(lines) and cluster in lines[0] and ["step", "status", *nodes] in heads


# --------------------------------------------------------------------------- processes










def track_probes(app: int) -> dict[int, tuple[int, str, str, int, int]]:
    probes = python_descendants(app)
    for pid, st in probes.items():
        TRACKED.setdefault(pid, st[4])
    return probes




def is_app(pid: int) -> bool:
    """The ddptui interpreter: `python .../bin/ddptui ...` (the shebang makes comm "ddptui")."""
    argv = cmdline(pid)
    return len(argv) > 1 and Path(argv[0]).name.startswith("python") and argv[1].endswith("/ddptui")


def app_pid(name: str, timeout: float = 10.0) -> int:
    """The ddptui python process: the pane's process itself when the shell exec'd it,
    else the descendant of the pane running .venv/bin/ddptui."""
    pane = pane_pid(name)
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        procs = all_procs()
        todo, pid = [pane], 0
        while todo and not pid:
            cur = todo.pop(0)
            if is_app(cur):
                pid = cur
            todo.extend(p for p, s in procs.items() if s[0] == cur)
        st = stat(pid) if pid else None
        if st is not None:
            TRACKED[pid] = st[4]
            return pid
        time.sleep(0.01)
    raise RuntimeError(f"no ddptui process under tmux pane pid {pane}")








# --------------------------------------------------------------------------- helpers


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if math.isfinite(seconds) else "not within 20 s"


def wait_quit(
    name: str, app: int, probes: dict[int, int], timeout: float = 20.0
) -> tuple[float, float]:
    """After q was sent: (seconds until the app is gone, until every probe is gone too),
    polled every 10 ms. Probes are the recorded pid/starttime pairs plus any python
    descendant of the app seen while it lives (a probe outliving the app is reparented,
    the recorded pair still finds it)."""
    t0 = time.perf_counter()
    app_start = TRACKED[app]
    t_app = t_all = None
    while time.perf_counter() - t0 < timeout:
        now = time.perf_counter() - t0
        app_alive = alive(app, app_start)
        if app_alive:
            for pid, st in python_descendants(app).items():
                probes.setdefault(pid, st[4])
                TRACKED.setdefault(pid, st[4])
        elif t_app is None:
            t_app = now
        left = [p for p, s in probes.items() if alive(p, s)]
        if not app_alive and not left:
            t_all = now
            break
        time.sleep(0.01)
    if t_app is None or t_all is None:
        # Reported as "> timeout" with the rest of the figures (the finally block kills
        # whatever is left), not raised: the measurements so far would be lost.
        left = [p for p, s in probes.items() if alive(p, s)]
        print(
            f"{timeout:g} s after q: app {app} alive={alive(app, app_start)}, probes left={left}",
            file=sys.stderr,
        )
    return (t_app or math.inf), (t_all or math.inf)


# --------------------------------------------------------------------------- 1. start-up

LOADED = re.compile(r"local-demo · 2 node\(s\) · \d\d:\d\d")  # the header's clock runs


def demo_columns(screen: str) -> bool:  # the embedded demo's name and nodes
    return shows_node_columns(screen, "local-demo", ["node0", "node1"])


def bench_startup(runs: int) -> tuple[list[float], list[float], list[float], list[float]]:
    """Per run: (first frame by the app's own clock, first frame seen by capture-pane,
    the first frame with the cluster's name and node columns, the frame with the config
    loaded: the header's clock runs). Polling capture-pane costs CPU the app then lacks
    on 2 cores, so the app writes the wall time of its first frame (after the first
    refresh) to DDPTUI_TRACE_FIRST_FRAME, and the poll runs only every 10 ms."""
    own, seen, nodes, loaded = [], [], [], []
    trace = Path(tempfile.mkdtemp(prefix="ddptui-bench-")) / "first-frame"
    for i in range(runs):
        name = f"start{i}"
        trace.unlink(missing_ok=True)
        wall0, t0 = time.time(), time.perf_counter()
        new_session(name, f"cd {ROOT} && DDPTUI_TRACE_FIRST_FRAME={trace} {VENV_BIN / 'ddptui'}")
        try:
            # The first frame: the header and the checklist rows; the config (pydantic,
            # YAML) loads right after it and the header then names the cluster.
            t1 = wait_for_text(name, " allreduce ", timeout=30)
            t_nodes = wait_until(name, demo_columns, "node columns", 30)
            t2 = wait_until(name, lambda s: bool(LOADED.search(s)), "the loaded header", 30)
            own.append(float(trace.read_text().split()[0]) - wall0)
            seen.append(t1 - t0)
            nodes.append(t_nodes - t0)
            loaded.append(t2 - t0)
            app = app_pid(name)
            probes = {p: s[4] for p, s in track_probes(app).items()}
            tmux("send-keys", "-t", name, "q")
            wait_quit(name, app, probes)
        finally:
            kill_session(name)
    return own, seen, nodes, loaded


def importtime(repeats: int = 3) -> tuple[float, list[tuple[float, float, int, str]]]:
    """(total s, rows (cumulative s, self s, depth, module)) of the run with the median total."""
    runs = []
    for _ in range(repeats):
        proc = subprocess.run(
            [str(VENV_BIN / "python"), "-X", "importtime", "-c", "import ddptui.ui.app"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        )
        rows = []
        for line in proc.stderr.splitlines():
            if not line.startswith("import time:") or "cumulative" in line:
                continue
            self_us, cum_us, mod = line[len("import time:") :].split("|")
            depth = (len(mod) - len(mod.lstrip(" ")) - 1) // 2
            rows.append((int(cum_us) / 1e6, int(self_us) / 1e6, depth, mod.strip()))
        total = next(r[0] for r in rows if r[3] == "ddptui.ui.app")
        runs.append((total, rows))
    runs.sort(key=lambda r: r[0])
    return runs[len(runs) // 2]


# --------------------------------------------------------------------------- 2.-4. 32 nodes


def write_config(n: int) -> Path:
    lines = [
        f"name: bench{n}",
        "master:",
        "  addr: 127.0.0.1",
        f"python: {sys.executable}",
        "metrics_interval: 0.5",
        "env:",
        "  GLOO_SOCKET_IFNAME: lo",
        "nodes:",
    ]
    for i in range(n):
        lines += ["  - host: local", f"    name: node{i}"]
    fd, path = tempfile.mkstemp(prefix="ddptui-bench-", suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    return Path(path)


def left_region(screen: str) -> list[str] | None:
    """Checklist + banner + detail pane: rows between the header and the footer, columns
    left of the metrics pane's border (found from the "live metrics" title)."""
    lines = screen.split("\n")
    for line in lines:
        at = line.find("live metrics")
        if at > 0:
            border = line.rfind("│", 0, at)
            cut = border if border >= 0 else at - 1
            return [ln[:cut] for ln in lines[1 : ROWS - 1]]
    return None


def bench_streaming(  # noqa: PLR0912, PLR0915 - one scenario, read top to bottom
    nodes: int, warmup: float, window: float, presses: int
) -> dict[str, Any]:
    res: dict[str, Any] = {}
    cfg = write_config(nodes)
    name = f"n{nodes}"
    try:
        t0 = time.perf_counter()
        new_session(name, f"cd {ROOT} && {VENV_BIN / 'ddptui'} {cfg}")
        t_frame = wait_for_text(name, f"ddptui bench{nodes}", timeout=30 + nodes / 8)
        res["first_frame_s"] = t_frame - t0
        app = app_pid(name)
        server = int(tmux("display", "-p", "-t", name, "#{pid}").strip())

        # ---- warm-up (from the first frame): the ssh step, then 32 probes start
        while time.perf_counter() < t_frame + warmup:
            track_probes(app)
            time.sleep(0.25)
        if "live" not in capture(name):
            raise RuntimeError("no node shows live metrics after the warm-up:\n" + capture(name))

        # ---- CPU window: app alone, probes (summed per pid/starttime), tmux server
        probes = track_probes(app)
        res["probes_at_start"] = len(probes)
        base = {(p, s[4]): s[3] for p, s in probes.items()}
        last = dict(base)
        app0, srv0 = cpu_ticks(app), cpu_ticks(server)
        load0 = os.getloadavg()[0]
        sys0, own0 = system_busy_ticks(), own_cpu_s()
        w0 = time.perf_counter()
        while True:
            for p, s in track_probes(app).items():
                last[(p, s[4])] = s[3]
            left = w0 + window - time.perf_counter()
            if left <= 0:
                break
            time.sleep(min(0.5, left))
        elapsed = time.perf_counter() - w0
        app1, srv1 = cpu_ticks(app), cpu_ticks(server)
        sys1, own1 = system_busy_ticks(), own_cpu_s()
        probes_end = track_probes(app)
        for p, s in probes_end.items():
            last[(p, s[4])] = s[3]
        probe_ticks = sum(v - base.get(k, 0) for k, v in last.items())
        res["window_s"] = elapsed
        res["app_pct"] = 100.0 * (app1 - app0) / CLK / elapsed
        res["probes_pct"] = 100.0 * probe_ticks / CLK / elapsed
        res["tmux_pct"] = 100.0 * (srv1 - srv0) / CLK / elapsed
        res["system_pct"] = 100.0 * (sys1 - sys0) / CLK / elapsed
        res["bench_pct"] = 100.0 * (own1 - own0) / elapsed
        res["probes_at_end"] = len(probes_end)
        res["probe_pids_seen"] = len(last)
        res["loadavg_1m"] = (load0, os.getloadavg()[0])
        res["live_on_screen"] = capture(name).count(" live")

        # ---- capture-pane baseline: the poll loop's own granularity
        caps = []
        for _ in range(50):
            c0 = time.perf_counter()
            capture(name)
            caps.append(time.perf_counter() - c0)
        res["capture_s"] = caps

        # ---- key-to-repaint. Down lands on a step not run yet (a two-line detail pane),
        # Up back on the ssh step (a line per node). "first": the first capture whose
        # left region differs; "settled": the last change before it stays still for
        # QUIET_S (a repaint can take several frames). Next press: 0.3 s after this one
        # at the earliest, and never before the screen has settled.
        first: dict[str, list[float]] = {"Down": [], "Up": []}
        settled: dict[str, list[float]] = {"Down": [], "Up": []}
        missed, sends = 0, []
        for i in range(presses):
            key = "Down" if i % 2 == 0 else "Up"
            before = left_region(capture(name))
            if before is None:
                raise RuntimeError("metrics pane not found on screen:\n" + capture(name))
            k0 = time.perf_counter()
            tmux("send-keys", "-t", name, key)
            sends.append(time.perf_counter() - k0)
            t_first = t_last = None
            shown = before
            while True:
                cur = left_region(capture(name))
                t = time.perf_counter() - k0
                if cur is not None and cur != shown:
                    t_first = t if t_first is None else t_first
                    t_last, shown = t, cur
                if t_first is None and t > NO_CHANGE_S:
                    missed += 1
                    break
                if t_last is not None and t - t_last >= QUIET_S:
                    break
            if t_first is not None and t_last is not None:
                first[key].append(t_first)
                settled[key].append(t_last)
            time.sleep(max(0.0, k0 + 0.3 - time.perf_counter()))
        res["key_first"], res["key_settled"] = first, settled
        res["key_missed"], res["send_s"] = missed, sends

        # ---- quit
        probes_q = {p: s[4] for p, s in track_probes(app).items()}
        res["probes_at_quit"] = len(probes_q)
        tmux("send-keys", "-t", name, "q")
        res["quit_app_s"], res["quit_all_s"] = wait_quit(name, app, probes_q)
    finally:
        kill_session(name)
        cfg.unlink(missing_ok=True)
    return res


# --------------------------------------------------------------------------- main


def cleanup() -> None:
    tmux("kill-server", check=False)
    # tmux leaves its socket file behind
    tmpdir = os.environ.get("TMUX_TMPDIR") or "/tmp"  # noqa: S108 - tmux's own default
    sock_dir = Path(tmpdir) / f"tmux-{os.getuid()}"
    (sock_dir / SOCK).unlink(missing_ok=True)
    time.sleep(0.2)
    for pid, start in TRACKED.items():
        if alive(pid, start):
            try:
                os.kill(pid, 9)
                print(f"(cleanup: killed leftover pid {pid})", file=sys.stderr)
            except ProcessLookupError:
                pass


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks


def main() -> None:
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGHUP, _stop)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with &
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--startup-runs", type=int, default=7)
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--window", type=float, default=30.0)
    ap.add_argument("--presses", type=int, default=30)
    ap.add_argument("--startup-only", action="store_true", help="only part 1 (start-up)")
    args = ap.parse_args()
    if not (VENV_BIN / "ddptui").exists():
        raise SystemExit(f"{VENV_BIN / 'ddptui'} not found (run scripts/setup first)")

    started = time.perf_counter()
    try:
        # A keeper session holds the tmux server up, so every run pays only for its
        # own session, not for a server start.
        new_session("keeper", "sleep 86400")
        startup, seen, nodes, loaded = bench_startup(args.startup_runs)
        imp_total, imp_rows = importtime()
        if not args.startup_only:
            s = bench_streaming(args.nodes, args.warmup, args.window, args.presses)
    finally:
        cleanup()
    took = time.perf_counter() - started

    cores = os.cpu_count()
    usable = len(os.sched_getaffinity(0))

    print(f"## ddptui TUI benchmark ({COLS}x{ROWS} tmux pane)\n")
    tmux_v = subprocess.run(["tmux", "-V"], capture_output=True, text=True, check=False).stdout
    print(
        f"Machine: {cores} cores ({usable} usable), Python {sys.version.split()[0]}, "
        f"{tmux_v.strip()}; "
        f"benchmark took {took:.0f} s.\n"
    )
    print("| measure | result | how |")
    print("|---|---|---|")
    print(f"| cores | {cores} ({usable} usable) | os.cpu_count(), sched_getaffinity |")
    print(
        f"| start-up to first frame (demo), on the terminal | **median {ms(statistics.median(seen))}** "
        f"(min {ms(min(seen))}, max {ms(max(seen))}; {len(seen)} runs) | "
        "`tmux new` to the first capture-pane showing the checklist (ddptui's plain frame, "
        "drawn before Textual loads), polled every ~10 ms |"
    )
    print(
        f"| start-up to first frame with node columns (demo) | **median "
        f"{ms(statistics.median(nodes))}** (min {ms(min(nodes))}, max {ms(max(nodes))}) | "
        "same runs, to the first capture showing the cluster's name and a column per node "
        "(node0, node1) beside step and status |"
    )
    print(
        f"| start-up to Textual's first frame | median {ms(statistics.median(startup))} "
        f"(min {ms(min(startup))}, max {ms(max(startup))}) | "
        "wall time from `tmux new` to the app's first refresh (DDPTUI_TRACE_FIRST_FRAME) |"
    )
    print(
        f"| start-up to the config loaded (demo) | median {ms(statistics.median(loaded))} "
        f"(min {ms(min(loaded))}, max {ms(max(loaded))}) | "
        "same runs, to the frame whose header clock runs (pydantic and the YAML parser done) |"
    )
    print(f"| `import ddptui.ui.app` | {ms(imp_total)} | `python -X importtime`, median of 3 |")
    if not args.startup_only:
        print_streaming(s, args.nodes, args.warmup, usable)
    print(f"\nTextual first-frame runs (ms): {', '.join(f'{t * 1000:.0f}' for t in startup)}\n")
    print(
        "`python -X importtime -c 'import ddptui.ui.app'`: five largest cumulative "
        "(nested rows overlap their parents):\n"
    )
    print("| module | depth | cumulative | self |")
    print("|---|---|---|---|")
    top = sorted((r for r in imp_rows if r[3] != "ddptui.ui.app"), key=lambda r: -r[0])[:5]
    print(f"| ddptui.ui.app (total) | 0 | {ms(imp_total)} | - |")
    for cum, self_s, depth, mod in top:
        print(f"| {mod} | {depth} | {ms(cum)} | {self_s * 1000:.1f} ms |")


def print_streaming(s: dict[str, Any], n: int, warmup: float, usable: int) -> None:
    """Parts 2-4: the rows of the table for n streaming nodes."""
    caps = s["capture_s"]
    sends = s["send_s"]
    print(
        f"| {n} nodes @ 2 Hz: app CPU | **{s['app_pct']:.1f} % of one core** | "
        f"utime+stime of the app pid, {s['window_s']:.0f} s window after {warmup:g} s warm-up |"
    )
    print(
        f"| {n} nodes @ 2 Hz: probes CPU (total) | {s['probes_pct']:.1f} % of one core "
        f"({s['probes_pct'] / max(1, s['probes_at_start']):.2f} % each) | "
        f"python descendants of the app: {s['probes_at_start']} at start, "
        f"{s['probes_at_end']} at end, {s['probe_pids_seen']} pids seen |"
    )
    print(
        f"| {n} nodes @ 2 Hz: tmux server CPU | {s['tmux_pct']:.1f} % of one core | "
        "the terminal side of the repaints, same window |"
    )
    other = s["system_pct"] - s["app_pct"] - s["probes_pct"] - s["tmux_pct"] - s["bench_pct"]
    print(
        f"| same window: whole machine busy | {s['system_pct']:.0f} % of one core "
        f"(of {usable * 100} %): this script {s['bench_pct']:.1f} %, everything else "
        f"{max(0.0, other):.0f} % | /proc/stat busy ticks; os.times() of this script |"
    )
    kf, ks = s["key_first"], s["key_settled"]
    allf = kf["Down"] + kf["Up"]
    alls = ks["Down"] + ks["Up"]

    def dist(v: list[float]) -> str:
        return f"median {ms(statistics.median(v))}, p95 {ms(pct(v, 0.95))}" if v else "n/a"

    print(
        f"| key-to-repaint, first change (all presses) | **{dist(allf)}** "
        f"({len(allf)} presses, {s['key_missed']} with no change in {NO_CHANGE_S:g} s) | "
        "perf_counter before `send-keys` to the return of the first capture-pane whose "
        "checklist+detail region differs; capture-pane polled back to back |"
    )
    print(
        f"| — Down (to a step not run: 2-line detail) | first {dist(kf['Down'])}; "
        f"settled {dist(ks['Down'])} | settled = last change before {QUIET_S:g} s of no change |"
    )
    print(
        f"| — Up (to the ssh step: one detail line per node) | first {dist(kf['Up'])}; "
        f"settled {dist(ks['Up'])} | same |"
    )
    print(f"| key-to-repaint, settled (all presses) | {dist(alls)} | same |")
    print(
        f"| capture-pane call (baseline) | median {ms(statistics.median(caps))}, "
        f"p95 {ms(pct(caps, 0.95))} | one `tmux capture-pane -p` subprocess, 50 calls, "
        f"{n} nodes streaming |"
    )
    print(
        f"| send-keys call | median {ms(statistics.median(sends))} | included in key-to-repaint |"
    )
    print(f"| quit (`q`) to app gone | {ms(s['quit_app_s'])} | app pid gone, polled every 10 ms |")
    print(
        f"| quit (`q`) to app + all {s['probes_at_quit']} probes gone | {ms(s['quit_all_s'])} | "
        "recorded probe pid/starttime pairs all gone |"
    )
    print(f'| {n}-node first frame | {ms(s["first_frame_s"])} | one run, header "ddptui bench{n}" |')
    print(f"\nload average (1 min), window start/end: {s['loadavg_1m'][0]:.2f} / {s['loadavg_1m'][1]:.2f}")


if __name__ == "__main__":
    main()
