"""`ddptui report SESSION`: a saved session (or a `check --json` report) as Markdown,
HTML or JSON again."""

from __future__ import annotations

import sys
from typing import Any

import click

from ddptui.cli.common import EXIT_USAGE, refuse_unwritable


def load_session(path: str) -> dict[str, Any]:
    """The saved report at path; a file that is not one is said and exits 2."""
    from ddptui.report.schema import ReportError, load_report

    try:
        return load_report(path)
    except ReportError as exc:
        click.secho(f"ddptui: {exc}", fg="red", err=True)
        sys.exit(EXIT_USAGE)


@click.command()
@click.argument("session")
@click.option("--markdown", "md_path", metavar="P", help="Write Markdown to P ('-' = stdout).")
@click.option("--html", "html_path", metavar="P", help="Write HTML to P ('-' = stdout).")
@click.option("--json", "json_path", metavar="P", help="Write the JSON again to P ('-' = stdout).")
def report(session: str, md_path: str | None, html_path: str | None, json_path: str | None) -> None:
    """Convert a saved session (or `check --json` report) to Markdown / HTML.

    With no option, the Markdown goes to stdout. Sessions are autosaved under
    $XDG_STATE_HOME/ddptui/sessions (default ~/.local/state/ddptui/sessions).
    """
    from ddptui.report.export import render, write_report

    data = load_session(session)
    outputs = [("markdown", md_path), ("html", html_path), ("json", json_path)]
    if not any(p for _, p in outputs):
        outputs = [("markdown", "-")]
    refuse_unwritable(outputs)
    for fmt, path in outputs:
        if not path:
            continue
        if path == "-":
            sys.stdout.write(render(data, fmt))
            continue
        try:
            written = write_report(data, fmt, path)
        except OSError as exc:
            click.secho(f"ddptui: cannot write {path}: {exc.strerror or exc}", fg="red", err=True)
            sys.exit(EXIT_USAGE)
        click.echo(f"{fmt}: {written}", err=True)
