"""Command line: `ddptui [CONFIG]`, `ddptui check`, `validate`, `schema`, `--version`."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import traceback
from typing import Any

import click

from ddptui import __version__
from ddptui.config import ClusterConfig, ConfigError, json_schema, load_config

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
    """


def _load(config: str | None) -> tuple[ClusterConfig, str]:
    if config is None:
        from ddptui.demo import demo_config

        return demo_config(), "<embedded demo>"
    try:
        return load_config(config), config
    except ConfigError as exc:
        _fatal_config(exc)
        raise AssertionError from None  # unreachable


def _fatal_config(exc: ConfigError) -> None:
    click.secho("ddptui: invalid config", fg="red", bold=True, err=True)
    for problem in exc.problems:
        click.echo(f"  {problem}", err=True)
    sys.exit(EXIT_USAGE)


@main.command("open", hidden=True)
@click.argument("config", required=False)
def open_cmd(config: str | None) -> None:
    """The interactive walkthrough (the TUI). Without a terminal it runs headless."""
    cfg, source = _load(config)
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
def check(
    config: str | None,
    json_path: str | None,
    md_path: str | None,
    html_path: str | None,
    steps: str | None,
    timeout: float | None,
) -> None:
    """Run the checklist headless; exit 0 when every step passes, 1 when one fails."""
    cfg, source = _load(config)
    if timeout is not None:
        if timeout <= 0:
            raise click.BadParameter("must be a positive number of seconds", param_hint="--timeout")
        cfg = cfg.model_copy(update={"timeouts": cfg.timeouts.model_copy(update={"step": timeout})})
    from ddptui.checklist.registry import parse_steps

    try:
        step_ids = parse_steps(steps)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--steps") from None
    sys.exit(_run_check(cfg, source, step_ids, json_path, md_path, html_path))


@main.command()
@click.argument("config")
def validate(config: str) -> None:
    """Parse and validate CONFIG; exit 0 when valid, 2 when not."""
    cfg, _ = _load(config)
    click.echo(
        f"{config}: valid ({len(cfg.nodes)} node(s), master {cfg.master.addr}:{cfg.master.port})"
    )


@main.command()
def schema() -> None:
    """Print the JSON Schema of cluster.yaml."""
    click.echo(json.dumps(json_schema(), indent=2))


# --------------------------------------------------------------------------- check


def _run_check(
    cfg: ClusterConfig,
    source: str,
    step_ids: list[str] | None,
    json_path: str | None,
    md_path: str | None,
    html_path: str | None,
) -> int:
    from ddptui.checklist.registry import ORDER
    from ddptui.headless import HeadlessPrinter

    step_ids = step_ids or list(ORDER)
    out = sys.stderr if json_path == "-" else sys.stdout
    printer = HeadlessPrinter(cfg, source, step_ids, out)
    try:
        report, interrupted = asyncio.run(_session(cfg, source, step_ids, printer))
    except Exception:  # noqa: BLE001 - last resort: a bug in ddptui is exit 3, not a traceback
        return _internal_error()
    if interrupted:
        printer.interrupted()
        return EXIT_INTERRUPTED
    printer.summary(report)
    try:
        _write_reports(report, json_path, md_path, html_path)
    except OSError as exc:
        click.secho(f"ddptui: cannot write the report: {exc}", fg="red", err=True)
        return EXIT_USAGE
    if report["verdict"] == "fail":
        return EXIT_FAIL
    if report["verdict"] == "error":
        return EXIT_INTERNAL
    return EXIT_OK


async def _session(
    cfg: ClusterConfig, source: str, step_ids: list[str], printer: Any
) -> tuple[dict[str, Any], bool]:
    from ddptui.checklist.runner import Session
    from ddptui.report.json_report import build_report

    session = Session(cfg, source, on_node=printer.node, on_step=printer.step)
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    interrupted = False

    def _interrupt() -> None:
        nonlocal interrupted
        interrupted = True
        if task is not None:
            task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, _interrupt)
    try:
        printer.start()
        await session.run(step_ids)
    except asyncio.CancelledError:
        if not interrupted:
            raise
    finally:
        # Whatever happened, nothing we started may outlive us on any node.
        await asyncio.shield(session.close())
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    return build_report(session), interrupted


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


def _internal_error() -> int:
    click.secho(
        "ddptui: internal error (a bug in ddptui, not in your cluster)",
        fg="red",
        bold=True,
        err=True,
    )
    if os.environ.get("DDPTUI_DEBUG"):
        traceback.print_exc()
    else:
        exc = sys.exc_info()[1]
        click.echo(f"  {type(exc).__name__}: {exc}", err=True)
        click.echo("  set DDPTUI_DEBUG=1 to see the traceback, and please report it.", err=True)
    return EXIT_INTERNAL
