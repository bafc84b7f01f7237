"""One file, one read: which sightings are one file (network filesystems seen from several
clients, one kernel's files seen from several namespaces), who reads it, and who wrote the
lines a finding quotes.  Pure: sightings as the logread probe reports them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ddptui.logs.diagnose import diagnose_lines
from ddptui.logs.scan import SPAN
from ddptui.logs.sharedfs import Sighting, group, plan
from ddptui.logs.writers import Layout, attribute
from ddptui.probeset import probe_source

GPU_FIX = Path(__file__).parent / "fixtures" / "gpu-h100"
BOOT = {"a": "boot-a", "b": "boot-b", "c": "boot-c"}


def seen(node: str, path: str, *, ino: int = 7, dev: str = "0:50", fstype: str = "nfs4",
         source: str = "nas:/home", size: int = 100, mtime: int = 1, boot: str | None = None,
         head: str = "h", tail: str = "t") -> Sighting:
    return Sighting(node, path, size, mtime, ino, dev, fstype, source,
                    fstype in ("nfs4", "lustre", "gpfs"), boot or BOOT[node], head, tail)


def test_nfs_file_seen_by_three_clients_is_one_file_read_once() -> None:
    # st_dev differs per client mount (0:50, 0:61, 0:44); the inode is the server's.
    s = [seen("a", "/home/u/r1.log", dev="0:50"), seen("b", "/home/u/r1.log", dev="0:61"),
         seen("c", "/nfs/home/u/r1.log", dev="0:44")]
    files = group(s)
    assert len(files) == 1 and files[0].nodes == ["a", "b", "c"]
    p = plan(s, ["a", "b", "c"])
    assert p.bytes_planned == 100 and p.bytes_seen == 300
    assert files[0].shared and p.files[0].label.endswith("/r1.log") and ":" not in p.files[0].label


def test_clients_naming_the_server_differently_match_by_inode_size_time_and_hashes() -> None:
    a = seen("a", "/home/u/x.log", source="nas1:/home")
    b = seen("b", "/home/u/x.log", source="10.0.0.5:/home")
    assert len(group([a, b])) == 1
    other = seen("b", "/home/u/x.log", source="10.0.0.5:/home", tail="t2")  # content differs
    assert len(group([a, other])) == 2


def test_local_files_of_different_machines_stay_apart_even_with_equal_inodes() -> None:
    # Two machines' /tmp/train.log: same path, dev and inode by chance, different kernels.
    s = [seen(n, "/tmp/train.log", fstype="ext4", source="/dev/sda1", dev="8:1", ino=12)
         for n in "abc"]
    p = plan(s, ["a", "b", "c"])
    assert len(p.files) == 3
    assert sorted(f.label for f in p.files) == ["a:/tmp/train.log", "b:/tmp/train.log", "c:/tmp/train.log"]
    assert {f.reader for f in p.files} == {"a", "b", "c"}


def test_one_kernel_seen_from_several_namespaces_is_one_file_but_a_private_tmpfs_is_not() -> None:
    # The testbed: every node is a namespace of one kernel; node b mounted a tmpfs of its own.
    shared = [seen(n, "/srv/logs/r0.log", fstype="ext4", source="/dev/vda", dev="254:0",
                   boot="k") for n in "abc"]
    private = seen("b", "/scratch/r1.log", fstype="tmpfs", source="tmpfs", dev="0:88", boot="k")
    host_dir = seen("a", "/scratch/r1.log", fstype="ext4", source="/dev/vda", dev="254:0",
                    ino=99, boot="k")
    p = plan([*shared, private, host_dir], ["a", "b", "c"])
    labels = sorted(f.label for f in p.files)
    assert labels == ["/srv/logs/r0.log", "a:/scratch/r1.log", "b:/scratch/r1.log"]


def test_reads_are_spread_over_the_nodes_that_see_them() -> None:
    s = [seen(n, f"/home/r{i}.log", ino=100 + i, size=100 << 20) for i in range(8)
         for n in ["a", "b", "c"]]
    p = plan(s, ["a", "b", "c"])
    per = {n: len(p.assigned(n)) for n in "abc"}
    assert sorted(per.values()) == [2, 3, 3], per


def test_a_live_log_is_read_where_it_was_largest() -> None:
    s = [seen("a", "/home/live.log", size=100, mtime=1), seen("b", "/home/live.log", size=180, mtime=2),
         seen("c", "/home/live.log", size=120, mtime=1)]
    (f,) = plan(s, ["a", "b", "c"]).files
    assert f.reader == "b" and f.changing


def test_the_same_file_under_two_paths_on_one_node_is_read_once() -> None:
    s = [seen("a", "/home/u/r.log"), seen("a", "/home/link/r.log")]
    (f,) = group(s)
    assert f.nodes == ["a"] and len(f.sightings) == 1


OOM = "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 336.00 MiB."
NCCL = (
    "ceo-host2:4242:4242 [0] transport/net_socket.cc:499 NCCL WARN NET/Socket : peer "
    "10.0.0.1<5> message truncated : receiving 1048576 bytes instead of 65536"
)


def test_the_oom_names_rank_1_on_the_node_the_layout_puts_it_never_the_reader() -> None:
    diag = diagnose_lines(["[rank1]: step 3", OOM], "/home/u/rank1.log")
    s = [seen(n, "/home/u/rank1.log") for n in "abc"]
    files = {f.label: f for f in plan(s, ["a", "b", "c"]).files}
    out, writers = attribute(diag, files, Layout(("a", "b", "c"), 1, {}))
    assert out.first is not None and out.first.rank == 1
    assert out.first.nodes == ("/home/u/rank1.log",)
    assert "on b (" in out.first.summary
    assert writers[out.first.id].node == "b"
    # With 2 ranks per node, rank 1 runs on the first node.
    out2, _ = attribute(diag, files, Layout(("a", "b", "c"), 2, {}))
    assert out2.first is not None and "on a (" in out2.first.summary
    # Not known (no fixed layout): the file is named, and no node.
    out3, w3 = attribute(diag, files, Layout(("a", "b", "c"), None, {}))
    assert out3.first is not None and out3.first.summary == diag.first.summary  # type: ignore[union-attr]
    assert w3[out3.first.id].node is None


def test_the_host_in_nccls_prefix_names_the_node() -> None:
    diag = diagnose_lines([NCCL], "/home/u/all.log")
    s = [seen(n, "/home/u/all.log") for n in "abc"]
    files = {f.label: f for f in plan(s, ["a", "b", "c"]).files}
    hostnames = {"a": "ceo-host0", "b": "ceo-host1", "c": "ceo-host2.cluster"}
    out, writers = attribute(diag, files, Layout(("a", "b", "c"), None, hostnames))
    fid = diag.findings[0].id
    assert writers[fid].node == "c", writers
    assert "its lines name host ceo-host2" in out.findings[0].summary


def _identity(path: Path) -> dict[str, object]:
    """Run the probe side's identity() on this machine, as a node would."""
    src = probe_source("logread").split("\ndef expand(")[0]  # the libraries, not main()
    code = src + f"\nimport json\nprint(json.dumps(identity({str(path)!r})))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_probe_identity_of_a_real_file_and_of_a_symlink_to_it(tmp_path: Path) -> None:
    f = tmp_path / "r.log"
    f.write_bytes(b"head" + b"x" * 200_000 + b"tail")
    (tmp_path / "link.log").symlink_to(f)
    a, b = _identity(f), _identity(tmp_path / "link.log")
    assert a["ino"] == b["ino"] and a["dev"] == b["dev"] and a["boot"] and a["fstype"] != "?"
    assert a["head"] == b["head"] and a["tail"] != a["head"]
    one = Sighting.from_record("a", {"path": str(f), **a})
    two = Sighting.from_record("b", {"path": str(tmp_path / "link.log"), **b})
    assert one is not None and two is not None and len(group([one, two])) == 1


