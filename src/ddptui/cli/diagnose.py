"""`ddptui diagnose [--config CONFIG] PATH...`: post-mortem of log files.

Local files (plain or gzip), `-` for standard input, and with --config `NODE:GLOB` /
`*:GLOB` read on the nodes.  Lines from every input are merged in time order, classified
with the knowledge base, and the first cause is named with its fix.

Exit codes (CONTRACT.md): 0 nothing wrong found, 1 a cause found, 2 usage/config/
unreadable input, 3 internal error."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, TextIO

import click

from ddptui.cli.common import (
    EXIT_FAIL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    cluster_source_options,
    has_cluster_source,
    last_resort,
    load_config_or_exit,
    print_config_error,
    refuse_unwritable,
    report_options,
)

if TYPE_CHECKING:
    from ddptui.report.schema import ReportModel


@click.command("diagnose")
@click.argument("paths", nargs=-1, metavar="PATH...")
@click.option(
    "--config", "config_path", metavar="CONFIG", help="Cluster config: NODE:GLOB is read on NODE."
)
@cluster_source_options
@report_options(stdout=("json", "markdown", "html"))
@click.option(
    "--max-mb",
    type=click.IntRange(1, 4096),
    default=64,
    show_default=True,
    help="With --config: read at most the last this many MiB of each file on a node.",
)
@last_resort
def diagnose(
    paths: tuple[str, ...],
    config_path: str | None,
    json_path: str | None,
    md_path: str | None,
    html_path: str | None,
    max_mb: int,
) -> None:
    """Post-mortem of log files: name the first failure and its fix.

    \b
    ddptui diagnose rank0.log rank1.log          local files (plain or .gz)
    journalctl -u train | ddptui diagnose -      standard input
    ddptui diagnose --config c.yaml '*:/var/log/train/*.log'   read on every node
    """
    if not paths:
        raise click.UsageError("give at least one log file, '-' for standard input, or NODE:GLOB")
    outputs = [("json", json_path), ("markdown", md_path), ("html", html_path)]
    if sum(1 for _, p in outputs if p == "-") > 1:
        raise click.UsageError("only one report can go to standard output ('-')")
    refuse_unwritable(outputs)
    human = sys.stderr if any(p == "-" for _, p in outputs) else sys.stdout
    if has_cluster_source():  # --slurm [J] / --hostfile: NODE:GLOB is read on those nodes
        from ddptui.cluster import remember

        cluster, config_path = load_config_or_exit(config_path)
        remember(config_path, cluster)
    try:
        code = _run(paths, config_path, outputs, human, max_mb)
    except KeyboardInterrupt:
        click.echo("ddptui: interrupted", err=True)
        code = EXIT_INTERRUPTED
    sys.exit(code)


def _run(
    paths: tuple[str, ...],
    config_path: str | None,
    outputs: list[tuple[str, str | None]],
    human: TextIO,
    max_mb: int,
) -> int:
    from ddptui.config import ConfigError
    from ddptui.logs.reader import InputError
    from ddptui.logs.session import SpecError, run_diagnosis

    try:
        diag, report, seconds = run_diagnosis(
            paths, config_path=config_path, stdin=sys.stdin.buffer, max_bytes=max_mb << 20
        )
    except SpecError as exc:
        raise click.UsageError(str(exc)) from None
    except ConfigError as exc:
        print_config_error(exc)
        return EXIT_USAGE
    except InputError as exc:
        click.secho(f"ddptui: {exc}", fg="red", err=True)
        return EXIT_USAGE
    try:
        _print_human(diag, report, human, seconds)
        _write(report, outputs)
    except BrokenPipeError:  # `ddptui diagnose x.log | head`: the reader left, not a bug
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    if diag.problems:
        return EXIT_USAGE
    return EXIT_FAIL if diag.failed else EXIT_OK


def _write(report: ReportModel, outputs: list[tuple[str, str | None]]) -> None:
    from ddptui.report.export import render, write_report

    for fmt, path in outputs:
        if not path:
            continue
        if path == "-":
            sys.stdout.write(render(report, fmt))
            continue
        try:
            written = write_report(report, fmt, path)
        except OSError as exc:
            click.secho(f"ddptui: cannot write {path}: {exc.strerror or exc}", fg="red", err=True)
            continue
        click.echo(f"{fmt}: {written}", err=True)


def _print_human(diag: Any, report: ReportModel, out: TextIO, seconds: float) -> None:
    from ddptui.logs.render import human_lines

    for problem in diag.problems:
        click.secho(f"ddptui: {problem}", fg="red", err=True)
    for line in human_lines(diag, seconds):
        click.echo(line, file=out)
