"""Command line: `ddptui [CONFIG]`, `ddptui check`, `validate`, `schema`, `--version`."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

import click

from ddptui import __version__
from ddptui.cli_sources import load_cluster, source_options
from ddptui.config import ClusterConfig, ConfigError, json_schema
from ddptui.sources.resolve import SourceOptions

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class _DefaultGroup(click.Group):
    """`ddptui cluster.yaml` and `ddptui` both mean `ddptui open ...`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and not args[0].startswith("-")):
            args = ["open", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_DefaultGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="ddptui")
def main() -> None:
    """Find why a multi-node PyTorch DDP job will not start, hangs or crawls.

    \b
    ddptui CONFIG          walk the checklist on the cluster in CONFIG
    ddptui                 the same on the embedded local demo
    ddptui check CONFIG    headless run for CI and Slurm (exit 0 pass, 1 fail)
    ddptui report SESSION  a saved session as Markdown / HTML
    ddptui replay SESSION  a saved session in the TUI, read-only
    """


def _load(config: str | None) -> tuple[ClusterConfig, str]:
    from ddptui.demo import config_or_demo

    try:
        return config_or_demo(config), config or "<embedded demo>"
    except ConfigError as exc:
        _fatal_config(exc)
        raise AssertionError from None  # unreachable


def _report_load_error(exc: BaseException) -> int:
    """A config that failed to load inside the TUI (the app has exited): say why."""
    if isinstance(exc, ConfigError):
        _print_config_error(exc)
        return EXIT_USAGE
    return _internal_error(exc)


def _print_config_error(exc: ConfigError) -> None:
    click.secho("ddptui: invalid config", fg="red", bold=True, err=True)
    for problem in exc.problems:
        click.echo(f"  {problem}", err=True)


def _fatal_config(exc: ConfigError) -> None:
    _print_config_error(exc)
    sys.exit(EXIT_USAGE)


@main.command("open", hidden=True)
@click.argument("config", required=False)
@source_options
def open_cmd(config: str | None, sources: SourceOptions) -> None:
    """The interactive walkthrough (the TUI). Without a terminal it runs headless."""
    cfg, source = load_cluster(config, sources)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        click.secho(
            "(no terminal: running the checklist headless; `ddptui check` does this explicitly)",
            dim=True,
            err=True,
        )
        sys.exit(_run_check(cfg, source, None, None, None, None))
    from ddptui.ui.app import DdptuiApp

    try:
        code = DdptuiApp(cfg, source).run()
    except Exception:  # noqa: BLE001 - last resort: a bug in ddptui is exit 3, not a traceback
        sys.exit(_internal_error())
    sys.exit(code or 0)


@main.command()
@click.argument("config", required=False)
@click.option("--json", "json_path", metavar="P", help="Write the JSON report to P ('-' = stdout).")
@click.option("--markdown", "md_path", metavar="P", help="Write a Markdown report to P.")
@click.option("--html", "html_path", metavar="P", help="Write an HTML report to P.")
@click.option("--steps", metavar="a,b", help="Only these steps (ssh is always run).")
@click.option("--timeout", type=float, metavar="S", help="Per-step timeout in seconds.")
@click.option(
    "--metrics/--no-metrics",
    default=True,
    help="Stream the nodes' GPU/CPU/NIC metrics into the report (default: on).",
)
@source_options
def check(
    config: str | None,
    sources: SourceOptions,
    json_path: str | None,
    md_path: str | None,
    html_path: str | None,
    steps: str | None,
    timeout: float | None,
    metrics: bool,
) -> None:
    """Run the checklist headless; exit 0 when every step passes, 1 when one fails."""
    cfg, source = load_cluster(config, sources)
    if timeout is not None:
        if timeout <= 0:
            raise click.BadParameter("must be a positive number of seconds", param_hint="--timeout")
        cfg = cfg.model_copy(update={"timeouts": cfg.timeouts.model_copy(update={"step": timeout})})
    from ddptui.checklist.registry import parse_steps

    try:
        step_ids = parse_steps(steps)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--steps") from None
    _refuse_unwritable([("json", json_path), ("markdown", md_path), ("html", html_path)])
    sys.exit(_run_check(cfg, source, step_ids, json_path, md_path, html_path, metrics=metrics))


def _refuse_unwritable(outputs: list[tuple[str, str | None]]) -> None:
    """Usage error for the first --FORMAT path a report cannot be written to."""
    for fmt, path in outputs:
        if path and path != "-" and (problem := _unwritable(path)):
            raise click.BadParameter(problem, param_hint=f"--{fmt}")


def _unwritable(path: str) -> str | None:
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


@main.command()
@click.argument("config")
def validate(config: str) -> None:
    """Parse and validate CONFIG; exit 0 when valid, 2 when not."""
    cfg, _ = _load(config)
    click.echo(
        f"{config}: valid ({len(cfg.nodes)} node(s), master {cfg.master.addr}:{cfg.master.port})"
    )


