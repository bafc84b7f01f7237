"""Filtering on the node: the logread probe runs the diagnosis' prefilter where the file
is and sends only the blocks of lines the diagnosis looks at (probes/_linescan.py).  The
diagnosis of what it sends must be the diagnosis of the whole file: every real captured
log here is diagnosed both ways (the probe run as a node runs it, its records spooled as
the login node spools them) and the findings, evidence, line numbers, timelines and
counts compared, with the reader's real chunk sizes and with tiny ones (every lookback
and "Last error:" pair then meets a chunk boundary somewhere)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from ddptui.logs import reader, scan
from ddptui.logs.diagnose import LogDiagnosis
from ddptui.logs.inputs import Inputs, diagnose_inputs, diagnose_paths
from ddptui.logs.pipes import Pipe, spooled_blocks
from ddptui.logs.reader import ReadStats
from ddptui.logs.remote import _take
from ddptui.logs.scan import _chunk_lines, node_filter
from ddptui.probeset import helper_source, probe_source

FIXTURES = Path(__file__).parent / "fixtures"
LOGS = sorted(p for p in FIXTURES.rglob("*.log") if p.stat().st_size > 0)


def _linescan() -> dict[str, Any]:
    ns: dict[str, Any] = {"__name__": "linescan_under_test"}
    exec(compile(helper_source("_linescan.py"), "<probe _linescan>", "exec"), ns)  # noqa: S102 - our own probe source
    return ns


def _probe(paths: list[Path], flt: dict[str, Any]) -> list[dict[str, Any]]:
    """The logread probe's read of `paths`, as a node runs it (a process of its own)."""
    params = {"mode": "read", "paths": [str(p) for p in paths], "max_bytes": 1 << 30,
              "salt": "s", "filter": flt}
    code = f"PARAMS = {params!r}\n" + probe_source("logread")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True, env={"PATH": "/usr/bin:/bin"})
    return [json.loads(line) for line in out.stdout.splitlines()]


def _spooled(recs: list[dict[str, Any]], paths: list[Path], tmp: Path) -> LogDiagnosis:
    """The records spooled and diagnosed as read_remote does (labels: the paths)."""
    cond = threading.Condition()
    pipes = {str(p): Pipe(tmp / f"{i}.spool", cond) for i, p in enumerate(paths)}
    problems: list[str] = []
    for rec in recs:
        _take(rec, "n", pipes, problems, {str(p): str(p) for p in paths}, [])
    for pipe in pipes.values():
        pipe.close()
    assert not problems, problems
    inputs = Inputs()
    for path, pipe in pipes.items():
        stats = ReadStats(path)
        inputs.add_blocks(spooled_blocks(pipe.reader(), stats), stats)
    label = ", ".join(map(str, paths)) if len(paths) <= 3 else f"{len(paths)} files"
    return diagnose_inputs(inputs, label)


def _seen(d: LogDiagnosis) -> dict[str, Any]:
    return {
        "first": d.first.to_dict() if d.first else None,
        "findings": [f.to_dict() for f in d.findings],
        "hits": [(h.where, h.t, h.rank, h.local_rank, h.text, h.code) for h in d.hits],
        "timelines": [(tl.key, tl.events, tl.dropped) for tl in d.timelines],
        "lines": d.lines_read,
        "bytes": d.bytes_read,
        "problems": d.problems,
    }


def test_the_probes_blocks_are_the_readers_lines_joined(monkeypatch: pytest.MonkeyPatch) -> None:
    ns = _linescan()
    data = (b"a\r\nbb\n\n" + b"x" * 5000 + b"\nshort\n" + b"y" * 70 + b"\nend")
    for size in (1, 3, 7, 64, 100, 4096, 1 << 20):
        chunks = [data[i : i + size] for i in range(0, len(data), size)]
        want = [b"\n".join(lines) for lines in _chunk_lines(iter(chunks))]
        got = list(ns["chunk_blocks"](iter(chunks), 1 << 20, 8192))
        assert got == want, size
    # A line longer than the reader keeps: cut the same way (the reader's limits, small).
    chunks = [b"head\n" + b"z" * 40, b"z" * 40, b"z" * 40 + b"\nnext\n"]
    monkeypatch.setattr(scan, "LONG_LINE", 50)
    monkeypatch.setattr(scan, "MAX_LINE", 10)
    want = [b"\n".join(lines) for lines in _chunk_lines(iter(chunks))]
    assert list(ns["chunk_blocks"](iter(chunks), 50, 10)) == want


