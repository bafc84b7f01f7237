"""What every command shares: exit codes, loading the config (and saying why it failed),
refusing report paths that cannot be written, writing reports, Ctrl-C, and the last
resort that turns a bug in ddptui into exit 3 instead of a traceback.

The commands (one module each in this package) import from here; nothing here imports a
command."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar

import click

if TYPE_CHECKING:
    from ddptui.config import ClusterConfig, ConfigError
    from ddptui.report.export import Report

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
DEMO_SOURCE = "<embedded demo>"

P = ParamSpec("P")
R = TypeVar("R")


# --------------------------------------------------------------------------- config


def load_config_or_exit(config: str | None) -> tuple[ClusterConfig, str]:
    """The cluster in CONFIG (the embedded demo without one) and how to name its source;
    an invalid config is said, problem by problem, and exits 2. With a cluster source
    option (--slurm, --hostfile, ...) the nodes come from there (ddptui.sources); a job
    that cannot be used is said and exits 2 too."""
    from ddptui.config import ConfigError
    from ddptui.demo import config_or_demo

    if has_cluster_source():
        from ddptui.cluster import SourceOptions, resolve_cluster
        from ddptui.sources.slurm import SlurmError

        try:
            cfg, label, _ = resolve_cluster(config, SourceOptions(**cluster_source()))
        except ConfigError as exc:
            fatal_config(exc)
        except SlurmError as exc:
            click.secho(f"ddptui: {exc}", fg="red", err=True)
            sys.exit(EXIT_USAGE)
        return cfg, label
    try:
        return config_or_demo(config), config or DEMO_SOURCE
    except ConfigError as exc:
        fatal_config(exc)


def print_config_error(exc: ConfigError) -> None:
    click.secho("ddptui: invalid config", fg="red", bold=True, err=True)
    for problem in exc.problems:
        click.echo(f"  {problem}", err=True)


def fatal_config(exc: ConfigError) -> NoReturn:
    print_config_error(exc)
    sys.exit(EXIT_USAGE)


def report_load_error(exc: BaseException) -> int:
    """A config that failed to load inside the TUI (the app has exited): say why."""
    from ddptui.config import ConfigError

    if isinstance(exc, ConfigError):
        print_config_error(exc)
        return EXIT_USAGE
    return internal_error(exc)


# Options that say where the cluster comes from besides CONFIG (a scheduler's allocation, a
# hostfile, ...): (option decorator, parameter name) pairs. Every command that runs on a
# cluster (open, check, job, diagnose) wears @cluster_source_options and so gets them all;
# load_config_or_exit() is where their values are read (ddptui.cluster resolves them).
CLUSTER_SOURCE_OPTIONS: tuple[tuple[Callable[[Callable[..., Any]], Callable[..., Any]], str], ...] = (
    (
        click.option(
            "--slurm", "slurm", is_flag=False, flag_value="", default=None, metavar="[JOBID]",
            help="The nodes of a Slurm job (default $SLURM_JOB_ID), reached with srun.",
        ),
        "slurm",
    ),
    (
        click.option(
            "--transport", type=click.Choice(["ssh", "srun", "local"]),
            help="How probes reach the nodes (default: srun with --slurm, else SSH).",
        ),
        "transport",
    ),
    (
        click.option(
            "--master-port", "master_port", type=click.IntRange(1, 65535),
            help="MASTER_PORT (default 29500).",
        ),
        "master_port",
    ),
    (click.option("--python", metavar="PATH", help="The nodes' python (default python3)."), "python"),
    (click.option("--hostfile", metavar="PATH", help="The nodes from an MPI/DeepSpeed hostfile."), "hostfile"),
)  # fmt: skip
_SOURCE_KEY = "ddptui.cluster_source"


def cluster_source_options(command: Callable[P, R]) -> Callable[P, R]:
    """Give command the CLUSTER_SOURCE_OPTIONS. Their values do not reach the command's
    own parameters: they are kept on the click context (cluster_source() reads them), so
    adding a source is a change here and in load_config_or_exit, not in every command."""
    names = [name for _, name in CLUSTER_SOURCE_OPTIONS]

    @functools.wraps(command)
    def with_source(*args: P.args, **kwargs: P.kwargs) -> R:
        source = {name: kwargs.pop(name) for name in names if name in kwargs}
        click.get_current_context().meta[_SOURCE_KEY] = source
        return command(*args, **kwargs)

    decorated: Callable[..., Any] = with_source
    for option, _ in reversed(CLUSTER_SOURCE_OPTIONS):
        decorated = option(decorated)
    return decorated


def cluster_source() -> dict[str, Any]:
    """The values of the CLUSTER_SOURCE_OPTIONS the running command was given."""
    ctx = click.get_current_context(silent=True)
    return dict(ctx.meta.get(_SOURCE_KEY, {})) if ctx is not None else {}


def has_cluster_source() -> bool:
    """Whether a cluster source option (--slurm, --hostfile, ...) was given."""
    return any(v is not None for v in cluster_source().values())


# --------------------------------------------------------------------------- reports


def report_options(
    *, stdout: tuple[str, ...] = ("json",)
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """--json / --markdown / --html P; `stdout` names the formats that may go to '-'."""
    std = " ('-' = stdout)"

    def decorate(command: Callable[P, R]) -> Callable[P, R]:
        for fmt, dest, label in reversed(REPORT_FORMATS):
            help_text = f"Write {label} to P{std if fmt in stdout else ''}."
            command = click.option(f"--{fmt}", dest, metavar="P", help=help_text)(command)
        return command

    return decorate


REPORT_FORMATS = (
    ("json", "json_path", "the JSON report"),
    ("markdown", "md_path", "a Markdown report"),
    ("html", "html_path", "an HTML report"),
)


def refuse_unwritable(outputs: list[tuple[str, str | None]]) -> None:
    """Usage error for the first --FORMAT path a report cannot be written to."""
    for fmt, path in outputs:
        if path and path != "-" and (problem := unwritable(path)):
            raise click.BadParameter(problem, param_hint=f"--{fmt}")


def unwritable(path: str) -> str | None:
    """Why a report cannot be written to path (checked before a run, not after it)."""
    target = Path(path).expanduser()
    if target.is_dir():
        return f"{path} is a directory; give a file name"
    parent = target.parent
    if not parent.is_dir():
        return f"directory {parent} does not exist"
    if not os.access(parent, os.W_OK):
        return f"directory {parent} is not writable"
    return None


def write_reports(
    report: Report,
    json_path: str | None,
    md_path: str | None,
    html_path: str | None,
) -> None:
    """The report in each format asked for; JSON may go to stdout ('-')."""
    from ddptui.report.export import render, write_report

    if json_path == "-":
        sys.stdout.write(render(report, "json"))
    elif json_path:
        write_report(report, "json", json_path)
    if md_path:
        write_report(report, "markdown", md_path)
    if html_path:
        write_report(report, "html", html_path)


# --------------------------------------------------------------------------- Ctrl-C, bugs


class CtrlC:
    """Within `with CtrlC() as c:` on a running loop, Ctrl-C and SIGTERM cancel the
    current task (the run stops, bounded, instead of a KeyboardInterrupt anywhere);
    `c.hit` says whether that happened, so the caller exits 130."""

    def __init__(self) -> None:
        self.hit = False
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()

    def _interrupt(self) -> None:
        self.hit = True
        if self._task is not None:
            self._task.cancel()

    def __enter__(self) -> CtrlC:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._loop.add_signal_handler(sig, self._interrupt)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._loop.remove_signal_handler(sig)


def internal_error(exc: BaseException | None = None) -> int:
    """Say that ddptui itself failed (with the traceback under DDPTUI_DEBUG=1); exit 3."""
    click.secho(
        "ddptui: internal error (a bug in ddptui, not in your cluster)",
        fg="red",
        bold=True,
        err=True,
    )
    exc = exc or sys.exc_info()[1]
    if os.environ.get("DDPTUI_DEBUG") and exc is not None:
        traceback.print_exception(exc)
    else:
        click.echo(f"  {type(exc).__name__}: {exc}", err=True)
        click.echo("  set DDPTUI_DEBUG=1 to see the traceback, and please report it.", err=True)
    return EXIT_INTERNAL


def last_resort(command: Callable[P, R]) -> Callable[P, R]:
    """A bug in ddptui is exit 3 with one clear line, never a traceback. Click's own
    exceptions (usage errors, exits) and KeyboardInterrupt/SystemExit pass through."""

    @functools.wraps(command)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception:  # noqa: BLE001 - last resort: a bug in ddptui is exit 3, not a traceback
            sys.exit(internal_error())

    return guarded


def has_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()
