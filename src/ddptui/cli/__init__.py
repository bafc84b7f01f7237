"""Command line: `ddptui [CONFIG]`, `ddptui check`, `report`, `replay`, `job`, `lint`,
`diagnose`, `validate`, `schema`, `--version`. One module per command; what they share is
in ddptui.cli.common. This module only assembles the group."""

from __future__ import annotations

import click

from ddptui import __version__
from ddptui.cli.check import check
from ddptui.cli.diagnose import diagnose
from ddptui.cli.job import job
from ddptui.cli.lint import lint
from ddptui.cli.open import open_cmd
from ddptui.cli.replay import replay
from ddptui.cli.report import report
from ddptui.cli.schema import schema
from ddptui.cli.validate import validate


class _DefaultGroup(click.Group):
    """`ddptui cluster.yaml` and `ddptui` both mean `ddptui open ...`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        from ddptui.cli.common import CLUSTER_SOURCE_OPTIONS

        # `ddptui --slurm [J]` (a cluster source, no CONFIG) opens the TUI too
        sources = {f"--{name.replace('_', '-')}" for _, name in CLUSTER_SOURCE_OPTIONS}
        if (
            not args
            or (args[0] not in self.commands and not args[0].startswith("-"))
            or args[0].split("=", 1)[0] in sources
        ):
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


for _command in (open_cmd, check, validate, schema, report, replay, job, lint, diagnose):
    main.add_command(_command)

__all__ = ["main"]
