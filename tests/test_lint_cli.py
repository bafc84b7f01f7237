"""`ddptui lint` on the command line: compiler-style output, the JSON document of
CONTRACT.md, exit codes 0/1/2, and bad input (unreadable, binary, not Python, not
UTF-8) told in one clear line, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from ddptui.cli import main
from ddptui.config import ConfigError, load_config
from ddptui.lint import lint_paths

FIXTURES = Path(__file__).parent / "fixtures" / "lint"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["lint", *args])
    return result.exit_code, result.stdout, result.stderr


def test_clean_script_exits_0_with_a_summary() -> None:
    code, out, _ = run(str(FIXTURES / "ok_torchrun_basic.py"))
    assert code == 0
    assert out.strip().endswith("1 file audited: no DDP pitfall found")


def test_error_finding_exits_1_compiler_style_with_why_and_fix() -> None:
    path = FIXTURES / "bad_rank0_collective.py"
    code, out, _ = run(str(path))
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith(f"{path}:33: error DDP-RANK-DIVERGENCE: dist.all_reduce runs only")
    assert lines[1].startswith("    why: Every rank must call the same collectives")
    assert "    fix:" in lines
    assert "        dist.all_reduce(metric)           # all ranks" in lines


def test_warnings_only_exit_0() -> None:
    code, out, _ = run(str(FIXTURES / "bad_find_unused.py"))
    assert code == 0
    assert "warning DDP-FIND-UNUSED" in out


def test_json_to_stdout_has_the_contract_shape(tmp_path: Path) -> None:
    bad = FIXTURES / "pair_sampler_amp.py"
    ok = FIXTURES / "ok_torchrun_basic.py"
    code, out, err = run(str(bad), str(ok), "--json", "-")
    assert code == 1
    doc = json.loads(out)  # stdout is the JSON alone; the text went to stderr
    assert doc["files"] == [str(bad), str(ok)]
    assert [(f["id"], f["line"]) for f in doc["findings"]] == [
        ("DDP-SAMPLER", 17),
        ("DDP-AUTOCAST-SCALER", 22),
    ]
    first = doc["findings"][0]
    assert {"id", "severity", "file", "line", "summary", "why", "fix"} <= set(first)
    assert first["severity"] == "error" and first["file"] == str(bad)
    assert "DDP-SAMPLER" in err
    target = tmp_path / "lint.json"
    code, out, _ = run(str(ok), "--json", str(target))
    assert code == 0
    doc = json.loads(target.read_text())
    assert (doc["files"], doc["findings"], doc["followed"]) == ([str(ok)], [], [])
    assert doc["root"] == str(Path(__file__).resolve().parents[1])  # the nearest .git


def test_unparsable_and_non_python_input_exit_2_with_a_clear_message(tmp_path: Path) -> None:
    yaml = tmp_path / "cluster.yaml"
    yaml.write_text("master: {addr: 10.0.0.1\nnodes: [a]\n")
    broken = tmp_path / "train.py"
    broken.write_text("import torch\ndef main(:\n    pass\n")
    binary = tmp_path / "model.pt"
    binary.write_bytes(b"PK\x03\x04\x00\x00torch\x00\x01")
    latin = tmp_path / "latin.py"
    latin.write_bytes("# caf\xe9\nx = 1\n".encode("latin-1"))
    missing = tmp_path / "nope.py"
    code, out, _ = run(str(yaml), str(broken), str(binary), str(latin), str(missing))
    assert code == 2
    assert f"ddptui lint: {broken}:2:10: not valid Python" in out
    assert f"ddptui lint: {yaml}:1:" in out and "not valid Python" in out
    assert f"ddptui lint: {binary}: a binary file, not Python source" in out
    assert f"ddptui lint: {latin}: not UTF-8 text" in out
    assert f"ddptui lint: {missing}: cannot read: No such file or directory" in out
    assert "0 files audited" in out and "5 could not be audited" in out


def test_a_readable_script_is_still_audited_next_to_a_broken_one(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("def (:\n")
    code, out, _ = run(str(FIXTURES / "bad_rank0_collective.py"), str(broken))
    assert code == 2  # unreadable input wins: the audit is incomplete
    assert "DDP-RANK-DIVERGENCE" in out


def test_no_traceback_from_the_real_command(tmp_path: Path) -> None:
    junk = tmp_path / "junk.py"
    junk.write_bytes(b"\xff\xfe\x00garbage")
    proc = subprocess.run(
        [sys.executable, "-m", "ddptui", "lint", str(junk), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "a binary file" in proc.stdout


def test_usage_error_without_files_exits_2() -> None:
    code, _, err = run()
    assert code == 2
    assert "Missing argument" in err


def test_config_script_is_resolved_next_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    script = tmp_path / "jobs" / "train.py"
    script.write_text((FIXTURES / "bad_no_sampler.py").read_text())
    cfg = tmp_path / "cluster.yaml"
    cfg.write_text("master: {addr: 10.0.0.1}\nnodes: [{host: a}]\nscript: jobs/train.py\n")
    assert load_config(cfg).script == str(script.resolve())
    result = lint_paths([load_config(cfg).script or ""])  # what the TUI and check show
    assert result.headline() == "train.py: 1 error (first: DDP-SAMPLER at line 13)"
    code, out, _ = run("--config", str(cfg))
    assert code == 1
    assert f"{script.resolve()}:13: error DDP-SAMPLER" in out
    cfg.write_text("master: {addr: 10.0.0.1}\nnodes: [{host: a}]\nscript: jobs/missing.py\n")
    try:
        load_config(cfg)
    except ConfigError as exc:
        assert f"{cfg}:3:1: script:" in str(exc) and "no such file" in str(exc)
    else:
        raise AssertionError("a missing script must be a config error")
    cfg.write_text("master: {addr: 10.0.0.1}\nnodes: [{host: a}]\nscript: run.sh\n")
    code, _, err = run("--config", str(cfg))
    assert code == 2
    assert "must be the path of a Python file" in err
