"""cluster.yaml: errors a person can act on (file:line:column, the key, what is expected)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.config import ConfigError, json_schema, load_config, parse_config

ROOT = Path(__file__).resolve().parents[1]
DDPTUI = [sys.executable, "-m", "ddptui"]


def errors(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "c.yaml")
    return info.value.problems


def test_minimal_config_gets_defaults() -> None:
    cfg = parse_config("master: {addr: 10.0.0.1}\nnodes: [{host: a}, {host: b, name: n1}]")
    assert cfg.master.port == 29500
    assert [n.display for n in cfg.nodes] == ["a", "n1"]
    assert cfg.python == "python3" and cfg.nproc_per_node == 1
    assert cfg.ssh.accept_new_host_keys is False


def test_unknown_key_names_line_column_and_key() -> None:
    problems = errors("master:\n  addr: 10.0.0.1\nnodes:\n  - host: a\n    hostt: b\n")
    assert problems == [
        "c.yaml:5:5: nodes[0].hostt: unknown key (misspelled? `ddptui schema` lists the valid keys)"
    ]


def test_bad_values_each_reported_with_position() -> None:
    problems = errors(
        "master:\n  addr: x\n  port: 70000\nnodes:\n  - host: a\n    env: {'9X': 1}\n"
        "nproc_per_node: lots\n"
    )
    text = "\n".join(problems)
    assert (
        "c.yaml:3:3: master.port: Input should be less than or equal to 65535 (got 70000)" in text
    )
    assert "c.yaml:6:5: nodes[0].env:" in text and "'9X'" in text
    assert "c.yaml:7:1: nproc_per_node:" in text


def test_missing_nodes_names_every_source() -> None:
    # master: may be left out since 2026-11-25 (it defaults to the first node); the
    # nodes may not: the error names the three ways to give them.
    (problem,) = errors("master: {addr: x}\n")
    assert problem.startswith("c.yaml:1:1:") and "no nodes" in problem
    assert "nodes:" in problem and "hostfile:" in problem and "slurm:" in problem


def test_yaml_syntax_error_has_position() -> None:
    problem, began = errors("master: {addr: x\nnodes: []\n")
    assert problem.startswith("c.yaml:2:") and "YAML syntax error" in problem
    assert began.startswith("c.yaml:1:9:") and "flow mapping" in began


def test_unclosed_bracket_names_where_it_began_and_where_it_was_noticed() -> None:
    text = "master: {addr: 10.0.0.1}\nnodes: [ {host: a},\n  {host: b}\npython: python3\n"
    noticed, began = errors(text)
    assert noticed.startswith("c.yaml:4:1: YAML syntax error")
    assert began == "c.yaml:2:8: ... while parsing a flow sequence that began here (is it closed?)"


def test_duplicate_node_names_rejected() -> None:
    (problem,) = errors("master: {addr: x}\nnodes: [{host: a}, {host: b, name: a}]\n")
    assert "node name 'a'" in problem


def test_env_scalars_become_strings() -> None:
    cfg = parse_config("master: {addr: x}\nnodes: [{host: a}]\nenv: {OMP_NUM_THREADS: 4, X: true}")
    assert cfg.env == {"OMP_NUM_THREADS": "4", "X": "1"}


def test_examples_in_repo_are_valid() -> None:
    for path in (ROOT / "configs").glob("*.yaml"):
        load_config(path)


def test_schema_documents_every_field() -> None:
    schema = json_schema()
    props = schema["properties"]
    assert {"master", "nodes", "env", "ssh", "timeouts", "python", "nproc_per_node"} <= set(props)
    node = schema["$defs"]["NodeConfig"]["properties"]
    assert all(p.get("description") for p in node.values())
    assert schema["$defs"]["NodeConfig"]["additionalProperties"] is False


def run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DDPTUI, *args], capture_output=True, text=True, cwd=cwd, timeout=60)


def test_cli_validate_bad_config_exits_2_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("master:\n  addr: x\n  prot: 1\nnodes: [{host: a}]\n")
    proc = run_cli("validate", str(bad))
    assert proc.returncode == 2
    assert f"{bad}:3:3: master.prot: unknown key" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    proc = run_cli("check", str(tmp_path / "nope.yaml"))
    assert proc.returncode == 2 and "no such file" in proc.stderr


def test_cli_schema_version_and_valid() -> None:
    proc = run_cli("schema")
    assert proc.returncode == 0 and json.loads(proc.stdout)["title"] == "ddptui cluster.yaml"
    proc = run_cli("--version")
    assert proc.returncode == 0 and "0.1.0" in proc.stdout
    proc = run_cli("validate", "configs/local.yaml")
    assert proc.returncode == 0 and "valid" in proc.stdout


def test_cli_unknown_step_is_usage_error() -> None:
    proc = run_cli("check", "configs/local.yaml", "--steps", "ssh,bogus")
    assert proc.returncode == 2 and "unknown step(s): bogus" in proc.stderr
