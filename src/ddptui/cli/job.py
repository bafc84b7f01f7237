"""`ddptui job CONFIG`: look at the user's own running, hung or crashed training job on
every node, without touching it, and say who is stuck or dead, where, and why.

Exit codes (CONTRACT.md): 0 healthy and progressing, 1 a problem named, 2 usage/config
error or no job found (candidates listed), 3 internal error, 130 interrupted."""

from __future__ import annotations

import asyncio
import re
import sys
from typing import Any, TextIO

import click

from ddptui.cli.common import (
    EXIT_FAIL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CtrlC,
    cluster_source_options,
    has_cluster_source,
    last_resort,
    load_config_or_exit,
    refuse_unwritable,
    report_options,
    write_reports,
)

STATE_LABEL = {
    "healthy": "HEALTHY",
    "waiting": "WAITING",
    "hung": "HUNG",
    "crashed": "CRASHED",
    "slow": "SLOW",
    "stalled": "NO PROGRESS",
    "none": "NO JOB FOUND",
    "ended": "ENDED",
    "ambiguous": "AMBIGUOUS",
    "unknown": "UNKNOWN",
}


@click.command("job")
@click.argument("config", required=False)
@cluster_source_options
@click.option("--match", metavar="REGEX", help="Pick the job whose torchrun command line matches.")
@report_options()
@click.option(
    "--log",
    "logs",
    multiple=True,
    metavar="[NODE:]GLOB",
    help="The job's log files to read on the nodes (repeatable); NODE: limits one to a node.",
)
@click.option(
    "--window",
    type=float,
    default=2.0,
    show_default=True,
    metavar="S",
    help="Seconds between the two looks at every rank.",
)
@click.option(
    "--hang-after",
    type=float,
    default=60.0,
    show_default=True,
    metavar="S",
    help="A rank waited on for this long without output is hung, not slow.",
)
@click.option("--stacks/--no-stacks", default=True, help="Read every rank's stack with py-spy.")
@click.option("--native", is_flag=True, help="Native (C/C++) frames too (py-spy --native).")
@click.option(
    "--allow-pause",
    is_flag=True,
    help="Allow a blocking py-spy dump (pauses a rank for milliseconds) when the "
    "non-blocking one fails.",
)
@click.option("--py-spy", "pyspy", metavar="PATH", help="py-spy on the nodes, when not on PATH.")
@click.option(
    "--trigger-dump",
    is_flag=True,
    help="Ask torch to write fresh flight recorder dumps (TORCH_NCCL_DEBUG_INFO_PIPE_FILE).",
)
@click.option(
    "--fr-dump",
    "fr_dumps",
    multiple=True,
    metavar="PATH",
    help="A flight recorder dump on this machine to read too (repeatable; CONFIG may then "
    "be left out).",
)
@click.option(
    "--ras-reply",
    "ras_replies",
    multiple=True,
    metavar="PATH",
    help="A saved NCCL RAS answer on this machine to read too (repeatable).",
)
@last_resort
def job(
    config: str | None,
    match: str | None,
    json_path: str | None,
    md_path: str | None,
    html_path: str | None,
    logs: tuple[str, ...],
    window: float,
    hang_after: float,
    stacks: bool,
    native: bool,
    allow_pause: bool,
    pyspy: str | None,
    trigger_dump: bool,
    fr_dumps: tuple[str, ...],
    ras_replies: tuple[str, ...],
) -> None:
    """Look at your own training job on every node (read-only): who is stuck or dead, where, why."""
    from ddptui.job.run import JobOptions

    if match is not None:
        try:
            re.compile(match)
        except re.error as exc:
            raise click.BadParameter(
                f"not a regular expression: {exc}", param_hint="--match"
            ) from None
    if native and not allow_pause:
        raise click.BadParameter(
            "py-spy reads native frames only by pausing the rank; add --allow-pause",
            param_hint="--native",
        )
    if not 0.5 <= window <= 30:
        raise click.BadParameter("must be between 0.5 and 30 seconds", param_hint="--window")
    from ddptui.job.offline import OfflineInputError, offline_findings

    if config is None and not (fr_dumps or ras_replies or has_cluster_source()):
        raise click.UsageError("give CONFIG (or files to read with --fr-dump / --ras-reply)")
    try:
        offline = offline_findings(fr_dumps, ras_replies)
    except OfflineInputError as exc:
        raise click.BadParameter(str(exc), param_hint="--fr-dump/--ras-reply") from None
    refuse_unwritable([("json", json_path), ("markdown", md_path), ("html", html_path)])
    out = sys.stderr if json_path == "-" else sys.stdout
    if config is None and not has_cluster_source():
        sys.exit(_offline(offline, out, json_path, md_path, html_path))
    cfg, source = load_config_or_exit(config)
    options = JobOptions(
        match=match,
        window_s=window,
        stacks=stacks,
        native=native,
        allow_pause=allow_pause,
        pyspy=pyspy,
        logs=tuple(logs),
        trigger_dump=trigger_dump,
        hang_after_s=hang_after,
    )
    sys.exit(_run(cfg, source, options, out, json_path, md_path, html_path, offline))


