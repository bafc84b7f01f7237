"""`ddptui check [CONFIG]`: the checklist headless, for CI and Slurm.

Exit codes (CONTRACT.md): 0 every step passes, 1 one fails, 2 usage/config error,
3 internal error (a step ddptui could not run), 130 interrupted."""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING

import click

from ddptui.cli.common import (
    EXIT_FAIL,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CtrlC,
    cluster_source_options,
    last_resort,
    load_config_or_exit,
    refuse_unwritable,
    report_options,
    write_reports,
)

if TYPE_CHECKING:
    from ddptui.config import ClusterConfig
    from ddptui.headless import HeadlessPrinter
    from ddptui.report.autosave import Autosaver
    from ddptui.report.schema import ReportModel


@click.command()
@click.argument("config", required=False)
@cluster_source_options
@report_options()
@click.option("--steps", metavar="a,b", help="Only these steps (ssh is always run).")
@click.option("--timeout", type=float, metavar="S", help="Per-step timeout in seconds.")
@click.option(
    "--metrics/--no-metrics",
    default=True,
    help="Stream the nodes' GPU/CPU/NIC metrics into the report (default: on).",
)
@last_resort
def check(
    config: str | None,
    json_path: str | None,
    md_path: str | None,
    html_path: str | None,
    steps: str | None,
    timeout: float | None,
    metrics: bool,
) -> None:
    """Run the checklist headless; exit 0 when every step passes, 1 when one fails."""
    cfg, source = load_config_or_exit(config)
    if timeout is not None:
        if timeout <= 0:
            raise click.BadParameter("must be a positive number of seconds", param_hint="--timeout")
        cfg = cfg.model_copy(update={"timeouts": cfg.timeouts.model_copy(update={"step": timeout})})
    from ddptui.checklist.registry import parse_steps

    try:
        step_ids = parse_steps(steps)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--steps") from None
    refuse_unwritable([("json", json_path), ("markdown", md_path), ("html", html_path)])
    sys.exit(run_check(cfg, source, step_ids, json_path, md_path, html_path, metrics=metrics))


def run_check(
    cfg: ClusterConfig,
    source: str,
    step_ids: list[str] | None,
    json_path: str | None = None,
    md_path: str | None = None,
    html_path: str | None = None,
    *,
    metrics: bool = True,
) -> int:
    """The checklist, printed as it runs, then the reports asked for; the exit code."""
    from ddptui.checklist.registry import ORDER
    from ddptui.headless import HeadlessPrinter

    step_ids = step_ids or list(ORDER)
    out = sys.stderr if json_path == "-" else sys.stdout
    printer = HeadlessPrinter(cfg, source, step_ids, out)
    report, interrupted, saver = asyncio.run(
        _session(cfg, source, step_ids, printer, metrics=metrics)
    )
    if interrupted:
        printer.interrupted()
        printer.saved(saver)
        return EXIT_INTERRUPTED
    printer.summary(report)
    printer.saved(saver)
    try:
        write_reports(report, json_path, md_path, html_path)
    except OSError as exc:
        where = f" (the session is saved in {saver.path})" if saver and saver.saves else ""
        click.secho(f"ddptui: cannot write the report: {exc}{where}", fg="red", err=True)
        return EXIT_USAGE
    if any(step.status == "error" for step in report.steps):
        return EXIT_INTERNAL  # ddptui could not run a step: its own bug, said per step
    if report.verdict == "fail":
        return EXIT_FAIL
    return EXIT_OK


async def _session(
    cfg: ClusterConfig,
    source: str,
    step_ids: list[str],
    printer: HeadlessPrinter,
    *,
    metrics: bool = True,
) -> tuple[ReportModel, bool, Autosaver | None]:
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
    return core.report(), ctrl_c.hit, core.saver
