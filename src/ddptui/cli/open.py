"""`ddptui [CONFIG]` (the hidden `open`): the interactive walkthrough. Without a terminal
it runs the checklist headless, like `ddptui check`."""

from __future__ import annotations

import sys

import click

from ddptui.cli.check import run_check
from ddptui.cli.common import cluster_source_options, has_terminal, last_resort, load_config_or_exit


@click.command("open", hidden=True)
@click.argument("config", required=False)
@cluster_source_options
@last_resort
def open_cmd(config: str | None) -> None:
    """The interactive walkthrough (the TUI). Without a terminal it runs headless."""
    cfg, source = load_config_or_exit(config)
    if not has_terminal():
        click.secho(
            "(no terminal: running the checklist headless; `ddptui check` does this explicitly)",
            dim=True,
            err=True,
        )
        sys.exit(run_check(cfg, source, None))
    from ddptui.ui.app import DdptuiApp

    sys.exit(DdptuiApp(cfg, source).run() or 0)
