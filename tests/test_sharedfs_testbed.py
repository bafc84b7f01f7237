"""Shared filesystems on the testbed: every node sees the host's filesystem (like an NFS
home), so `diagnose --config C '*:GLOB'` reads each rank log once and names the rank and
node that wrote it; a tmpfs mounted inside ONE node's mount namespace is that node's own
file, kept under its name; a symlink loop is one note, not one per node."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from ddptui.cli import main

GPU = Path(__file__).parent / "fixtures" / "gpu-h100"
OOM = (
    "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 336.00 MiB. "
    "GPU 0 has a total capacity of 79.15 GiB of which 141.25 MiB is free."
)


def _rank_log(rank: int, extra: str = "") -> str:
    lines = [f"[2026-11-25 10:00:0{rank},000] torch.distributed.run: [WARNING] started"]
    lines += [f"[rank{rank}]: step {i} loss 0.{9 - i}" for i in range(1, 6)]
    return "\n".join(lines) + "\n" + extra


def test_shared_rank_logs_are_read_once_and_a_node_local_tmpfs_keeps_its_node(make_testbed) -> None:  # type: ignore[no-untyped-def]
    tb = make_testbed(3, stem="sfs", subnet_base="10.87")
    cfg = tb.write_config()
    names = [n["name"] for n in json.loads(cfg.read_text())["nodes"]]
    shared = tb.workdir / "shared"
    shared.mkdir()
    for r in range(3):
        tail = (
            '[rank1]: Traceback (most recent call last):\n[rank1]:   File "/w/train.py", line 12, '
            f"in step\n[rank1]:     out = model(x)\n{OOM}\n"
            if r == 1
            else ""
        )
        (shared / f"rank{r}.log").write_text(_rank_log(r, tail))
    (shared / "loop.log").symlink_to(shared / "loop.log")
    # node-local scratch: a tmpfs in node 1's mount namespace only; nodes 0 and 2 see the
    # host's (empty, healthy) folder under the same path.
    scratch = tb.workdir / "scratch"
    scratch.mkdir()
    (scratch / "local.log").write_text(_rank_log(0))
    tb.exec(1, ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(scratch)])
    failing = (GPU / "nccl-env/cvd_empty.log").read_text()
    tb.exec(1, ["sh", "-c", f"cat > {scratch / 'local.log'}"], input=failing)

    result = CliRunner().invoke(
        main,
        ["diagnose", "--config", str(cfg), f"*:{shared}/*.log", f"*:{scratch}/*.log", "--json", "-"],
    )
    doc = json.loads(result.stdout)
    data = doc["steps"][0]["data"]
    files = {f["label"]: f for f in data["files"]}
    # Each shared file read once, from one node; the loop is one note, not three.
    for r in range(3):
        f = files[f"{shared}/rank{r}.log"]
        assert f["shared"] and f["seen_on"] == names, f
    readers = [files[f"{shared}/rank{r}.log"]["read_on"] for r in range(3)]
    assert len(set(readers)) >= 2, readers  # spread over the nodes (by bytes already given)
    # What was diagnosed is each file once (give or take line ends), not once per node.
    assert abs(data["bytes"] - sum(f["bytes"] for f in data["files"])) < 64
    assert data["bytes_seen"] == sum(f["bytes"] * len(f["seen_on"]) for f in data["files"])
    assert [p for p in data["problems"] if "loop.log" in p] == [
        f"{shared}/loop.log: a symlink loop: not read (on {', '.join(names)})"
    ]
    assert result.exit_code == 2, result.output  # the loop is an unreadable input
    # The OOM: rank 1, its file alone, the node the layout puts rank 1 on, never the others.
    oom = next(f for f in doc["steps"][0]["findings"] if f["id"] == "RANK-CUDA-OOM")
    assert oom["nodes"] == [f"{shared}/rank1.log"] and oom["rank"] == 1
    assert f"on {names[1]} (" in oom["summary"]
    assert names[0] not in oom["summary"] and names[2] not in oom["summary"]
    assert len(oom["evidence"]) == 1  # one read: the OOM line once, not three times
    rank1 = [tl for tl in data["timelines"] if tl["key"] == "rank 1"]
    assert len(rank1) == 1 and len(rank1[0]["events"]) == 1
    # The node-local file keeps its node; the host folder nodes 0 and 2 share is one file.
    assert files[f"{names[1]}:{scratch}/local.log"]["seen_on"] == [names[1]]
    assert files[f"{scratch}/local.log"]["seen_on"] == [names[0], names[2]]
    nogpu = next(f for f in doc["steps"][0]["findings"] if f["id"] == "ENV-NOGPU-VISIBLE")
    assert nogpu["nodes"] == [f"{names[1]}:{scratch}/local.log"]
    assert "shared (" in result.stderr or "shared (" in result.output
    for i in range(3):
        assert tb.wait_quiet(i, 10) == [], tb.pids(i)


FR = Path(__file__).parent / "fixtures" / "job" / "flight-recorder-rank_0.json"


def test_job_reads_each_ranks_dump_in_a_shared_fr_trace_once(make_testbed, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A job that is gone left one flight recorder dump per rank in a folder every node
    mounts (~/.cache/fr_trace): each is read once, by one node, attributed to its rank by
    its name; rank 1 never enqueued the collective the others wait in."""
    from ddptui.job import lastknown

    tb = make_testbed(3, stem="sfs", subnet_base="10.87")
    cfg = tb.write_config(tmp_path / "cluster.yaml")
    names = [n["name"] for n in json.loads(cfg.read_text())["nodes"]]
    frdir = tb.workdir / "fr_trace"
    frdir.mkdir()
    doc = json.loads(FR.read_text())
    for rank in range(3):
        mine = dict(doc)
        if rank == 1:  # stopped one collective early
            mine["entries"] = doc["entries"][:-1]
        (frdir / f"rank_{rank}").write_text(json.dumps(mine))
    (frdir / "notes.txt").write_text("not a dump\n")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    # What the last look at the live job remembered: its output, its dump prefix.
    remembered = lastknown._file(str(cfg))
    remembered.parent.mkdir(parents=True)
    remembered.write_text(json.dumps({
        "config": str(cfg),
        "nodes": {n: [str(tb.workdir / f"{n}.log")] for n in names},
        "fr": {n: f"{frdir}/rank_" for n in names},
    }))
    assert lastknown.load_fr(str(cfg)) == {n: [f"{frdir}/rank_"] for n in names}
    out = tmp_path / "job.json"
    proc = subprocess.run(
        [sys.executable, "-m", "ddptui", "job", str(cfg), "--json", str(out)],
        capture_output=True, text=True, timeout=90,
    )
    report = json.loads(out.read_text())
    notes = report["job"]["notes"]
    dumps = [n for n in notes if n.startswith("flight recorder dump of rank")]
    assert len(dumps) == 3, (notes, proc.stdout, proc.stderr)
    for rank in range(3):
        (note,) = [n for n in dumps if n.startswith(f"flight recorder dump of rank {rank}:")]
        assert f"{frdir}/rank_{rank}" in note and f"seen on {', '.join(names)}" in note
    readers = {n.rsplit("read once on ", 1)[1].rstrip(")") for n in dumps}
    assert len(readers) >= 2, dumps  # spread over the nodes
    fr = [f for f in report["steps"][0]["findings"] if f["id"].startswith("JOB-FR")]
    assert fr and fr[0]["id"] == "JOB-FR-TIMEOUT", fr
    assert "rank(s) 1 never enqueued it" in fr[0]["summary"]
    assert "ranks with the entry: 0, 2" in " ".join(fr[0]["evidence"]), fr[0]["evidence"]
    for i in range(3):
        assert tb.wait_quiet(i, 10) == [], tb.pids(i)