def _redaction() -> dict[str, object]:
    ns: dict[str, object] = {"__name__": "redact_under_test", "PARAMS": {}}
    src = probe_source("env").split("\ndef main(")[0]
    exec(compile(src, "<probe env>", "exec"), ns)  # noqa: S102 - our own probe source
    return ns


def test_redacting_a_batch_of_lines_equals_redacting_each_line_as_before() -> None:
    """logread redacts 256 KiB batches, with shortcuts (a literal every secret shape
    holds, only lines holding a secret word meet the assignment rules): the result is
    what the rules give line by line, without the shortcuts."""
    ns = _redaction()
    redact, rules = ns["redact_text"], ns

    def reference(text: str, known: list[str], salt: str) -> str:  # the rules, no shortcuts
        marker = rules["marker"]
        for value in known:
            text = text.replace(value, marker(salt, value))  # type: ignore[operator]
        for pattern in rules["SECRET_VALUE_PATTERNS"]:  # type: ignore[attr-defined]
            text = pattern.sub(lambda m: marker(salt, m.group(0)), text)  # type: ignore[operator]
        text = rules["URL_USERINFO"].sub(  # type: ignore[attr-defined]
            lambda m: m.group(1) + marker(salt, m.group(2)) + m.group(3), text  # type: ignore[operator]
        )
        text = rules["TEXT_BEARER"].sub(lambda m: m.group(1) + marker(salt, m.group(2)), text)  # type: ignore[attr-defined, operator]
        for pattern in (rules["TEXT_ASSIGNMENT"], rules["TEXT_FLAG"]):
            text = rules["_redact_assigned"](pattern, text, salt)  # type: ignore[operator]
        return text

    planted = [
        "export HF_TOKEN=hf_Zq8vTn3LwR5kP2mX9cY7bJ4dF6gH1sA0 now",
        "url https://u:" + "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8@example.com/x",
        'Authorization: Bearer abcdefgh12345678 and "api_key": "k-123456789"',
        "train.py --password hunter22 --lr 0.1 --wandb_key=abc123xyz",
        "AKIAABCDEFGHIJKLMNOP sk-proj-abcdefghijklmnopqrstuv eyJhbGciOi.eyJzdWIiOi.sig",
        "İstanbul db_password: s3cr3t!",  # lower() of İ is two characters long
        "[I1123 TCPStore.cpp:271] [c10d - trace] get key:/default_pg/0//cuda//1 keys: 3",
        "tokens/s 181234 session=abc",
    ]
    texts = [p.read_text(errors="replace") for p in sorted(GPU_FIX.rglob("*.log"))][:40]
    lines = [ln for t in texts for ln in t.splitlines()] + planted * 3
    known = ["s3cr3t!", "hunter22"]
    one_by_one = [reference(ln, known, "salt") for ln in lines]
    assert redact("\n".join(lines), known, "salt") == "\n".join(one_by_one)  # type: ignore[operator]
    assert [redact(ln, known, "salt") for ln in lines] == one_by_one  # type: ignore[operator]
    out = "\n".join(one_by_one)
    for secret in ("hf_Zq8vTn3", "A1b2C3d4E5f6", "hunter22", "s3cr3t!", "abcdefgh12345678"):
        assert secret not in out


