"""The job view's parsers on the real H100 captures (tests/fixtures/job/, copied from
the shared reference): py-spy dumps, torch's flight recorder (pickle and JSON), NCCL RAS
answers (text and JSON), torch's watchdog log. No torch, no GPU needed."""

from __future__ import annotations

import base64
import json
import os
import pickle
from pathlib import Path

import pytest

from ddptui.job.flight import PlainUnpickler, UnsafeDump, analyse, load_dump, parse_dump
from ddptui.job.joblogs import exits, root_causes
from ddptui.job.model import LogFile, NodeView
from ddptui.job.ras import parse_ras, split_capture
from ddptui.job.readings import flight_findings
from ddptui.job.side import read_fr_records
from ddptui.job.stacks import (
    Place,
    group_ranks,
    place_of,
    rank_ranges,
    stack_key,
)
from ddptui.job.stacks import (
    parse_dump as parse_pyspy,
)

FIX = Path(__file__).parent / "fixtures" / "job"


def test_pyspy_dump_of_the_stuck_nccl_rank_waits_at_the_sync_point() -> None:
    dump = parse_pyspy((FIX / "py-spy-dump-stuck-rank.txt").read_text())
    assert dump.pid == 1863 and dump.command.endswith("hang.py")
    place = place_of(dump.main)
    assert (place.kind, place.op) == ("sync", "synchronize")
    assert place.where == "hang.py:13 in <module>"


def test_native_frames_do_not_change_the_python_stack() -> None:
    native = parse_pyspy((FIX / "py-spy-dump-native-stuck-rank.txt").read_text())
    plain = parse_pyspy((FIX / "py-spy-dump-stuck-rank.txt").read_text())
    assert native.main is not None and len(native.main.frames) == 17
    assert any(f.native and f.func == "cuCtxSynchronize_v2" for f in native.main.frames)
    assert stack_key(native.main) == stack_key(plain.main)
    assert place_of(native.main) == place_of(plain.main)


def test_healthy_rank_is_inside_all_reduce() -> None:
    dump = parse_pyspy((FIX / "py-spy-dump-healthy-rank.txt").read_text())
    place = place_of(dump.main)
    assert (place.kind, place.op, place.where) == (
        "collective",
        "all_reduce",
        "loop.py:7 in <module>",
    )


def test_groups_name_the_odd_rank_and_the_waiters() -> None:
    wait = parse_pyspy((FIX / "py-spy-dump-healthy-rank.txt").read_text()).main
    odd = parse_pyspy(
        'Thread 7 (idle): "MainThread"\n    evaluate (train.py:88)\n    <module> (train.py:40)\n'
    ).main
    places = {r: (place_of(wait), stack_key(wait)) for r in (0, 1, 3, 4, 5, 6, 7)}
    places[2] = (place_of(odd), stack_key(odd))
    groups = group_ranks(places)
    from ddptui.job.stacks import describe_groups

    text = describe_groups(groups, {r: f"node{r}" for r in range(8)})
    assert text.startswith("rank 2 (node2) is in `evaluate` at `train.py:88`; ranks 0-1, 3-7")
    assert "wait in `all_reduce` at `loop.py:7`" in text
    assert [g.odd for g in groups] == [False, True]


def test_rank_ranges() -> None:
    assert rank_ranges([0, 1, 3, 4, 5, 6, 7]) == "0-1, 3-7"
    assert rank_ranges([2]) == "2"
    assert rank_ranges([]) == ""


def test_place_without_python_frames() -> None:
    assert place_of(None) == Place("none", None, None, None)


@pytest.mark.parametrize("name", ["flight-recorder-rank_0.pickle", "flight-recorder-rank_0.json"])
def test_flight_recorder_dump_says_seq_4_timed_out_after_3(name: str) -> None:
    dump = parse_dump(0, load_dump((FIX / name).read_bytes()))
    assert dump.version == "2.10" and len(dump.entries) == 4
    (stop,) = analyse([dump])
    assert (stop.seq, stop.last_completed, stop.op, stop.state) == (4, 3, "all_reduce", "scheduled")
    assert stop.where == "hang.py:12 in <module>"
    assert stop.frames == (
        "distributed_c10d.py:3068 in all_reduce",
        "c10d_logger.py:83 in wrapper",
        "hang.py:12 in <module>",
    )
    assert stop.sizes == "[[1048576]]"


