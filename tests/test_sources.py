"""Cluster sources: hostlist expressions, hostfiles, cluster.yaml's node forms, the
Slurm job's id and node states, and the exclude-list rule. Pure; no Slurm needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddptui.config import ConfigError, load_config, parse_config
from ddptui.diagnosis.exclude import exclude_expr, excluded_nodes
from ddptui.sources.hostfile import HostfileError, parse_hostfile
from ddptui.sources.hostlist import HostlistError, compress, expand
from ddptui.sources.slurm import SlurmError, job_id_from, parse_node_states, unusable_nodes


@pytest.mark.parametrize(
    ("expr", "hosts"),
    [
        ("gpu[001-003,070]", ["gpu001", "gpu002", "gpu003", "gpu070"]),
        ("a[1-2]-ib[0-1],b", ["a1-ib0", "a1-ib1", "a2-ib0", "a2-ib1", "b"]),
        ("n[9-11]", ["n9", "n10", "n11"]),
        ("login", ["login"]),
        ("r[1-2]n[01-02]", ["r1n01", "r1n02", "r2n01", "r2n02"]),
    ],
)
def test_expand(expr: str, hosts: list[str]) -> None:
    assert expand(expr) == hosts
    assert expand(compress(hosts)) == hosts


def test_compress_merges_ranges_and_keeps_padding() -> None:
    assert compress(expand("gpu[001-064,070]")) == "gpu[001-064,070]"
    assert compress(["gpu005", "gpu017"]) == "gpu[005,017]"
    assert compress(["gpu099", "gpu100", "n9", "n10", "login", "n9"]) == (
        "gpu[099-100],n[9-10],login"
    )
    assert compress([]) == ""


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("gpu[1-", "never closed"),
        ("gpu[a-b]", "must hold numbers"),
        ("gpu[3-1]", "backwards"),
        ("a,,b", "empty item"),
        ("gpu]1[", "without '['"),
        ("gpu[[1]]", "nested"),
        ("gpu[1-99999999]", "larger than"),
        ("a b", "whitespace"),
    ],
)
def test_bad_expressions_say_why(expr: str, says: str) -> None:
    with pytest.raises(HostlistError, match=says.replace("[", r"\[")):
        expand(expr)


def test_hostfile_formats_comments_and_slots() -> None:
    text = (
        "# DeepSpeed style\n\nworker-1 slots=8\nworker-2:8  # MPICH\n"
        "gpu[03-04] slots=8 max_slots=16\nplain\n"
    )
    entries = parse_hostfile(text, "hf")
    assert [(e.host, e.slots) for e in entries] == [
        ("worker-1", 8), ("worker-2", 8), ("gpu03", 8), ("gpu04", 8), ("plain", None)
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("ok\nthis is junk\n", "hf:2: unexpected 'is'"),
        ("a slots=x\n", "hf:1: unexpected 'slots=x'"),
        ("a slots=0\n", "hf:1: slots must be at least 1"),
        ("a\nb\na\n", "hf:3: host 'a' is listed twice (first on line 1)"),
        ("# nothing\n\n", "no hosts"),
        ("gpu[1-\n", "hf:1:"),
        ("{'json': 1}\n", "hf:1:"),
    ],
)
def test_hostfile_junk_names_file_and_line(text: str, says: str) -> None:
    with pytest.raises(HostfileError) as info:
        parse_hostfile(text, "hf")
    assert says in str(info.value)


def test_config_nodes_as_hostlists_and_master_default() -> None:
    cfg = parse_config('nodes: ["gpu[01-02]", {host: "x[1-2]", user: bob}]\n')
    assert [(n.host, n.user) for n in cfg.nodes] == [
        ("gpu01", None), ("gpu02", None), ("x1", "bob"), ("x2", "bob")
    ]  # fmt: skip
    assert (cfg.master.addr, cfg.master.port) == ("gpu01", 29500)
    with pytest.raises(ConfigError, match="cannot name the 2 hosts"):
        parse_config('nodes: [{host: "g[1-2]", name: one}]\n')
    with pytest.raises(ConfigError, match="never closed"):
        parse_config('nodes: ["g[1-"]\n')


def test_config_hostfile_relative_to_config(tmp_path: Path) -> None:
    (tmp_path / "hosts").write_text("n1 slots=2\nn2 slots=2\n")
    (tmp_path / "c.yaml").write_text("hostfile: hosts\nmaster: {port: 29511}\n")
    cfg = load_config(tmp_path / "c.yaml")
    assert [n.host for n in cfg.nodes] == ["n1", "n2"]
    assert cfg.nproc_per_node == 2 and cfg.master.addr == "n1" and cfg.master.port == 29511
    (tmp_path / "hosts").write_text("n1\n!!!\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "c.yaml")
    assert f"{tmp_path / 'hosts'}:2:" in str(info.value)


def test_config_slurm_job() -> None:
    cfg = parse_config("slurm: {job: 1234}\nenv: {A: b}\n")
    assert cfg.slurm is not None and cfg.slurm.job == "1234" and cfg.nodes == []
    with pytest.raises(ConfigError, match="Slurm job id"):
        parse_config("slurm: {job: abc}\n")
    with pytest.raises(ConfigError, match="not both"):
        parse_config("slurm: {job: 1}\nnodes: [a]\n")


def test_job_id_from_argument_or_environment() -> None:
    assert job_id_from("77", {}) == "77"
    assert job_id_from(None, {"SLURM_JOB_ID": "12"}) == "12"
    assert job_id_from("", {"SLURM_JOB_ID": "12"}) == "12"
    with pytest.raises(SlurmError) as info:
        job_id_from(None, {})
    assert "SLURM_JOB_ID" in str(info.value) and "--slurm JOBID" in str(info.value)
    with pytest.raises(SlurmError, match="not a Slurm job id"):
        job_id_from("cluster.yaml", {})


def test_node_states_from_scontrol() -> None:
    out = (
        "NodeName=gpu01 Arch=x86_64 CPUs=2 State=ALLOCATED ThreadsPerCore=1\n"
        "NodeName=gpu02 CPUs=2 State=DOWN+NOT_RESPONDING Reason=Not responding [slurm@2026]\n"
        "NodeName=gpu03 CPUs=2 State=MIXED+DRAIN Reason=bad dimm [root@2026]\n"
    )
    states, reasons = parse_node_states(out)
    assert states["gpu02"] == "DOWN+NOT_RESPONDING" and reasons["gpu03"] == "bad dimm"
    bad = unusable_nodes(["gpu01", "gpu02", "gpu03"], states, reasons)
    assert list(bad) == ["gpu02"] and "Not responding" in bad["gpu02"]


def test_exclude_rule() -> None:
    nodes = ["g1", "g2", "g3", "g4"]

    def f(fid: str, sev: str, names: list[str]) -> dict[str, object]:
        return {"id": fid, "severity": sev, "nodes": names}

    # an error naming one node: excluded; naming every node: cluster-wide, not a node
    assert excluded_nodes([f("PORT-TIMEOUT", "error", ["g3"])], nodes) == ["g3"]
    assert excluded_nodes([f("PORT-TIMEOUT", "error", nodes)], nodes) == []
    assert excluded_nodes([f("ENV-X", "warning", ["g2"])], nodes) == []
    # the KB says so whatever the severity
    assert excluded_nodes([f("SLURM-NODE-UNREACHABLE", "warning", ["g4"])], nodes) == ["g4"]
    report = {
        "nodes": [{"name": n, "host": f"gpu00{i + 1}"} for i, n in enumerate(nodes)],
        "steps": [{"findings": [f("NODE-LOST", "error", ["g1", "g3"])]}],
    }
    assert exclude_expr(report) == "gpu[001,003]"
    report["steps"] = []
    assert exclude_expr(report) == ""


def test_exclude_of_a_recorded_64_node_run_and_its_markdown_line() -> None:
    """A real 64-node testbed run: PORT-TIMEOUT names node17 and node40; AR-HANG and
    DDP-HANG name all 64 (the consequence, cluster-wide): only the two are excluded."""
    import json

    from ddptui.report.markdown import render_markdown

    fixture = Path(__file__).parent / "fixtures" / "reports" / "port_64nodes.json"
    report = json.loads(fixture.read_text())
    assert exclude_expr(report) == "10.96.2.[18,41]"
    report["exclude"] = "gpu[005,017]"
    md = render_markdown(report)
    assert "Resubmit without the failing nodes: `--exclude=gpu[005,017]`" in md
    report["exclude"] = ""
    assert "Resubmit without" not in render_markdown(report)
