"""`ddptui schema [--report]`: the JSON Schema of cluster.yaml, or of the report JSON."""

from __future__ import annotations

import json

import click


@click.command()
@click.option("--report", "of_report", is_flag=True, help="The report JSON's schema instead.")
def schema(of_report: bool) -> None:
    """Print the JSON Schema of cluster.yaml (or, with --report, of the report JSON)."""
    if of_report:
        from ddptui.report.schema import report_schema

        click.echo(json.dumps(report_schema(), indent=2))
        return
    from ddptui.config import json_schema

    click.echo(json.dumps(json_schema(), indent=2))
