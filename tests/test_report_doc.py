"""The report document (docs/report-format.md), autosave, `ddptui report`, `schema --report`
and `replay`'s input checks: what a user gets from a saved session."""

from __future__ import annotations

import itertools
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ddptui.diagnosis.logstore import LogStore
from ddptui.metrics import HISTORY_MAX, MetricsModel
from ddptui.report.autosave import Autosaver, sessions_dir
from ddptui.report.export import render
from ddptui.report.json_report import log_excerpts, tables
from ddptui.report.schema import ReportError, ReportModel, load_report

REPORTS = Path(__file__).parent / "fixtures" / "reports"
SESSIONS = sorted(REPORTS.glob("session_*.json"))


def ddptui(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ddptui", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def sample(i: int, t: float, util: float = 10.0) -> dict[str, Any]:
    return {
        "kind": "sample",
        "t": t,
        "cpu_pct": float(i % 100),
        "mem_used": 1 << 30,
        "mem_total": 1 << 34,
        "gpus": [{"index": 0, "util_pct": util, "mem_used": 1, "mem_total": 2}],
        "nics": {"eth0": {"rx_Bps": 100.0 * i, "tx_Bps": 50.0}},
        "ib": {},
    }


# -- the document ---------------------------------------------------------------------


@pytest.mark.parametrize("path", SESSIONS, ids=lambda p: p.stem)
def test_recorded_sessions_are_complete_reports(path: Path) -> None:
    report = load_report(path)
    ReportModel.model_validate(report)
    for key in ("schema_version", "timings", "versions", "tables", "logs", "metrics"):
        assert key in report, key
    names = [n["name"] for n in report["nodes"]]
    assert report["steps"][0]["id"] == "ssh"
    assert set(report["metrics"]["nodes"]) == set(names)
    assert report["timings"]["total_s"] >= sum(report["timings"]["steps"].values()) * 0.9


def test_skew_table_marks_the_odd_node() -> None:
    steps = [
        {
            "id": "inventory",
            "data": {
                "skew": {
                    "torch": {"n2": "2.3.0", "n0": "2.4.0", "n1": "2.4.0"},
                    "python": {"n0": "3.11", "n1": "3.11", "n2": "3.11"},
                    "nccl": {"n0": "2.20", "n1": "2.21"},
                }
            },
        },
        {"id": "env", "data": {"diff": {"NCCL_IB_HCA": {"n0": "mlx5_0", "n2": "mlx5_1"}}}},
    ]
    t = tables(steps, ["n0", "n1", "n2"])
    rows = {r["fact"]: r for r in t["skew"]}
    assert list(rows["torch"]["values"]) == ["n0", "n1", "n2"]  # node order, not dict order
    assert rows["torch"]["odd"] == ["n2"]
    assert rows["python"]["odd"] == []
    assert rows["nccl"]["odd"] == ["n0", "n1"]  # a tie: no majority to trust
    assert t["env_diff"] == [
        {"name": "NCCL_IB_HCA", "values": {"n0": "mlx5_0", "n1": None, "n2": "mlx5_1"}}
    ]
    assert t["allreduce"] is None


def test_allreduce_table_marks_stragglers_and_the_slowest() -> None:
    rows = [
        {"rank": r, "node": f"n{r}", "bytes": 1 << 20, "busbw_gbps": bw, "algbw_gbps": bw / 2}
        for r, bw in enumerate((10.0, 9.0, 2.0, 11.0))
    ]
    steps = [{"id": "allreduce", "data": {"backend": "nccl", "world_size": 4, "bandwidth": rows}}]
    ranks = tables(steps, ["n0", "n1", "n2", "n3"])["allreduce"]["ranks"]
    assert [r["straggler"] for r in ranks] == [False, False, True, False]
    assert [r["slowest"] for r in ranks] == [False, False, True, False]


def test_log_excerpts_surround_the_quoted_line_and_stay_bounded() -> None:
    lines = [f"[r1] line {i}" for i in range(1000)]
    lines[500] = "[r1] NCCL WARN NET/Socket : peer 10.0.0.3 closed the connection"
    steps = [
        {
            "id": "allreduce",
            "findings": [
                {
                    "id": "NCCL-PEER-CLOSED",
                    "nodes": ["n1"],
                    "evidence": ["n1: NCCL WARN NET/Socket : peer 10.0.0.3 closed the connection"],
                }
            ],
        }
    ]
    store = LogStore(["n1", "n2"])
    for i in range(234):  # lines that fell out of the store before these
        store.append("n1", f"early {i}", rank=1)
    for text in lines:
        store.append("n1", text.removeprefix("[r1] "), rank=1)
    out = log_excerpts(steps, store)
    assert set(out) == {"n1"}  # a node without a log has no entry
    log = out["n1"]
    assert log["lines_total"] == 1234 and len(log["tail"]) == 300
    (ex,) = log["excerpts"]
    # Found by its quoted text (the finding cites no line id): line 735 of the node.
    assert ex["finding"] == "NCCL-PEER-CLOSED" and ex["first_line"] == 730
    assert "NCCL WARN" in ex["lines"][5] and len(ex["lines"]) == 11
    assert ex["marked"] == [5] and ex["ids"][5] == "n1#735"


def test_log_excerpts_mark_the_line_a_finding_cites_by_id() -> None:
    """Two identical lines: the one the finding cites (by id) is marked, not the first."""
    store = LogStore(["n1"])
    warn = "NCCL WARN NET/Socket : peer 10.0.0.3 closed the connection"
    for i in range(40):
        store.append("n1", warn if i in (3, 30) else f"line {i}", rank=0)
    cited = {"id": "X", "nodes": ["n1"], "evidence": [f"n1: {warn}"], "lines": ["n1#31"]}
    steps = [{"id": "allreduce", "findings": [cited]}]
    (ex,) = log_excerpts(steps, store)["n1"]["excerpts"]
    assert ex["ids"][ex["marked"][0]] == "n1#31" and ex["first_line"] == 26


def test_metrics_history_covers_the_whole_session_bounded() -> None:
    model = MetricsModel(["n0"])
    model.add("n0", {"kind": "hello", "gpus": 1, "interval": 1.0})
    for i in range(5000):  # 83 minutes at 1 Hz: far beyond the live 60 s window
        model.add("n0", sample(i, 1000.0 + i))
    doc = model.export(1.0)
    samples = doc["nodes"]["n0"]["samples"]
    assert len(samples) <= HISTORY_MAX
    assert samples[0]["t"] == 1000.0  # the start of the session is still there
    assert samples[-1]["t"] >= 1000.0 + 5000 - 20
    gaps = {round(b["t"] - a["t"]) for a, b in itertools.pairwise(samples)}
    assert len(gaps) <= 2  # evenly spaced
    # ...and it reads back for replay, the window spanning the whole timeline
    again = MetricsModel.from_export(json.loads(json.dumps(doc)), ["n0"])
    view = again.snapshot().node("n0")
    assert view is not None and view.hello is not None and view.hello.gpus == 1
    assert len(view.samples) == len(samples)
    spark = view.spark("gpu_util:0", 20)
    assert all(v == 10.0 for v in spark)


# -- autosave ---------------------------------------------------------------------------


def test_autosave_is_atomic_private_and_pruned(tmp_path: Path) -> None:
    d = tmp_path / "sessions"
    d.mkdir()
    for i in range(205):
        old = d / f"old-{i:03d}.json"
        old.write_text("{}")
        os.utime(old, (1_000_000 + i, 1_000_000 + i))
    saver = Autosaver("my cluster/x", d)
    assert saver.save({"a": 1}) and saver.save({"a": 2})
    assert json.loads(saver.path.read_text()) == {"a": 2}
    assert "my-cluster" in saver.path.name
    assert stat.S_IMODE(saver.path.stat().st_mode) == 0o600
    assert len(list(d.glob("*.json"))) == 200  # the oldest went
    assert not (d / "old-000.json").exists() and (d / "old-204.json").exists()
    assert not list(d.glob(".*.tmp"))


def test_autosave_failure_is_reported_not_raised(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    saver = Autosaver(None, blocker / "sessions")  # a directory under a file
    assert saver.save({}) is False
    assert saver.error is not None and str(blocker) in saver.error


def test_sessions_dir_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert sessions_dir() == tmp_path / "ddptui" / "sessions"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/ignored")  # the spec says: absolute only
    assert sessions_dir() == Path.home() / ".local" / "state" / "ddptui" / "sessions"


# -- ddptui report / schema --report / replay inputs ----------------------------------------


def test_report_command_regenerates_the_same_markdown_and_html(tmp_path: Path) -> None:
    path = REPORTS / "session_port_env.json"
    report = json.loads(path.read_text())
    out = ddptui("report", str(path))
    assert out.returncode == 0, out.stderr
    assert out.stdout == render(report, "markdown")  # no option: Markdown on stdout
    md, html = tmp_path / "r.md", tmp_path / "r.html"
    out = ddptui("report", str(path), "--markdown", str(md), "--html", str(html))
    assert out.returncode == 0, out.stderr
    assert md.read_text() == render(report, "markdown")
    assert html.read_text() == render(report, "html")
    assert "PORT-PAIR-TIMEOUT" in md.read_text()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "no such file"),
        ("{not json", "r.json:1:2: not JSON"),
        ('{"ddptui_version": "0.1.0", "nodes": []}', "steps: Field required"),
        (
            '{"ddptui_version": "0.1.0", "nodes": [], "steps": [{"id": "ssh", "status": "ok"}]}',
            "steps.0.status",
        ),
    ],
)
def test_bad_sessions_are_clear_errors(tmp_path: Path, content: str | None, expected: str) -> None:
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    for cmd in ("report", "replay"):
        out = ddptui(cmd, str(path))
        assert out.returncode == 2, (cmd, out.stdout, out.stderr)
        assert expected in out.stderr and "Traceback" not in out.stderr
    with pytest.raises(ReportError, match=r"not a ddptui report|no such file|not JSON"):
        load_report(path)


