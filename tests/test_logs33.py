"""Round logs33 (issue 15): a log is never called clean while a line says a failure in
plain words.  Blind batches V-X called 20 of 68 failing logs clean; 15 of those 20 held a
program's own words for a failure no signature knew ("srun: Force Terminated job",
"Invalid access pattern", "PMI2_Init failed to initialize", "Timeout waiting for RPC from
GSP!").  Such lines (factrules.yaml failure_lines.plain) are read on each source's first
and last lines (logs/scan.py SPAN) and only when nothing else was found: then
LOGS-UNRECOGNIZED leads as a warning that quotes them, never a ✔."""

from __future__ import annotations

from pathlib import Path

import pytest
from corpus_excerpts import CORPUS, excerpt
from test_sharedfs_filter import _probe, _seen, _spooled

from ddptui.logs import reader
from ddptui.logs.diagnose import diagnose_lines
from ddptui.logs.inputs import diagnose_paths
from ddptui.logs.scan import SPAN, node_filter

PLAIN = "Lines that read like a failure"
# Real lines: an OpenRLHF user's Ray worker (OpenRLHF#265, corpus), a step's steady line
# from the H100 capture's healthy loop
RAY = CORPUS["o2-docker-bridge-addr-OpenRLHF-265"].lines
STEP = "[rank0]: step 120 loss 2.3418 lr 3.0e-04 tokens/s 1.21e+05"


def test_a_failing_log_with_only_plain_failure_words_is_no_clean_log() -> None:
    d = excerpt("o2-docker-bridge-addr-OpenRLHF-265")
    assert d.first is not None and d.first.id == "LOGS-UNRECOGNIZED"
    assert d.first.severity == "warning" and d.first.summary.startswith(PLAIN)
    assert any("has timed out after 1800s" in e for e in d.first.evidence)


@pytest.mark.parametrize(
    "line",
    [
        "Cannot allocate pinned buffer on device 3",
        "Unable to reserve GPU 3: In use by another client",
        "node gpu12: GPU 3 not responding, removing from pool",
        "Invalid access pattern",
    ],
)
def test_plain_words_lead_when_nothing_else_is_found(line: str) -> None:
    d = diagnose_lines([STEP, line, STEP])
    assert d.first is not None and d.first.id == "LOGS-UNRECOGNIZED", line
    assert d.first.severity in ("warning", "error")
    assert any(line in e for e in d.first.evidence)


@pytest.mark.parametrize(
    "line",
    [
        "[2024-01-02 10:00:00,000] [WARNING] [runner.py:215:fetch_hostfile] Unable to find hostfile",
        "node0:1:1 [0] NCCL INFO NET/Plugin: Failed to find ncclNetPlugin_v8 symbol.",
        "#       size         count      type   redop     time   algbw   busbw  error",
        ">> Train Epoch: [0] eta: 7:57:37 loss: 17.7 Top1 error: 100.0000 Top5 error: 100.0",
        "  rdzv_configs     : {'rank': 1, 'timeout': 900}",
        "UserWarning: could not find the metadata file latest_checkpointed_iteration.txt",
        "[rank3]: Last error:",
        # a node health check's verdict (azurehpc-health-checks, blind batch Z)
        "SUCCESS:  nhc:  Health check passed:  check_gpu_xid:  GPU XID error check passed.",
    ],
)
def test_healthy_noise_with_failure_words_stays_clean(line: str) -> None:
    d = diagnose_lines([STEP, line, STEP])
    assert d.first is None, (line, d.first)


def test_no_healthy_corpus_excerpt_reads_as_a_plain_failure() -> None:
    healthy = [e for e in CORPUS.values() if not e.expected]
    assert len(healthy) >= 200
    said = [e.id for e in healthy if (d := excerpt(e.id)).first is not None
            and d.first.summary.startswith(PLAIN)]
    assert said == []


def test_a_known_cause_hides_the_plain_words() -> None:
    d = diagnose_lines(["node gpu12: GPU 3 not responding", "Bootstrap : no socket interface found"])
    assert d.first is not None and d.first.id == "BOOT-NOIF"
    assert all(not f.summary.startswith(PLAIN) for f in d.findings)


def _log(tmp_path: Path, at: int, n: int = 5 * SPAN) -> Path:
    lines = [STEP] * n
    lines[at] = "node gpu12: GPU 3 not responding, removing from pool"
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("at", [3, 5 * SPAN - 2])
def test_a_files_first_and_last_lines_are_read(tmp_path: Path, at: int) -> None:
    d = diagnose_paths([str(_log(tmp_path, at))])
    assert d.first is not None and d.first.id == "LOGS-UNRECOGNIZED"
    assert any(f"train.log:{at + 1}:" in e for e in d.first.evidence)


def test_the_middle_of_a_long_log_is_not_read_for_words(tmp_path: Path) -> None:
    """Bounded: a 1 GB log keeps 2 x SPAN lines for this, not its every line."""
    assert diagnose_paths([str(_log(tmp_path, 2 * SPAN))]).first is None


@pytest.mark.parametrize("chunk", [(1 << 20, 64 * 1024), (300, 200)], ids=["real", "tiny"])
@pytest.mark.parametrize("at", [3, 2 * SPAN, 5 * SPAN - 2])
def test_a_node_sends_the_first_and_last_lines_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: tuple[int, int], at: int
) -> None:
    """Read on a node (the logread probe, filtered), the diagnosis is the whole file's."""
    size, sniff = chunk
    monkeypatch.setattr(reader, "CHUNK", size)
    monkeypatch.setattr(reader, "SNIFF", sniff)
    log = _log(tmp_path, at)
    recs = _probe([log], {**node_filter(), "chunk": size, "sniff": sniff})
    here, there = diagnose_paths([str(log)]), _spooled(recs, [log], tmp_path)
    assert _seen(there) == _seen(here)
    assert (here.first is None) == (at == 2 * SPAN)


def test_a_line_wrapped_at_the_terminals_width_is_sent_whole_by_a_node(tmp_path: Path) -> None:
    """logs31's rejoin of a message cut at a terminal's width (its second half in lower
    case) needs the line after the cut one: the node now sends it."""
    log = tmp_path / "w.log"
    body = [STEP] * (3 * SPAN)
    body[SPAN + 10 : SPAN + 12] = [
        "[rank1]: torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. ",
        "1/2 clients joined.",
    ]
    log.write_text("\n".join(body) + "\n")
    recs = _probe([log], node_filter())
    here, there = diagnose_paths([str(log)]), _spooled(recs, [log], tmp_path)
    assert _seen(there) == _seen(here)
    assert here.first is not None
    assert any("1/2 clients joined" in e for f in here.findings for e in f.evidence)