def test_a_hit_beyond_the_first_max_line_bytes_of_its_line_is_no_hit() -> None:
    import re

    ns = _linescan()
    pat = re.compile(rb"NCCL WARN")
    block = b"ok\n" + b"x" * 20 + b"NCCL WARN\n" + b"x" * 2 + b"NCCL WARN\nNCCL WARN"
    pats = {"exact": pat, "folded": None, "plain_exact": pat, "plain_folded": None,
            "digits_exact": None, "digits_folded": None}
    got = ns["hit_lines"](block, pats, 20)
    assert got == [(2, block.index(b"\nxxNCCL") + 1), (3, len(block) - 9)]


@pytest.mark.parametrize("chunk", [(1 << 20, 64 * 1024), (1500, 700)], ids=["real", "tiny"])
def test_every_captured_log_diagnoses_the_same_filtered_on_a_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: tuple[int, int]
) -> None:
    assert len(LOGS) >= 30, LOGS
    size, sniff = chunk
    monkeypatch.setattr(reader, "CHUNK", size)
    monkeypatch.setattr(reader, "SNIFF", sniff)
    flt = {**node_filter(), "chunk": size, "sniff": sniff}
    gz = tmp_path / "watchdog.log.gz"  # a compressed log is read from its start, both ways
    gz.write_bytes(gzip.compress((FIXTURES / "job/watchdog-timeout.log").read_bytes()))
    latin = tmp_path / "latin1.log"  # read as Latin-1 both ways (>2% of the head not UTF-8)
    latin.write_bytes(b"".join(b"\xe9t\xe9 \xe0 \xe7a " + line for line in
                               (FIXTURES / "logs/port_reject.log").read_bytes().splitlines(True)))
    logs = [*LOGS, gz, latin]
    recs = _probe(logs, flt)
    by_path: dict[str, list[dict[str, Any]]] = {}
    for rec in recs:
        by_path.setdefault(str(rec.get("path")), []).append(rec)
    for log in logs:
        here = diagnose_paths([str(log)])
        there = _spooled(by_path[str(log)], [log], tmp_path)
        assert _seen(there) == _seen(here), log
    # All of them at once: the time-ordered merge of many files is the same too.
    assert _seen(_spooled(recs, logs, tmp_path)) == _seen(diagnose_paths([str(p) for p in logs]))


