"""The logs package: timestamps and ranks, the prefilter, merging, odd inputs."""

from __future__ import annotations

import gzip
import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddptui.cli import main
from ddptui.diagnosis.signatures import load_signatures
from ddptui.logs.diagnose import diagnose_lines
from ddptui.logs.inputs import diagnose_paths
from ddptui.logs.lineinfo import parse_head
from ddptui.logs.prefilter import default_prefilter
from ddptui.logs.scan import from_chunks, from_lines

GPU = Path(__file__).parent / "fixtures" / "gpu-h100"
NOIF = "[2026-11-23 07:38:35] vm:846:846 [0] bootstrap.cc:114 NCCL WARN Bootstrap : no socket interface found"
ORDINAL = "RuntimeError: CUDA error: invalid device ordinal"


def utc(*args: int) -> float:
    return datetime(*args, tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize(
    ("line", "t", "rank", "local", "pid"),
    [
        (NOIF, utc(2026, 11, 23, 7, 38, 35), None, None, 846),
        ("vm:846:846 [0] NCCL INFO NET/IB : No device found.", None, None, None, 846),
        (
            "[I1123 07:38:31.551532465 TCPStore.cpp:271] [c10d - debug] The server has started",
            utc(2026, 11, 23, 7, 38, 31) + 0.551532465, None, None, None,
        ),
        (
            "E1123 07:38:35.816000 821 torch/distributed/elastic/multiprocessing/api.py:986] failed",
            utc(2026, 11, 23, 7, 38, 35) + 0.816, None, None, None,
        ),
        (
            "[2026-11-23 08:06:32,981] torch.distributed.run: [WARNING] Setting OMP_NUM_THREADS",
            utc(2026, 11, 23, 8, 6, 32) + 0.981, None, None, None,
        ),
        ("2026-11-23 08:06:32,981 - INFO - step 3", utc(2026, 11, 23, 8, 6, 32) + 0.981, None, None, None),
        ("2026-11-23T09:06:32.5+01:00 step 3", utc(2026, 11, 23, 8, 6, 32) + 0.5, None, None, None),
        (
            "[rank3]:[E1123 08:06:32.986987310 ProcessGroupNCCL.cpp:689] [Rank 3] Watchdog",
            utc(2026, 11, 23, 8, 6, 32) + 0.98698731, 3, None, None,
        ),
        ("[default1]:[rank5]: Traceback (most recent call last):", None, 5, 1, None),
        ("[r2] vm:9:9 [0] NCCL INFO Init", None, 2, None, 9),
        ("[l1] hello", None, None, 1, None),
        ("[c10d] The hostname of the client socket cannot be retrieved", None, None, None, None),
    ],
)
def test_line_heads(line: str, t: float | None, rank: int | None, local: int | None, pid: int | None) -> None:
    head, _ = parse_head(line, 2026)
    assert (head.rank, head.local_rank, head.pid) == (rank, local, pid)
    if t is None:
        assert head.t is None
    else:
        assert head.t == pytest.approx(t, abs=1e-6)


def test_prefilter_lets_every_signature_sample_through_even_with_other_digits() -> None:
    pf = default_prefilter()
    to_zero = bytes.maketrans(b"123456789", b"000000000")
    for sig in load_signatures():  # signatures added later are covered too
        cands = pf.candidates(sig.sample)
        assert cands and sig in cands, sig.id
        assert pf.hit(sig.sample.encode()), sig.id
        assert pf.hit(sig.sample.encode().translate(to_zero)), sig.id  # the cache key's verdict


def test_every_signature_has_a_trigger() -> None:
    # A regex the prefilter derives no needle from is "unfiltered": every line of every
    # log then becomes a candidate (a 1 GB log read line by line in Python), and lines a
    # terminal wrapped are held and joined differently (round 13: an alternation with a
    # three-letter literal turned two right answers of the corpus into unknowns).
    assert [s.id for s in default_prefilter().unfiltered] == []


def test_prefilter_skips_healthy_lines() -> None:
    pf = default_prefilter()
    lines = (GPU / "raw-torchrun/healthy-1gpu.log").read_bytes().splitlines()
    hits = [ln for ln in lines if pf.hit(ln)]
    # An init log: most of its lines are skipped.  The lines ranks state facts in (NCCL's
    # version, bootstrap and NET interfaces, torch's process-group options: 8 of these 169)
    # are read too; they are printed once per rank, never per step (gpu8: so is NCCL's
    # "- Abort START" at exit, once per communicator: 34 of 169 lines; gpu11: torch's
    # "destroy_process_group() was not called before program exit", once per rank: 36).
    assert len(hits) < len(lines) * 0.22, hits[:5]


def test_case_insensitive_signature_is_not_lost_by_the_prefilter() -> None:
    d = diagnose_lines(["RuntimeError: CUDA error: Invalid Device Ordinal"])
    assert d.first is not None and d.first.id == "ENV-ORDINAL"


def test_chunk_and_line_feeds_agree_at_any_chunk_boundary() -> None:
    data = (GPU / "raw-torchrun/ifname-ib9-missing.log").read_bytes()
    want = [(c.lineno, c.text) for c in from_lines(data.decode().splitlines(), "x")]
    for size in (1, 7, 100, 4096, len(data)):
        chunks = [data[i : i + size] for i in range(0, len(data), size)]
        got = [(c.lineno, c.text) for c in from_chunks(chunks, "x")]
        assert got == want, size
    assert (60, "Last error: Bootstrap : no socket interface found") in want


def test_last_error_at_the_very_end_and_with_a_rank_prefix() -> None:
    d = diagnose_lines(
        ["[rank2]: ncclInvalidUsage: bad", "[rank2]: Last error:", "[rank2]: Bootstrap : no socket interface found"]
    )
    assert d.first is not None and d.first.id == "BOOT-NOIF"
    assert d.first.rank == 2
    assert any("[rank2]: Last error: Bootstrap : no socket" in e for e in d.first.evidence)
    alone = diagnose_lines(["Last error:"])
    assert alone.first is None


def test_specific_cause_wins_over_generic_wrappers_even_when_later() -> None:
    lines = [
        "[I1123 07:00:00.000000 x.cpp:1] start",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "[I1123 07:00:01.000000 x.cpp:1] later",
        ORDINAL,
    ]
    d = diagnose_lines(lines)
    assert d.first is not None and d.first.id == "ENV-ORDINAL"


def test_files_merge_in_time_order(tmp_path: Path) -> None:
    # rank 1's failure happened first, though its file is given second.
    a = tmp_path / "rank0.log"
    b = tmp_path / "rank1.log"
    a.write_text(
        "[I1123 08:00:00.000000 x.cpp:1] start\n"
        "[rank0]:[E1123 08:00:09.000000 x.cpp:1] ncclInvalidUsage: whatever\n"
        "[rank0]: " + ORDINAL + "\n"
    )
    b.write_text(
        "[I1123 08:00:00.500000 x.cpp:1] start\n"
        "[2026-11-23 08:00:05] node1:77:77 [0] bootstrap.cc:114 NCCL WARN Bootstrap : no socket interface found\n"
    )
    d = diagnose_paths([str(a), str(b)])
    assert d.first is not None and d.first.id == "BOOT-NOIF"
    assert d.hits[0].source == str(b)
    keys = [tl.key for tl in d.timelines]
    assert keys[0] == "rank 0"


def test_gzip_latin1_utf16_and_crlf_inputs(tmp_path: Path) -> None:
    gz = tmp_path / "a.log.gz"
    gz.write_bytes(gzip.compress((NOIF + "\n").encode()))
    latin = tmp_path / "b.log"
    latin.write_bytes(("Grüße \xe9\xe8 " * 50 + "\n").encode("latin-1") + (ORDINAL + "\r\n").encode())
    u16 = tmp_path / "c.log"
    u16.write_text(ORDINAL + "\n", encoding="utf-16")
    for path, want in ((gz, "BOOT-NOIF"), (latin, "ENV-ORDINAL"), (u16, "ENV-ORDINAL")):
        d = diagnose_paths([str(path)])
        assert not d.problems, d.problems
        assert d.first is not None and d.first.id == want, path


def test_bad_inputs_get_a_clear_message_and_exit_2(tmp_path: Path) -> None:
    binary = tmp_path / "core"
    binary.write_bytes(bytes(range(256)) * 100)
    secret = tmp_path / "secret.log"
    secret.write_text(ORDINAL + "\n")
    secret.chmod(0)
    broken = tmp_path / "broken.log.gz"
    broken.write_bytes(gzip.compress(b"x\n" * 100000)[:200])
    good = tmp_path / "good.log"
    good.write_text(ORDINAL + "\n")
    args = ["diagnose", str(binary), str(tmp_path / "missing.log"), str(tmp_path), str(broken), str(good)]
    if os.geteuid() != 0:  # root reads mode-0 files
        args.insert(2, str(secret))
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    err = result.stderr
    assert f"{binary}: binary data, not a text log" in err
    assert f"{tmp_path / 'missing.log'}: no such file" in err
    assert f"{tmp_path}: is a directory" in err
    assert str(broken) in err
    assert "Traceback" not in result.output
    assert "First cause: ENV-ORDINAL" in result.stdout  # the readable input is still diagnosed


def test_usage_errors() -> None:
    r = CliRunner().invoke(main, ["diagnose"])
    assert r.exit_code == 2
    r = CliRunner().invoke(main, ["diagnose", "node0:/var/log/*.log"])
    assert r.exit_code == 2 and "--config" in r.stderr
    r = CliRunner().invoke(main, ["diagnose", str(GPU / "nccl-env/net_ib.log"), "--json", "-", "--markdown", "-"])
    assert r.exit_code == 2


def test_reports_to_stdout_keep_human_output_on_stderr(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["diagnose", str(GPU / "nccl-env/cvd_missing.log"), "--json", "-"])
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert doc["steps"][0]["id"] == "logs"
    assert "First cause: ENV-NOGPU-VISIBLE" in r.stderr
    html = tmp_path / "r.html"
    r = CliRunner().invoke(main, ["diagnose", str(GPU / "nccl-env/cvd_missing.log"), "--html", str(html)])
    assert r.exit_code == 1
    assert "ENV-NOGPU-VISIBLE" in html.read_text()


def test_memory_stays_bounded_on_a_long_repetitive_failure() -> None:
    lines = (f"[rank{i % 64}]: {ORDINAL}" for i in range(40_000))
    d = diagnose_lines(lines)
    assert d.first is not None and d.first.id == "ENV-ORDINAL"
    assert len(d.hits) <= 5  # evidence kept per id is bounded
    assert sum(len(tl.events) for tl in d.timelines) <= 64 * 20
    assert "40000 lines" in d.first.summary


def test_a_line_without_end_costs_bounded_memory() -> None:
    noise = b"x" * (1 << 20)
    chunks = [noise] * 40 + [b"\n" + (ORDINAL + "\n").encode()]  # a 40 MiB line, then a cause
    got = list(from_chunks(iter(chunks), "big"))
    assert [(c.lineno, c.end) for c in got] == [(2, False), (2, True)]  # the line, then the end
    assert got[0].text == ORDINAL


def test_core_log_modules_import_no_ui_and_no_ssh() -> None:
    import subprocess
    import sys

    code = (
        "import sys, ddptui.logs.inputs, ddptui.logs.session, ddptui.logs.render, "
        "ddptui.logs.remote; print('\\n'.join(sys.modules))"
    )
    mods = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert not {m for m in mods.stdout.split() if m.split(".")[0] in ("textual", "asyncssh", "torch")}
