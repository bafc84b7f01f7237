"""`ddptui replay SESSION`: a saved session in the TUI, read-only."""

from __future__ import annotations

import sys

import click

from ddptui.cli.common import EXIT_USAGE, has_terminal, last_resort
from ddptui.cli.report import load_session


@click.command()
@click.argument("session")
@last_resort
def replay(session: str) -> None:
    """Reopen a saved session in the TUI, read-only: checklist, findings, logs, metrics."""
    data = load_session(session)
    if not has_terminal():
        click.secho("ddptui replay needs a terminal; `ddptui report` converts a session.", err=True)
        sys.exit(EXIT_USAGE)
    from ddptui.ui.app import DdptuiApp

    sys.exit(DdptuiApp.replay(data, session).run() or 0)
