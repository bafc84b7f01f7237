"""`ddptui validate CONFIG`: parse and validate a cluster.yaml (exit 0 valid, 2 not)."""

from __future__ import annotations

import click

from ddptui.cli.common import load_config_or_exit


@click.command()
@click.argument("config")
def validate(config: str) -> None:
    """Parse and validate CONFIG; exit 0 when valid, 2 when not."""
    cfg, _ = load_config_or_exit(config)
    click.echo(
        f"{config}: valid ({len(cfg.nodes)} node(s), master {cfg.master.addr}:{cfg.master.port})"
    )
