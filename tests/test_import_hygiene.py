"""Layering: core and transport never import textual; core never imports asyncssh; nothing
on the login node imports torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

CORE = [
    "ddptui.config",
    "ddptui.diagnosis.model",
    "ddptui.diagnosis.envaudit",
    "ddptui.checklist.runner",
    "ddptui.checklist.registry",
    "ddptui.report.json_report",
    "ddptui.headless",
    "ddptui.probeset",
    "ddptui.transport",
    "ddptui.checklist.run",
    "ddptui.diagnosis.logstore",
    "ddptui.diagnosis.kb",
    "ddptui.diagnosis.ranking",
    "ddptui.logs.diagnose",
    "ddptui.job.verdict",
    "ddptui.job.flight",
    "ddptui.job.ras",
    "ddptui.job.stacks",
    "ddptui.lint",
]


def loaded_after(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize("module", CORE)
def test_core_imports_no_ui_no_ssh_no_torch(module: str) -> None:
    mods = loaded_after(module)
    assert not {m for m in mods if m.split(".")[0] in ("textual", "asyncssh", "torch")}


def test_transport_never_imports_textual_or_torch() -> None:
    mods = loaded_after("ddptui.transport.ssh")
    assert "asyncssh" in mods
    assert not {m for m in mods if m.split(".")[0] in ("textual", "torch")}


def test_cli_start_imports_nothing_heavy() -> None:
    mods = loaded_after("ddptui.cli")
    assert not {m for m in mods if m.split(".")[0] in ("textual", "torch", "asyncssh")}


def test_ui_never_imports_asyncssh_directly() -> None:
    mods = loaded_after("ddptui.ui.app")
    assert "textual" in mods
    assert not {m for m in mods if m.split(".")[0] in ("asyncssh", "torch")}


def test_tui_first_frame_path_skips_click_pydantic_and_yaml() -> None:
    # `ddptui [CONFIG]` in a terminal: launch + the app are all that load before the
    # first frame; the config validator and the YAML parser come after it.
    mods = loaded_after("ddptui.launch, ddptui.ui.app")
    heavy = {m for m in mods if m.split(".")[0] in ("click", "pydantic", "ruamel", "asyncssh")}
    assert not heavy, sorted(heavy)[:10]


def test_launch_knows_every_subcommand() -> None:
    from ddptui.cli import main
    from ddptui.launch import COMMANDS, wants_tui

    assert set(main.commands) == COMMANDS  # else `ddptui NEWCMD` would open the TUI
    assert not wants_tui(["check", "c.yaml"]) and not wants_tui(["--version"])
    assert not wants_tui(["a.yaml", "b.yaml"])
