"""`ddptui diagnose [--config CONFIG] PATH...`: post-mortem of log files.

Local files (plain or gzip), `-` for standard input, and with --config `NODE:GLOB` /
`*:GLOB` read on the nodes.  Lines from every input are merged in time order, classified
with the knowledge base, and the first cause is named with its fix.

Exit codes (CONTRACT.md): 0 nothing wrong found, 1 a cause found, 2 usage/config/
unreadable input, 3 internal error."""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO

import click

from ddptui.cli_sources import source_options
from ddptui.sources.resolve import SourceOptions

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
GLYPH = {"error": "✘", "warning": "!", "info": "i"}


@click.command("diagnose")
@click.argument("paths", nargs=-1, metavar="PATH...")
@click.option(
    "--config", "config_path", metavar="CONFIG", help="Cluster config: NODE:GLOB is read on NODE."
)
@click.option("--json", "json_path", metavar="P", help="Write the JSON report to P ('-' = stdout).")
@click.option("--markdown", "md_path", metavar="P", help="Write a Markdown report to P ('-' = stdout).")
@click.option("--html", "html_path", metavar="P", help="Write an HTML report to P ('-' = stdout).")
@click.option(
    "--max-mb",
    type=click.IntRange(1, 4096),
    default=64,
    show_default=True,
    help="With --config: read at most the last this many MiB of each file on a node.",
)
@source_options
def diagnose(
    paths: tuple[str, ...],
    config_path: str | None,
    json_path: str | None,
    md_path: str | None,
    html_path: str | None,
    max_mb: int,
    sources: SourceOptions,
) -> None:
    """Post-mortem of log files: name the first failure and its fix.

    \b
    ddptui diagnose rank0.log rank1.log          local files (plain or .gz)
    journalctl -u train | ddptui diagnose -      standard input
    ddptui diagnose --config c.yaml '*:/var/log/train/*.log'   read on every node
    """
    from ddptui.cli import _internal_error, _refuse_unwritable

    if not paths:
        raise click.UsageError("give at least one log file, '-' for standard input, or NODE:GLOB")
    outputs = [("json", json_path), ("markdown", md_path), ("html", html_path)]
    if sum(1 for _, p in outputs if p == "-") > 1:
        raise click.UsageError("only one report can go to standard output ('-')")
    _refuse_unwritable(outputs)
    human = sys.stderr if any(p == "-" for _, p in outputs) else sys.stdout
    if sources.any:  # --slurm [J] / --hostfile: NODE:GLOB read on those nodes
        from ddptui.cli_sources import load_cluster
        from ddptui.sources.resolve import remember

        cluster, config_path = load_cluster(config_path, sources)
        remember(config_path, cluster)
    try:
        code = _run(paths, config_path, outputs, human, max_mb)
    except click.exceptions.Exit:
        raise
    except click.ClickException:
        raise
    except KeyboardInterrupt:
        click.echo("ddptui: interrupted", err=True)
        code = 130
    except Exception:  # noqa: BLE001 - last resort: a bug in ddptui is exit 3, not a traceback
        code = _internal_error()
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
        from ddptui.cli import _print_config_error

        _print_config_error(exc)
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


def _write(report: dict[str, Any], outputs: list[tuple[str, str | None]]) -> None:
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


def _print_human(diag: Any, report: dict[str, Any], out: TextIO, seconds: float) -> None:
    from ddptui.logs.render import human_lines

    for problem in diag.problems:
        click.secho(f"ddptui: {problem}", fg="red", err=True)
    for line in human_lines(diag, seconds):
        click.echo(line, file=out)