@pytest.mark.parametrize("every", [False, True], ids=["filtered", "every-line"])
def test_a_long_healthy_log_with_a_failure_inside_sends_a_few_kilobytes(tmp_path: Path, every: bool) -> None:
    """4 MB of a healthy run's steady lines (the captured healthy loop's lines that hold
    no trigger, over and over) around a real failure: the node sends the failure's lines and the lines
    above them, the diagnosis and the counts are the whole file's.  With a prefilter
    that must see every line (a signature without a trigger), every line is sent, in
    pieces of 256 KiB joined back into the reader's 1 MiB chunks: the same diagnosis."""
    from ddptui.logs.prefilter import default_prefilter

    lines = (FIXTURES / "gpu-h100/job-hang/healthy-loop.log").read_text().splitlines()
    steady = [x for x in lines if x.strip() and not default_prefilter().hit(x.encode())][-40:]
    body = "\n".join(steady) + "\n"
    failing = (FIXTURES / "gpu-h100/nccl-env/async_err.log").read_text()
    log = tmp_path / "big.log"
    # torch's bare "Last error:" line takes the next line with it, whatever that says.
    pair = "[rank3]: Last error:\n[rank3]: the frobnicator on port 4 is unavailable\n"
    half = body * (1_000_000 // len(body))
    log.write_text(half + pair + half + failing + half + half)
    recs = _probe([log], {**node_filter(), "all": every})
    sent = sum(len(r["text"]) for r in recs if r["kind"] == "seg")
    here, there = diagnose_paths([str(log)]), _spooled(recs, [log], tmp_path)
    assert _seen(there) == _seen(here)
    assert here.first is not None and here.lines_read > 30_000
    if every:
        assert sent >= log.stat().st_size - here.lines_read
        assert any(r.get("more") for r in recs)
    else:
        assert sent < len(failing) + 64 * 1024, sent


def test_a_last_error_line_ending_a_chunk_takes_the_next_chunks_first_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's bare "Last error:" line and its cause, the cause ending a chunk and the
    next chunk starting with a failure: the node sends the cause with the next chunk's
    lines, so the login node joins the pair and still sees the failure."""
    monkeypatch.setattr(reader, "CHUNK", 256)
    monkeypatch.setattr(reader, "SNIFF", 64)
    pair = b"[rank3]: Last error:\n[rank3]: the frobnicator on port 4 is unavailable\n"
    filler = b"[rank3]: step 7 loss 0.25\n" * 8
    pad = 64 + 256 - len(pair) - len(filler)
    body = filler + b"[rank3]: " + b"x" * (pad - 10) + b"\n" + pair
    assert len(body) == 64 + 256  # the cause's line end is the chunk's last byte
    log = tmp_path / "r.log"
    log.write_bytes(body + b"[rank3]: RuntimeError: No CUDA GPUs are available\n" + filler)
    recs = _probe([log], {**node_filter(), "chunk": 256, "sniff": 64})
    here, there = diagnose_paths([str(log)]), _spooled(recs, [log], tmp_path)
    assert _seen(there) == _seen(here)
    assert here.first is not None and here.first.id == "ENV-NOGPU-VISIBLE"


def test_a_trigger_with_digits_is_found_in_each_line_whatever_came_before() -> None:
    """Both readers keep one verdict per line with its digits made 0; a trigger that
    holds digits (a progress bar's "[00:00<?", NCCL's "via P2P") is looked for in each
    line whose key may hold it: "[00:05<?" first does not hide "[00:00<?" after it."""
    import re

    from ddptui.logs.prefilter import default_prefilter
    from ddptui.logs.scan import from_chunks

    pf = default_prefilter()
    assert [t for t in pf.exact.by_trigger if any(c.isdigit() for c in t)]  # there are some
    lines = [b"epoch 3 [00:05<?, ?it/s]", b"epoch 3 [00:00<?, ?it/s]", b"epoch 3 [00:07<?, ?it/s]",
             b"0: 1[0] via P3P/IPC", b"0: 1[0] via P2P/IPC", b"step 12 loss 3"]
    want = [i + 1 for i, line in enumerate(lines) if pf.hit(line)]
    assert want == [2, 5]
    got = [c.lineno for c in from_chunks([b"\n".join(lines) + b"\n"], "s") if not c.end]
    assert got == want
    flt = node_filter()
    pats = {k: re.compile(v.encode()) if isinstance(v, str) else None for k, v in flt.items()
            if k in ("exact", "folded", "plain_exact", "plain_folded", "digits_exact", "digits_folded")}
    hits = _linescan()["hit_lines"](b"\n".join(lines), pats, 8192)
    assert [i + 1 for i, _ in hits] == want


def test_a_log_that_stops_in_a_rendezvous_after_a_long_run_says_so_both_ways(tmp_path: Path) -> None:
    """A step started among a file's last 12 lines and never finished (the stall rules)
    needs where the file ends: the node says its last line's number, though it sends
    none of the lines after the start."""
    from ddptui.logs.prefilter import default_prefilter

    lines = (FIXTURES / "gpu-h100/job-hang/healthy-loop.log").read_text().splitlines()
    steady = "\n".join(x for x in lines if x.strip() and not default_prefilter().hit(x.encode()))
    start = ("[2026-11-25 10:00:00,000] torch.distributed.elastic.agent.server.api: [INFO] "
             "[default] Rendezvous'ing worker group\n")
    log = tmp_path / "r.log"
    for after in (3, 30):  # within the last 12 lines, and not
        log.write_text(steady + "\n" + start + "\n".join(["[rank0]: waiting"] * after) + "\n")
        recs = _probe([log], node_filter())
        here, there = diagnose_paths([str(log)]), _spooled(recs, [log], tmp_path)
        assert _seen(there) == _seen(here)
        stalled = [f.id for f in here.findings if "rendezvous" in f.summary.lower()]
        assert bool(stalled) == (after == 3), (after, [(f.id, f.summary) for f in here.findings])