def test_pickle_and_json_dumps_read_the_same() -> None:
    a = load_dump((FIX / "flight-recorder-rank_0.pickle").read_bytes())
    b = load_dump((FIX / "flight-recorder-rank_0.json").read_bytes())
    assert json.loads(json.dumps(a)) == b  # the pickle holds tuples where JSON has lists


class _Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("touch pwned-by-pickle",))


def test_a_malicious_pickle_is_refused_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    data = pickle.dumps({"version": "2.10", "entries": [_Evil()]})
    with pytest.raises(UnsafeDump, match=r"refused to load .*system"):
        load_dump(data)
    assert not (tmp_path / "pwned-by-pickle").exists()
    # The same bytes through the findings path: a finding, not code run, not a crash.
    view = NodeView(
        "node0",
        fr=(
            {
                "rank": 0,
                "path": "/x/rank_0",
                "found": True,
                "data_b64": base64.b64encode(data).decode(),
            },
        ),
    )
    dumps, bad = read_fr_records([view])
    assert dumps == [] and [f.id for f in bad] == ["JOB-FR-UNREADABLE"]
    assert not (tmp_path / "pwned-by-pickle").exists()


def test_plain_unpickler_refuses_any_global() -> None:
    import io

    with pytest.raises(UnsafeDump):
        PlainUnpickler(io.BytesIO(pickle.dumps(Path("x")))).load()


def test_not_a_dump() -> None:
    with pytest.raises(UnsafeDump):
        load_dump(b"\x80\x04garbage")
    with pytest.raises(UnsafeDump):
        load_dump(b'{"no": "entries"}')


def test_flight_findings_carry_seq_last_and_frames() -> None:
    dump = parse_dump(0, load_dump((FIX / "flight-recorder-rank_0.pickle").read_bytes()))
    (f,) = flight_findings([dump], ["node0"])
    assert f.id == "JOB-FR-TIMEOUT" and f.severity == "error"
    assert "collective #4 (all_reduce) scheduled, last completed #3" in f.summary
    assert f.where == "hang.py:12 in <module>" and f.rank == 0
    assert "hang.py:12 in <module>" in f.evidence[0]
    assert "#4" in f.cause and "#3" in f.cause


def test_two_ranks_part_ways_in_the_flight_recorder() -> None:
    doc = load_dump((FIX / "flight-recorder-rank_0.json").read_bytes())
    r0 = parse_dump(0, doc)
    other = dict(doc)
    other["entries"] = [dict(e) for e in doc["entries"]]
    other["entries"][3] = dict(other["entries"][3], profiling_name="nccl:all_gather")
    r1 = parse_dump(1, other)
    (stop,) = analyse([r0, r1])
    assert stop.seq == 4 and len(stop.diverged) == 2
    (f,) = flight_findings([r0, r1], ["node0", "node1"])
    assert f.id == "JOB-FR-DIVERGED" and "all_gather" in f.cause
    # A rank that never enqueued #4 is named missing.
    short = dict(doc, entries=doc["entries"][:3])
    (stop,) = analyse([r0, parse_dump(1, short)])
    assert stop.missing == (1,)


@pytest.mark.parametrize("name", ["nccl-ras-during-hang.txt", "nccl-ras-healthy-job.txt"])
def test_ras_text_and_json_answers(name: str) -> None:
    blocks = split_capture((FIX / name).read_text())
    assert len(blocks) == 3
    text, text2, js = (parse_ras(body) for _, body in blocks)
    assert text is not None and text.form == "text" and text.version == "2.28.9"
    assert [(c.name, c.status, c.missing) for c in text.comms] == [("group 0", "RUNNING", ())]
    assert text2 is not None and text2.comms == text.comms
    assert js is not None and js.form == "json" and js.comms[0].size == 1
    assert js.comms[0].name.startswith("0x")
    # The capture's counts read 0 although allreduces ran: kept, never read as progress.
    assert js.collective_counts is not None and js.collective_counts["AllReduce"] == 0
    assert text.problems == [] and js.problems == []