def _run(
    cfg: Any,
    source: str,
    options: Any,
    out: TextIO,
    json_path: str | None,
    md_path: str | None,
    html_path: str | None,
    offline: Any = (),
) -> int:
    from dataclasses import replace

    click.echo(
        f"ddptui job · {source} · {len(cfg.nodes)} node(s) · looking for "
        f"{options.window_s:.0f} s …",
        file=out,
    )
    try:
        look = asyncio.run(_look(cfg, source, options))
    except KeyboardInterrupt:
        click.echo("interrupted; nothing was left on the nodes", file=out)
        return EXIT_INTERRUPTED
    if look is None:
        click.echo("interrupted; nothing was left on the nodes", file=out)
        return EXIT_INTERRUPTED
    if offline:
        look = replace(look, findings=(*look.findings, *offline))
    master = {"addr": cfg.master.addr, "port": cfg.master.port}
    return _finish(look, cfg.name, master, out, json_path, md_path, html_path)


def _finish(
    look: Any,
    name: str | None,
    master: dict[str, Any],
    out: TextIO,
    json_path: str | None,
    md_path: str | None,
    html_path: str | None,
) -> int:
    from ddptui.job.report import build_job_report

    report = build_job_report(look, name, master)
    print_look(look, out)
    try:
        write_reports(report, json_path, md_path, html_path)
    except OSError as exc:
        click.secho(f"ddptui: cannot write the report: {exc}", fg="red", err=True)
        return EXIT_USAGE
    return exit_code(look.state, look.findings)


def _offline(
    findings: Any, out: TextIO, json_path: str | None, md_path: str | None, html_path: str | None
) -> int:
    """Only files from this machine: what the dumps and RAS answers say."""
    from ddptui.checklist.runner import utcnow
    from ddptui.job.run import JobLook, JobOptions
    from ddptui.job.verdict import JobVerdict

    order = {"error": 0, "warning": 1, "info": 2}
    ordered = tuple(sorted(findings, key=lambda f: order[f.severity]))
    hung = any(f.id in ("JOB-FR-TIMEOUT", "JOB-FR-DIVERGED", "JOB-RAS-PROBLEM") for f in ordered)
    headline = ordered[0].summary if ordered else "the files hold nothing to judge"
    now = utcnow()
    verdict = JobVerdict("hung" if hung else "unknown", headline, (), (), (), None, (), (), ())
    look = JobLook("<files>", now, now, 0.0, (), (), verdict, ordered, JobOptions())
    return _finish(look, None, {}, out, json_path, md_path, html_path)


def exit_code(state: str, findings: Any) -> int:
    """0 healthy, 1 a problem named, 2 no job (or which one is unclear)."""
    if state in ("none", "ambiguous", "ended"):
        return EXIT_USAGE
    if state in ("hung", "crashed", "slow", "stalled"):
        return EXIT_FAIL
    return EXIT_FAIL if any(f.severity == "error" for f in findings) else EXIT_OK


async def _look(cfg: Any, source: str, options: Any) -> Any:
    from ddptui.job.run import look_at_job

    with CtrlC() as ctrl_c:
        try:
            return await look_at_job(cfg, source, options)
        except asyncio.CancelledError:
            if not ctrl_c.hit:
                raise
            return None


def _size(n: int | None) -> str:
    if n is None:
        return "n/a"
    for unit in ("B", "K", "M", "G"):
        if n < 1024:
            return f"{n:.0f}{unit}"
        n = n // 1024
    return f"{n}T"


def print_look(look: Any, out: TextIO) -> None:
    """The human summary: verdict, ranks table, stack groups, findings with their fix."""
    from ddptui.glyphs import severity_glyph
    from ddptui.job.report import rank_row

    v = look.verdict
    colour = {"healthy": "green", "waiting": "cyan", "slow": "yellow", "stalled": "yellow"}.get(
        v.state, "red"
    )
    click.secho(
        f"\n  {STATE_LABEL.get(v.state, v.state.upper())}  {v.headline}",
        fg=colour,
        bold=True,
        file=out,
    )
    if v.ranks:
        click.echo("\n  rank  node        pid      st  cpu%   rss    quiet   where", file=out)
        for r in v.ranks:
            row = rank_row(r)
            age = row["output_age_s"]
            click.echo(
                f"  {row['rank'] if row['rank'] is not None else '?':<5} {r.node[:11]:<11} {r.pid:<8} "
                f"{r.state:<3} {r.cpu_pct if r.cpu_pct is not None else 'n/a':<6} {_size(r.rss_bytes):<6} "
                f"{(f'{age:.0f}s' if age is not None else 'n/a'):<7} {row['doing'] or r.stack_error or 'n/a'}",
                file=out,
            )
    if v.groups and len(v.groups) > 1:
        from ddptui.job.stacks import describe_groups

        click.echo(
            f"\n  stacks: {describe_groups(v.groups, {r.rank: r.node for r in v.ranks if r.rank is not None})}",
            file=out,
        )
    click.echo("", file=out)
    for f in look.findings:
        click.echo(f"  {severity_glyph(f.severity)} {f.id}: {f.summary}", file=out)
        if f.severity != "info" or f.id == "JOB-HEALTHY":
            click.echo(f"      why: {f.cause}", file=out)
            click.echo(f"      fix: {f.fix}", file=out)
            for line in f.evidence[:4]:
                click.secho(f"      seen: {line[:200]}", dim=True, file=out)
    for note in look.notes:
        click.secho(f"  ({note})", dim=True, file=out)
    click.echo(f"\n  looked in {look.duration_s:.1f} s; the job was not touched", file=out)
