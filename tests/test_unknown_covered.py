"""An honest unknown is said only while something is left unexplained; a cause found by a
rule over facts is placed on the input whose lines it quotes.

When a rule over facts explains the failure line LOGS-UNRECOGNIZED would quote (and quotes
that line itself), the user is not also told of an "Unrecognized failure" on the same line;
a failure line the rule does not quote keeps the unknown beside it. Real capture: Lightning's
`devices=2` on a machine with one GPU (tests/fixtures/gpu-h200/launch/lt-devices2.log).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from ddptui.cli import main

CAPTURE = Path(__file__).parent / "fixtures" / "gpu-h200" / "launch" / "lt-devices2.log"


def diagnose(path: Path) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["diagnose", str(path), "--json", "-"])
    assert result.exit_code == 1, result.output
    step: dict[str, Any] = json.loads(result.stdout)["steps"][0]
    return step


def findings(path: Path) -> list[dict[str, Any]]:
    return list(diagnose(path)["findings"])


def test_explained_failure_line_is_not_also_unrecognized() -> None:
    got = findings(CAPTURE)
    assert got[0]["id"] == "TORCHRUN-NPROC-GPUS"
    assert "LOGS-UNRECOGNIZED" not in [f["id"] for f in got]
    assert "(explains the failure line)" in str(got[0]["summary"])


def test_the_input_a_node_less_finding_quotes_is_not_reported_clean() -> None:
    """The rule names no host (none is stated), yet its evidence is this file's lines: the
    file's own row fails with that cause instead of "nothing known found"."""
    step = diagnose(CAPTURE)
    (row,) = step["nodes"].values()
    assert row["status"] == "fail"
    assert "nothing known found" not in row["summary"]
    assert "Lightning was asked for GPUs [0, 1]" in row["summary"]
    assert step["findings"][0]["nodes"] == [str(CAPTURE)]


def test_a_failure_line_the_rule_does_not_quote_stays_unrecognized(tmp_path: Path) -> None:
    text = CAPTURE.read_text(encoding="utf-8")
    log = tmp_path / "two.log"  # a second, unrelated failure on another process
    log.write_text(text + "[rank1]: FrobnicatorError: flux capacitor drained\n", encoding="utf-8")
    got = findings(log)
    assert got[0]["id"] == "TORCHRUN-NPROC-GPUS"
    # logs39: the code's own exceptions are LOGS-APP-EXCEPTION, which quotes each rank's too
    unknown = [f for f in got if f["id"] in ("LOGS-UNRECOGNIZED", "LOGS-APP-EXCEPTION")]
    assert unknown and "FrobnicatorError" in json.dumps(unknown[0]["evidence"])
