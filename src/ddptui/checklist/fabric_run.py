"""The fabric step's live state: one long-lived worker per node, records as they
arrive, and the round loop's waits. Core layer (no asyncssh, no UI)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from ddptui.checklist.fabric_analysis import Sample
from ddptui.transport.base import ProbeOutput, ProbeRun


@dataclass
class FabricRun:
    names: list[str]  # node index -> name (rank order of the tested nodes)
    deadline: float  # monotonic
    op_timeout_s: float
    probes: dict[int, ProbeRun] = field(default_factory=dict)
    hw: dict[int, dict[str, Any]] = field(default_factory=dict)
    phase: dict[int, str] = field(default_factory=dict)
    ready: dict[int, dict[str, Any]] = field(default_factory=dict)
    intra: dict[int, dict[str, Any]] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    results: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)  # (round, node)
    ended: dict[int, ProbeOutput] = field(default_factory=dict)
    clock: dict[int, float] = field(default_factory=dict)  # node wall clock - ours, seconds
    gone: dict[int, str] = field(default_factory=dict)  # node -> why
    samples: list[Sample] = field(default_factory=list)
    round_s: list[float] = field(default_factory=list)  # wall time of each round
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def take(self, i: int, rec: dict[str, Any]) -> None:
        kind = rec.get("kind")
        t = rec.get("t")
        if isinstance(t, int | float):
            self.clock[i] = float(t) - time.time()
        if kind == "hw":
            self.hw[i] = rec
        elif kind == "phase":
            self.phase[i] = str(rec.get("phase"))
        elif kind == "ready":
            self.ready[i] = rec
            self.phase[i] = "ready"
        elif kind == "intra":
            self.intra[i] = rec
        elif kind == "error":
            self.errors[i] = str(rec.get("message", ""))
        elif kind == "pair" and isinstance(rec.get("round"), int):
            self.results[(rec["round"], i)] = rec
        self.changed.set()

    async def follow(self, i: int, probe: ProbeRun) -> None:
        """Every record of node i's worker, until it ends."""
        while True:
            rec = await probe.next_record()
            if rec is None:
                break
            self.take(i, rec)
        self.ended[i] = await probe.wait()
        self.changed.set()

    async def until(self, done: Any, timeout: float) -> bool:
        """Wait until done() is true (re-checked on every record), at most timeout s."""
        end = time.monotonic() + max(0.0, timeout)
        while not done():
            left = end - time.monotonic()
            if left <= 0:
                return False
            self.changed.clear()
            if done():
                return True
            try:
                await asyncio.wait_for(self.changed.wait(), left)
            except asyncio.TimeoutError:
                return bool(done())
        return True

    def alive(self, i: int) -> bool:
        return i in self.probes and i not in self.ended and i not in self.gone

    async def round(
        self, k: int, pairs: list[tuple[int, int]], timeout: float, confirm: bool
    ) -> None:
        """One round: every pair's two ends told at once; each pair's figure is the lower
        of its two ends' (a node that never answered makes it a failed test)."""
        started = time.monotonic()
        live = [(a, b) for a, b in pairs if self.alive(a) and self.alive(b)]
        for a, b in live:
            # "to": a transport that can only broadcast (one srun step for all nodes)
            # still reaches the right worker; the others ignore the line.
            self.probes[a].send({"op": "pair", "round": k, "peer": b, "to": a})
            self.probes[b].send({"op": "pair", "round": k, "peer": a, "to": b})
        ends = [x for p in live for x in p]

        def answered() -> bool:
            return all((k, x) in self.results or not self.alive(x) for x in ends)

        await self.until(answered, timeout)
        for x in ends:
            if (k, x) not in self.results and x not in self.gone:
                self.gone[x] = (
                    "its worker ended"
                    if x in self.ended
                    else f"no answer in round {k} within {timeout:.0f} s"
                )
        for a, b in live:
            ra, rb = self.results.get((k, a)), self.results.get((k, b))
            figures = [
                float(r["gbs"])
                for r in (ra, rb)
                if r is not None
                and r.get("status") == "ok"
                and isinstance(r.get("gbs"), int | float)
            ]
            status = "ok"
            if ra is None or rb is None:
                status = "lost"
            elif len(figures) < 2:
                status = next(str(r.get("status")) for r in (ra, rb) if r.get("status") != "ok")
            gbs = min(figures) if len(figures) == 2 and status == "ok" else None
            self.samples.append(Sample(k, a, b, gbs, status, confirm))
        self.round_s.append(round(time.monotonic() - started, 3))

    def pair_message(self, a: int, b: int) -> str:
        for (_, x), rec in sorted(self.results.items(), key=lambda kv: kv[0][0], reverse=True):
            if x in (a, b) and rec.get("peer") in (a, b) and rec.get("status") != "ok":
                return str(rec.get("message") or rec.get("status"))
        return "no answer"

    async def stop(self) -> None:
        """Tell every worker to leave, then close what is still running."""
        for i, probe in self.probes.items():
            if i not in self.ended:
                probe.send({"op": "stop"})
        waits = [p.wait(timeout=5) for i, p in self.probes.items() if i not in self.ended]
        if waits:
            await asyncio.gather(*waits, return_exceptions=True)