def test_job_reads_each_dump_once_per_rank_and_each_shared_log_once() -> None:
    from ddptui.job.sharedfiles import assign, dump_rank

    prefixes = ["~/.cache/fr_trace/", "/scratch/fr/rank_"]
    assert dump_rank("/home/u/.cache/fr_trace/nccl_trace_rank_12", prefixes) == 12
    assert dump_rank("/scratch/fr/rank_3", prefixes) == 3
    assert dump_rank("/scratch/fr/rank_3.tmp", prefixes) is None
    assert dump_rank("/scratch/fr/other_3", ["/scratch/fr/rank_"]) is None
    dumps = [seen(n, f"/home/u/.cache/fr_trace/rank_{r}", ino=500 + r, mtime=10) for r in range(3)
             for n in "abc"]
    old = [seen("a", "/home/u/.cache/fr_trace/old/rank_1", ino=600, mtime=1)]
    logs = [seen(n, "/home/u/train.log", ino=700) for n in "abc"]
    own = [seen("b", "/tmp/b.log", ino=800, fstype="ext4", source="/dev/sda1")]
    p = assign([*dumps, *old, *logs, *own], ["a", "b", "c"], {"b": ["/tmp/b.log"]}, prefixes)
    ranks = sorted(d["rank"] for ds in p.fr_paths.values() for d in ds)
    assert ranks == [0, 1, 2]  # one dump per rank, the newest, from one node each
    assert all("/old/" not in d["path"] for ds in p.fr_paths.values() for d in ds)
    assert sum(len(v) for v in p.log_paths.values()) == 1
    assert p.fallback_paths == {"b": ["/tmp/b.log"]} and p.owners == {"/tmp/b.log": "b"}
    assert any("older flight recorder dump" in n for n in p.notes)