def test_report_to_an_unwritable_place_is_a_clear_error(tmp_path: Path) -> None:
    out = ddptui("report", str(REPORTS / "healthy.json"), "--html", str(tmp_path / "no/such.html"))
    assert out.returncode == 2
    assert "does not exist" in out.stderr and "--html" in out.stderr


def test_schema_report_describes_the_contract() -> None:
    out = ddptui("schema", "--report")
    assert out.returncode == 0
    schema = json.loads(out.stdout)
    assert {"ddptui_version", "nodes", "steps"} <= set(schema["required"])
    for key in ("first_failure", "tables", "logs", "metrics", "timings", "versions"):
        assert key in schema["properties"], key
    finding = schema["$defs"]["FindingModel"]
    assert finding["properties"]["severity"]["enum"] == ["error", "warning", "info"]


def test_replay_without_a_terminal_says_what_to_do() -> None:
    out = ddptui("replay", str(REPORTS / "session_healthy.json"))
    assert out.returncode == 2 and "ddptui report" in out.stderr


def test_check_refuses_an_unwritable_report_path_before_running(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("master: {addr: 10.0.0.1, port: 29500}\nnodes: [{host: local}]\n")
    out = ddptui("check", str(cfg), "--json", str(tmp_path / "missing" / "r.json"))
    assert out.returncode == 2
    assert "does not exist" in out.stderr and "ssh" not in out.stdout  # nothing ran


def test_background_saves_land_in_order_and_never_go_back(tmp_path: Path) -> None:
    saver = Autosaver("c", tmp_path)
    for i in range(30):
        saver.save_later({"step": i, "pad": "x" * 100_000})
    saver.flush(timeout=30)
    assert json.loads(saver.path.read_text())["step"] == 29
    saver.save({"step": "final"})
    saver._write({"step": "stale"}, 1)  # a save asked for long ago, arriving late
    assert json.loads(saver.path.read_text())["step"] == "final"


def test_metrics_budget_keeps_big_clusters_reports_small() -> None:
    from ddptui.report.json_report import metrics_per_node

    assert metrics_per_node(3) == 600
    assert metrics_per_node(32) == 187
    assert metrics_per_node(1000) == 60


def test_durations_read_back_exactly_as_shown_live() -> None:
    # 0.44951 s would show "0.4s" live but "0.5s" from a report rounded to ms: results
    # keep milliseconds themselves, so a replay shows what the live screen showed.
    from ddptui.diagnosis.model import NodeResult, StepResult
    from ddptui.report.load import results_from_report

    live = StepResult("ssh", "SSH", "pass", 0.44951, {"n0": NodeResult("pass", "ok", {}, 0.04951)})
    report = {"steps": [json.loads(json.dumps(live.to_dict()))]}
    again = results_from_report(report)["ssh"]
    assert f"{again.duration_s:.1f}" == f"{live.duration_s:.1f}"
    assert again.duration_s == live.duration_s == 0.45
    assert again.nodes["n0"].duration_s == live.nodes["n0"].duration_s == 0.05


def test_first_failure_carries_the_rank_and_place_of_its_finding() -> None:
    """CONTRACT.md 2026-11-23: a finding's rank and where reach first_failure, and both
    reports say them beside the node."""
    from ddptui.diagnosis.finding import Finding
    from ddptui.diagnosis.model import NodeResult, StepResult
    from ddptui.report.json_report import first_failure

    stuck = Finding(
        "JOB-HUNG-RANK", "error", ("node1",), "rank 2 is in `evaluate`", "c", "f",
        rank=2, where="train.py:88 in evaluate",
    )  # fmt: skip
    nodes = {"node1": NodeResult("fail", "stuck")}
    first = first_failure(
        {"allreduce": StepResult("allreduce", "AR", "fail", 1.0, nodes, (stuck,))}
    )
    assert first is not None
    assert (first.rank, first.where) == (2, "train.py:88 in evaluate")
    report = json.loads((REPORTS / "session_allreduce_hang.json").read_text())
    report["first_failure"] = first.to_dict()
    ReportModel.model_validate(report)
    assert "on **node1** (rank 2, at `train.py:88 in evaluate`):" in render(report, "markdown")
    assert "<b>node1</b> (rank 2, at <code>train.py:88 in evaluate</code>):" in render(
        report, "html"
    )
    plain = Finding("AR-HANG", "error", ("node1",), "s", "c", "f")
    first = first_failure(
        {"allreduce": StepResult("allreduce", "AR", "fail", 1.0, nodes, (plain,))}
    )
    assert first is not None and "rank" not in first.to_dict() and "where" not in first.to_dict()


# -- one report model: build, check, load ---------------------------------------------


def local_session(nodes: int = 3) -> Any:
    from ddptui.checklist.runner import Session
    from ddptui.config import parse_config

    text = "master: {addr: 127.0.0.1, port: 29500}\nnodes: [" + ", ".join(
        f"{{host: local, name: node{i}}}" for i in range(nodes)
    ) + "]\n"  # fmt: skip
    return Session(parse_config(text), "c.yaml")


def test_build_report_passes_the_model_and_replays_to_the_same_json() -> None:
    """A recorded session's steps, built into a report by build_report (which checks it
    against ReportModel) and read back by results_from_report (through StepModel),
    give the same JSON, key order included."""
    from ddptui.report.json_report import build_report
    from ddptui.report.load import results_from_report

    recorded = json.loads((REPORTS / "session_port_env.json").read_text())
    session = local_session()
    session.results.update(results_from_report(recorded))
    built = build_report(session).document()
    assert json.dumps(built["steps"]) == json.dumps(recorded["steps"])
    assert built["first_failure"] == recorded["first_failure"]
    again = results_from_report(json.loads(json.dumps(built)))
    assert json.dumps([r.to_dict() for r in again.values()]) == json.dumps(built["steps"])
    assert list(built) == [  # CONTRACT.md's keys, in the order they were always written
        "schema_version", "ddptui_version", "config", "cluster", "started_at", "finished_at",
        "nodes", "master", "steps", "first_failure", "verdict", "timings", "versions",
        "tables", "logs", "metrics", "exclude",  # exclude: CONTRACT 2026-11-25
    ]  # fmt: skip


@pytest.mark.parametrize(
    "path",
    [
        REPORTS / "session_port_env.json",
        REPORTS / "session_allreduce_hang.json",
        REPORTS / "healthy.json",
        REPORTS.parent / "job" / "report-hung-3nodes.json",
        REPORTS.parent / "gpu-h100" / "check-2nodes-1gpu.json",
    ],
    ids=lambda p: p.name,
)
def test_the_report_model_writes_a_report_byte_for_byte(path: Path) -> None:
    """build_report, the job report and the logs report return the report model: its
    document() is the JSON ddptui always wrote (same keys, same order, numbers as they
    were measured), here for reports check, job and a session wrote."""
    data = json.loads(path.read_text())
    doc = ReportModel.model_validate(data).document()
    assert json.dumps(doc, indent=2) == json.dumps(data, indent=2)


def test_build_report_refuses_a_document_the_model_rejects() -> None:
    """What build_report returns is what load_report accepts: a step status outside the
    model (a bug) is caught where the report is built, with the place named."""
    from ddptui.diagnosis.model import NodeResult, StepResult
    from ddptui.report.json_report import build_report

    session = local_session(1)
    odd = StepResult("ssh", "SSH", "running", 0.1, {"node0": NodeResult("pass", "ok")})  # type: ignore[arg-type]
    session.results["ssh"] = odd
    with pytest.raises(ReportError, match=r"steps\.0\.status"):
        build_report(session)


def test_results_from_report_names_a_bad_step_instead_of_a_traceback() -> None:
    from ddptui.report.load import results_from_report

    with pytest.raises(ReportError, match=r"steps\.1\.findings\.0\.severity"):
        results_from_report(
            {
                "steps": [
                    {"id": "ssh", "status": "pass"},
                    {"id": "env", "status": "fail", "findings": [{"id": "X", "severity": "bad"}]},
                ]
            }
        )
    step = results_from_report({"steps": [{"id": "ssh", "status": "pass"}]})["ssh"]
    assert step.title == "ssh" and step.nodes == {} and step.findings == ()


def test_checking_a_32_node_8_gpu_session_stays_cheap() -> None:
    """build_report checks every report (autosave included): on a 32-node, 8-GPU session
    with a full metrics timeline it must cost milliseconds, not seconds (the samples are
    not typed; typing them took 4-6 s on such a session)."""
    import time

    from ddptui.report.json_report import metrics_per_node
    from ddptui.report.schema import validate_report

    report = json.loads((REPORTS / "session_port_env.json").read_text())
    per_node = metrics_per_node(32)
    gpu = {"util_pct": 97.0, "mem_used": 7e10, "mem_total": 8e10, "temp_c": 60, "power_w": 700.0}
    ports = {f"mlx5_{i}/1": {"rx_Bps": 2e10, "tx_Bps": 2e10} for i in range(8)}
    report["metrics"]["nodes"] = {
        f"n{n}": {
            "hello": {"gpus": 8},
            "samples": [
                {"t": float(t), "cpu_pct": 1.0, "gpus": [dict(gpu, index=g) for g in range(8)],
                 "nics": {"eth0": {"rx_Bps": 1.0, "tx_Bps": 1.0}}, "ib": ports}
                for t in range(per_node)
            ],
        }
        for n in range(32)
    }  # fmt: skip
    assert len(json.dumps(report)) > 8_000_000
    t0 = time.process_time()
    assert validate_report(report) is report  # the same dict: the JSON written is unchanged
    assert time.process_time() - t0 < 0.2


def test_schema_types_the_tables_and_log_excerpts() -> None:
    schema = ReportModel.model_json_schema()
    defs = schema["$defs"]
    assert {"marked", "ids", "lines"} <= set(defs["ExcerptModel"]["properties"])
    assert "busbw_note" in defs["AllreduceTableModel"]["properties"]
    assert {"rank", "where"} <= set(defs["FirstFailureModel"]["properties"])
    bad = json.loads((REPORTS / "session_healthy.json").read_text())
    bad["tables"]["allreduce"]["ranks"][0]["busbw_gbps"] = "fast"
    with pytest.raises(ReportError, match=r"tables\.allreduce\.ranks\.0\.busbw_gbps"):
        from ddptui.report.schema import validate_report

        validate_report(bad, "r.json")