def test_ras_json_names_missing_ranks_and_errors() -> None:
    body = split_capture((FIX / "nccl-ras-during-hang.txt").read_text())[2][1]
    sick = (
        body.replace('"missing_ranks_count": 0', '"missing_ranks_count": 1')
        .replace('"missing_ranks": [\n\n      ]', '"missing_ranks": [3]')
        .replace('"async_error": 0', '"async_error": 5')
    )
    status = parse_ras(sick)
    assert status is not None
    assert any("misses rank(s) 3" in p for p in status.problems)
    assert any("async error 5" in p for p in status.problems)


def test_ras_garbage_is_none() -> None:
    assert parse_ras("") is None
    assert parse_ras("ERROR: unknown command\n") is None


def test_watchdog_log_root_cause_and_exit() -> None:
    lines = tuple((FIX / "watchdog-timeout.log").read_text().splitlines())
    log = LogFile("node0", "train.log", lines, (), None)
    (cause,) = root_causes(log)
    assert (cause.rank, cause.local_rank, cause.exitcode, cause.pid) == (0, 0, -6, 1863)
    assert cause.traceback and "SIGABRT" in cause.traceback
    # torchrun's own traceback (ChildFailedError) is the launcher, not a rank's exit.
    assert all(
        e.exc_type != "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"
        for e in exits(log, [0], {})
    )


def test_cli_reads_the_shared_dump_and_ras_answers_without_a_cluster(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "r.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddptui",
            "job",
            "--fr-dump",
            str(FIX / "flight-recorder-rank_0.pickle"),
            "--ras-reply",
            str(FIX / "nccl-ras-during-hang.txt"),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert "collective #4 (all_reduce) scheduled, last completed #3" in proc.stdout
    assert "hang.py:12 in <module>" in proc.stdout
    report = json.loads(out.read_text())
    ff = report["first_failure"]
    assert (ff["step"], ff["finding"], ff["where"], ff["rank"]) == (
        "job",
        "JOB-FR-TIMEOUT",
        "hang.py:12 in <module>",
        0,
    )
    ids = [f["id"] for f in report["steps"][0]["findings"]]
    assert ids == ["JOB-FR-TIMEOUT", "JOB-RAS-OK"]
    from ddptui.report.schema import load_report

    load_report(out)  # the same report document as `check`


def test_cli_refuses_a_file_that_is_no_ras_answer(tmp_path: Path) -> None:
    import subprocess
    import sys

    bad = tmp_path / "x.txt"
    bad.write_text("hello\n")
    proc = subprocess.run(
        [sys.executable, "-m", "ddptui", "job", "--ras-reply", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "not an NCCL RAS answer" in proc.stderr and "Traceback" not in proc.stderr


def test_job_core_imports_no_ui_no_ssh_no_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys, ddptui.job.run, ddptui.job.report, ddptui.job.offline; "
        "print('\\n'.join(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    heavy = {m for m in out.stdout.split() if m.split(".")[0] in ("textual", "asyncssh", "torch")}
    assert not heavy, sorted(heavy)[:5]


def test_a_collective_in_flight_within_its_timeout_is_not_a_hang() -> None:
    doc = load_dump((FIX / "flight-recorder-rank_0.json").read_bytes())
    created = doc["entries"][3]["time_created_ns"] / 1e9  # #4, timeout 30 s
    (f,) = flight_findings([parse_dump(0, doc, dumped_at=created + 5)], ["node0"])
    assert f.id == "JOB-FR-INFLIGHT" and f.severity == "info"
    assert "in flight for 5 s when dumped (timeout 30 s)" in f.summary
    (f,) = flight_findings([parse_dump(0, doc, dumped_at=created + 38)], ["node0"])
    assert f.id == "JOB-FR-TIMEOUT" and f.severity == "error"