def test_job_merges_copies_of_one_log_and_names_the_writer_not_the_reader() -> None:
    from ddptui.job.model import node_from_records
    from ddptui.job.sharedfiles import merge_views
    from ddptui.job.verdict import _exits

    fid = {"size": 10, "mtime_ns": 1, "ino": 42, "dev": "0:51", "fstype": "nfs4",
           "source": "nas:/home", "network": True, "boot": "", "head": "h", "tail": "t"}
    lines = ["[rank0]: step 1", "[rank1]: Traceback (most recent call last):",
             '[rank1]:   File "/w/train.py", line 9, in step',
             "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"]
    views = [
        node_from_records(n, [{"kind": "host", "hostname": f"h{n}"},
                              {"kind": "log", "path": "/home/u/all.log", "fid": {**fid, "boot": f"k{n}"},
                               "lines": lines, "pids": []}])
        for n in ("n0", "n1", "n2")
    ]
    merged = merge_views(views)
    kept = [log for v in merged for log in v.logs]
    assert len(kept) == 1 and kept[0].seen_on == ("n0", "n1", "n2") and kept[0].writers == ()
    (e,) = _exits(merged)
    # Rank 1 by its prefix; no node is known to run it: the file is named, not n0 (its reader).
    assert e.rank == 1 and e.node == "/home/u/all.log"
    # With torchrun's summary naming the host of rank 1, that host's node.
    summary = ["Root Cause (first observed failure):", "[0]:", "  time      : 2026-11-25_10:00:00",
               "  host      : hn1", "  rank      : 1 (local_rank: 0)",
               "  exitcode  : 1 (pid: 77)", "  error_file: <N/A>", "  traceback : x", "====="]
    views2 = [node_from_records(v.node, [{"kind": "host", "hostname": f"h{v.node}"},
              {"kind": "log", "path": "/home/u/all.log", "fid": {**fid, "boot": f"k{v.node}"},
               "lines": lines + summary, "pids": []}]) for v in views]
    (e2,) = _exits(merge_views(views2))
    assert e2.rank == 1 and e2.node == "n1"


def test_a_growing_spool_file_is_read_whole_while_it_is_written(tmp_path: Path) -> None:
    import threading
    import time

    from ddptui.logs.pipes import Pipe

    cond = threading.Condition()
    pipe = Pipe(tmp_path / "1.log", cond)
    reader = pipe.reader()

    def write() -> None:
        time.sleep(0.1)
        pipe.open()
        for i in range(50):
            pipe.write(f"line {i}\n" * 1000)
            time.sleep(0.002)
        pipe.close()

    t = threading.Thread(target=write)
    t.start()
    data = reader.read()  # blocks until the writer is done
    t.join()
    assert data.count(b"\n") == 50_000 and data.endswith(b"line 49\n")
    never = Pipe(tmp_path / "2.log", cond)
    never.close()  # the node could not open it: an empty input, at once
    assert never.reader().read() == b""


