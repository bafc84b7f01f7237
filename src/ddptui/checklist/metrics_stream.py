"""Stream the metrics probe from every node into a MetricsModel, for as long as asked.

One asyncio task per node: start the probe, feed its records to the model, and when
the stream ends or stalls mark the node lost and try again after 1, 2, 4 ... s
(capped). Node trouble never reaches the caller; it is the node's state in the model.
stop() stops every probe it started, so nothing outlives it on a node.

Call stop() before closing the transports: a transport closed under a live stream
looks like a lost node, and the streamer would reconnect.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from ddptui.metrics import MetricsModel, NodeSeries
from ddptui.probeset import ProbeNotFound
from ddptui.transport.base import ConnectFailure, ProbeRun, Transport

PROBE = "metrics"
HELLO_TIMEOUT_S = 30.0  # interpreter start + nvmlInit (seconds on 8 GPUs without persistence mode)
STOP_GRACE_S = 3.0


def backoff_delay(attempt: int, base: float = 1.0, cap: float = 30.0) -> float:
    """Seconds before retry number attempt+1: base, 2*base, 4*base, ... at most cap."""
    return min(cap, base * 2.0 ** min(attempt, 32))


class MetricsStreamer:
    """Live samples from every node, concurrently; see the module docstring."""

    def __init__(
        self,
        transports: Mapping[str, Transport],
        model: MetricsModel,
        *,
        interval: float = 1.0,
        backoff_base: float = 1.0,
        backoff_cap: float = 30.0,
        hello_timeout: float = HELLO_TIMEOUT_S,
        stall_timeout: float | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        self.transports = dict(transports)
        self.model = model
        self.interval = interval
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.hello_timeout = hello_timeout
        # A live probe that stops sending (node frozen, connection hung without a
        # keepalive verdict yet) is lost after this long.
        self.stall_timeout = stall_timeout or max(10.0, 5.0 * interval)
        self.params = {"interval": interval, **(params or {})}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._runs: dict[str, ProbeRun] = {}
        self._stopping = False

    @property
    def running(self) -> bool:
        return bool(self._tasks) and not self._stopping

    async def start(self) -> None:
        """Start streaming on every node (returns at once; idempotent)."""
        if self._tasks:
            return
        self._stopping = False
        for name, transport in self.transports.items():
            self.model.series(name)  # every node shows up, "connecting", at once
            self._tasks[name] = asyncio.ensure_future(self._node_loop(name, transport))

    async def stop(self) -> None:
        """Stop every node's probe and wait until each is gone (bounded by ProbeRun.stop)."""
        self._stopping = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # A run whose task was cancelled before its finally could stop it.
        runs = list(self._runs.values())
        self._runs.clear()
        await asyncio.gather(*(r.stop(grace=STOP_GRACE_S) for r in runs), return_exceptions=True)
        for name in self._tasks:
            self.model.series(name).mark_stopped()
        self._tasks.clear()

    async def _node_loop(self, name: str, transport: Transport) -> None:
        series = self.model.series(name)
        attempt = 0
        while not self._stopping:
            why, streamed = await self._stream_once(name, transport, series)
            if streamed:
                attempt = 0  # it worked for a while: the next failure starts at base again
            if self._stopping or (why is None and streamed):
                continue  # clean end (max_s reached): start again at once
            why = why or "the metrics probe ended before its first sample"
            series.mark_lost(why)
            delay = backoff_delay(attempt, self.backoff_base, self.backoff_cap)
            attempt += 1
            series.mark_retry(delay)
            await asyncio.sleep(delay)

    async def _stream_once(
        self, name: str, transport: Transport, series: NodeSeries
    ) -> tuple[str | None, bool]:
        """Run the probe until its stream ends: (why it ended or None if cleanly, whether
        any sample arrived)."""
        run: ProbeRun | None = None
        streamed = False
        timeout = self.hello_timeout
        try:
            run = await transport.start_probe(PROBE, self.params)
            self._runs[name] = run
            ended: str | None = "the metrics probe ended"
            error: str | None = None
            while True:
                rec = await run.next_record(timeout=timeout)
                # stop() cancels this task, but asyncio.wait_for (Python < 3.12) drops a
                # cancel that lands as a record arrives: without this check the stream
                # would go on for ever and stop() would never return.
                if rec is None or self._stopping:
                    break
                # A stream never finishes: do not let the run keep every record.
                run.records.clear()
                kind = rec.get("kind")
                if kind == "end":
                    ended = None
                elif kind == "error":
                    error = str(rec.get("message") or "the metrics probe failed")
                else:
                    series.add(rec)
                    streamed = streamed or kind == "sample"
                timeout = self.stall_timeout
            out = await run.stop(grace=STOP_GRACE_S)
            if ended is None and out.exit_status == 0:
                return None, streamed
            return error or out.problem() or ended, streamed
        except ConnectFailure as exc:
            return f"{exc.kind}: {exc.message}", streamed
        except asyncio.TimeoutError:
            return f"no metrics from the node for {timeout:g} s (stalled or hung)", streamed
        except (OSError, ConnectionError, EOFError) as exc:
            return f"metrics stream failed: {exc}", streamed
        except ProbeNotFound as exc:  # a broken install: say so on every node
            return str(exc), streamed
        finally:
            if run is not None:
                self._runs.pop(name, None)
                # Shielded: a second cancel must not leave the probe running.
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(run.stop(grace=STOP_GRACE_S))