def test_captured_logs_diagnosed_on_the_nodes_equal_their_local_diagnosis(make_testbed) -> None:  # type: ignore[no-untyped-def]
    """The nodes filter the logs with the diagnosis' prefilter and send only the lines
    it looks at: the real captured logs in a shared folder, diagnosed on 2 nodes over
    SSH, give the findings, evidence lines, timelines and counts of a local diagnosis."""
    import shutil

    tb = make_testbed(2, stem="sfs", subnet_base="10.87")
    cfg = tb.write_config()
    logs = tb.workdir / "captured"
    logs.mkdir()
    captured = [
        *sorted((GPU / "nccl-env").glob("*.log"))[:6],
        GPU / "job-hang/watchdog-timeout.log", GPU / "raw-torchrun/nproc2-on-1gpu.log",
        GPU.parent / "logs/rank_skips_collective.log", GPU.parent / "logs/gloo_ifname_eth9.log",
    ]
    for i, src in enumerate(captured):
        shutil.copyfile(src, logs / f"{i:02d}-{src.name}")
    files = sorted(str(p) for p in logs.glob("*.log"))

    def run(args: list[str]) -> dict[str, object]:
        result = CliRunner().invoke(main, ["diagnose", *args, "--json", "-"])
        assert result.exit_code in (0, 1), result.output
        return json.loads(result.stdout)  # type: ignore[no-any-return]

    here = run(files)
    there = run(["--config", str(cfg), f"*:{logs}/*.log"])

    def seen(doc: dict[str, object]) -> dict[str, object]:
        step = doc["steps"][0]  # type: ignore[index]
        return {
            "first": (doc["first_failure"] or {}).get("finding"),  # type: ignore[union-attr]
            "findings": [(f["id"], f["severity"], f.get("rank"), f["evidence"], f.get("lines"))
                         for f in step["findings"]],
            "timelines": step["data"]["timelines"],
            "lines": step["data"]["lines"],
            "bytes": step["data"]["bytes"],
        }

    assert seen(there) == seen(here)
    assert len(seen(here)["findings"]) >= 5  # type: ignore[arg-type]
    data = there["steps"][0]["data"]  # type: ignore[index]
    assert sorted(f["label"] for f in data["files"]) == files  # each read once, named by path
    for i in range(2):
        assert tb.wait_quiet(i, 10) == [], tb.pids(i)