@main.command()
@click.option("--report", "of_report", is_flag=True, help="The report JSON's schema instead.")
def schema(of_report: bool) -> None:
    """Print the JSON Schema of cluster.yaml (or, with --report, of the report JSON)."""
    if of_report:
        from ddptui.report.schema import report_schema

        click.echo(json.dumps(report_schema(), indent=2))
        return
    click.echo(json.dumps(json_schema(), indent=2))


def _load_session(path: str) -> dict[str, Any]:
    from ddptui.report.schema import ReportError, load_report

    try:
        return load_report(path)
    except ReportError as exc:
        click.secho(f"ddptui: {exc}", fg="red", err=True)
        sys.exit(EXIT_USAGE)


@main.command()
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

    data = _load_session(session)
    outputs = [("markdown", md_path), ("html", html_path), ("json", json_path)]
    if not any(p for _, p in outputs):
        outputs = [("markdown", "-")]
    _refuse_unwritable(outputs)
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


@main.command()
@click.argument("session")
def replay(session: str) -> None:
    """Reopen a saved session in the TUI, read-only: checklist, findings, logs, metrics."""
    data = _load_session(session)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        click.secho("ddptui replay needs a terminal; `ddptui report` converts a session.", err=True)
        sys.exit(EXIT_USAGE)
    from ddptui.ui.app import DdptuiApp

    try:
        code = DdptuiApp.replay(data, session).run()
    except Exception:  # noqa: BLE001 - last resort: a bug in ddptui is exit 3, not a traceback
        sys.exit(_internal_error())
    sys.exit(code or 0)


# --------------------------------------------------------------------------- check


def _run_check(
    cfg: ClusterConfig,
    source: str,
    step_ids: list[str] | None,
    json_path: str | None,
    md_path: str | None,
    html_path: str | None,
    *,
    metrics: bool = True,
) -> int:
    from ddptui.checklist.registry import ORDER
    from ddptui.headless import HeadlessPrinter

    step_ids = step_ids or list(ORDER)
    out = sys.stderr if json_path == "-" else sys.stdout
    printer = HeadlessPrinter(cfg, source, step_ids, out)
    try:
        report, interrupted, saver = asyncio.run(
            _session(cfg, source, step_ids, printer, metrics=metrics)
        )
    except Exception:  # noqa: BLE001 - last resort: a bug in ddptui is exit 3, not a traceback
        return _internal_error()
    if interrupted:
        printer.interrupted()
        printer.saved(saver)
        return EXIT_INTERRUPTED
    printer.summary(report)
    printer.saved(saver)
    try:
        _write_reports(report, json_path, md_path, html_path)
    except OSError as exc:
        where = f" (the session is saved in {saver.path})" if saver.saves else ""
        click.secho(f"ddptui: cannot write the report: {exc}{where}", fg="red", err=True)
        return EXIT_USAGE
    if any(step["status"] == "error" for step in report["steps"]):
        return EXIT_INTERNAL  # ddptui could not run a step: its own bug, said per step
    if report["verdict"] == "fail":
        return EXIT_FAIL
    return EXIT_OK


async def _session(
    cfg: ClusterConfig, source: str, step_ids: list[str], printer: Any, *, metrics: bool = True
) -> tuple[dict[str, Any], bool, Any]:
    """The run core, headless: the printer subscribes; Ctrl-C/SIGTERM stop it."""
    from ddptui.checklist.run import RunCore, RunEvent

    core = RunCore(cfg, source, metrics=metrics, selected=tuple(step_ids))

    def show(event: RunEvent) -> None:
        if event.kind == "node" and event.node and event.node_result and event.step:
            printer.node(event.step, event.node, event.node_result)
        elif event.kind == "step" and event.result is not None:
            printer.step(event.result)

    core.subscribe(show)
    with CtrlC() as ctrl_c:
        try:
            printer.start()
            if (line := core.script_headline()) is not None:
                printer.note(line)
            await core.run_steps(step_ids)
        except asyncio.CancelledError:
            if not ctrl_c.hit:
                raise
        finally:
            # Whatever happened, nothing we started may outlive us on any node.
            await asyncio.shield(core.stop())
    interrupted = ctrl_c.hit
    return core.report(), interrupted, core.saver


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


def _write_reports(
    report: dict[str, Any], json_path: str | None, md_path: str | None, html_path: str | None
) -> None:
    from ddptui.report.export import render, write_report

    if json_path == "-":
        sys.stdout.write(render(report, "json"))
    elif json_path:
        write_report(report, "json", json_path)
    if md_path:
        write_report(report, "markdown", md_path)
    if html_path:
        write_report(report, "html", html_path)


def _internal_error(exc: BaseException | None = None) -> int:
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


from ddptui.cli_job import job as _job_command  # noqa: E402 - registered after main exists

main.add_command(_job_command)

from ddptui.cli_lint import lint as _lint_command  # noqa: E402 - registered after main exists

main.add_command(_lint_command)

from ddptui.cli_diagnose import diagnose as _diagnose_command  # noqa: E402 - after main

main.add_command(_diagnose_command)