def test_a_live_log_is_read_up_to_its_size_at_open_and_said_to_grow(tmp_path: Path) -> None:
    """The logread probe on a file another process keeps appending to: it stops at the
    size the file had when it was opened (bounded time) and says the file grew."""
    import threading
    import time

    log = tmp_path / "live.log"
    log.write_text("[rank0]: step 0\n" * 200_000)
    start_lines = 200_000
    stop = threading.Event()

    def append() -> None:
        with log.open("a") as fh:
            while not stop.is_set():  # 8 MB/s: reading the first 3 MB takes longer than 2 ms
                fh.write("[rank0]: step 1\n" * 1000)
                fh.flush()
                time.sleep(0.002)

    t = threading.Thread(target=append)
    t.start()
    from ddptui.logs.scan import node_filter

    outs = []
    try:
        for flt in (None, node_filter()):  # every line sent, or filtered there (counted)
            params = {"mode": "read", "paths": [str(log)], "max_bytes": 1 << 30, "salt": "s",
                      "filter": flt}
            code = f"PARAMS = {params!r}\n" + probe_source("logread")
            t0 = time.monotonic()
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 timeout=60, check=True)
            outs.append((out, time.monotonic() - t0))
    finally:
        stop.set()
        t.join()
    for out, took in outs:
        recs = [json.loads(line) for line in out.stdout.splitlines()]
        (end,) = [r for r in recs if r["kind"] == "file_end"]
        (opened,) = [r for r in recs if r["kind"] == "file"]
        sent = sum(r["text"].count("\n") + 1 for r in recs if r["kind"] == "lines")
        if "lines" in end:  # filtered: only the first and last lines to send, every line counted
            segs = [r for r in recs if r["kind"] in ("lines", "seg")]
            assert sum(r["text"].count("\n") + 1 for r in segs) <= 2 * SPAN
            sent = end["lines"]
            assert end["bytes"] <= opened["size"]
        assert start_lines <= sent <= opened["size"] // len("[rank0]: step 0\n") + 1
        assert end["grew"] > 0 and took < 30


def test_a_shared_file_some_asked_nodes_do_not_see_is_said_once() -> None:
    from ddptui.logs.remote import _visibility_notes

    s = [seen("a", "/home/u/r.log", size=100), seen("b", "/home/u/r.log", size=140, mtime=2)]
    p = plan(s, ["a", "b", "c"])
    notes = _visibility_notes(p, {"a": {"/home/u/*.log"}, "b": {"/home/u/*.log"}, "c": {"/home/u/*.log"}})
    assert notes == [
        "/home/u/r.log: shared (nfs4 nas:/home; seen on a, b, read once on b)",
        "/home/u/r.log: not seen on c (a different mount there, or not visible yet); read where it was seen",
        "/home/u/r.log: the nodes saw different sizes (written to meanwhile)",
    ]


def test_a_folder_of_thousands_of_files_is_bounded_said_once_and_read_once(tmp_path: Path) -> None:
    """Two `host: local` nodes (one kernel: every file is shared) and 1,000 files: 256 are
    looked at and read, each once; the rest is one note for both nodes, not one per file."""
    from click.testing import CliRunner

    from ddptui.cli import main

    cfg = tmp_path / "c.yaml"
    cfg.write_text("master: {addr: 127.0.0.1, port: 29555}\nnodes:\n"
                   "  - {host: local, name: n0}\n  - {host: local, name: n1}\n")
    dumps = tmp_path / "many"
    dumps.mkdir()
    for i in range(1000):
        (dumps / f"r{i:04d}.log").write_text(f"[rank{i}]: step 1\n")
    result = CliRunner().invoke(main, ["diagnose", "--config", str(cfg), f"*:{dumps}/*.log",
                                       "--json", "-"])
    doc = json.loads(result.stdout)
    data = doc["steps"][0]["data"]
    assert len(data["files"]) == 256 and all(f["seen_on"] == ["n0", "n1"] for f in data["files"])
    assert data["lines"] == 256  # each file once
    assert data["problems"] == [
        f"{dumps}/*.log: 744 more files match: not read (at most 256 per node; narrow the glob) (on n0, n1)"
    ]
    assert result.exit_code == 2


def test_a_live_look_remembers_the_dump_prefix_for_a_later_post_mortem(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from ddptui.job import lastknown
    from ddptui.job.model import node_from_records

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    records = [
        {"kind": "agent", "pid": 10},
        {"kind": "rank", "pid": 11, "rank": 0, "out": {"1": {"kind": "file", "path": "/home/u/r0.log"}}},
        {"kind": "fr_config", "enabled": True, "prefix": "/home/u/.cache/fr_trace/rank_"},
    ]
    view = node_from_records("n0", records)
    quiet = node_from_records("n1", records[:2])  # no flight recorder there
    assert lastknown.save(str(tmp_path / "c.yaml"), [view, quiet])
    assert lastknown.load_fr(str(tmp_path / "c.yaml")) == {"n0": ["/home/u/.cache/fr_trace/rank_"]}
    assert lastknown.load(str(tmp_path / "c.yaml"))["n0"] == ["/home/u/r0.log"]
