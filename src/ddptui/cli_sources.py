"""The cluster-source options every cluster command shares (`--slurm [JOBID]`,
`--transport`, `--master-port`, `--python`, `--hostfile`): one decorator, one loader.
The logic lives in ddptui.sources; this is only the command-line wiring."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ddptui.config import ClusterConfig, ConfigError
from ddptui.sources.resolve import SourceOptions, resolve_cluster
from ddptui.sources.slurm import SlurmError

F = TypeVar("F", bound=Callable[..., Any])


def source_options(f: F) -> F:
    """Add the options; the command receives them as one `sources: SourceOptions`."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        kwargs["sources"] = SourceOptions(
            slurm=kwargs.pop("slurm"),
            transport=kwargs.pop("transport"),
            master_port=kwargs.pop("master_port"),
            python=kwargs.pop("python"),
            hostfile=kwargs.pop("hostfile"),
        )
        return f(*args, **kwargs)

    options = [
        click.option(
            "--slurm",
            "slurm",
            is_flag=False,
            flag_value="",
            default=None,
            metavar="[JOBID]",
            help="The nodes of a Slurm job (default $SLURM_JOB_ID), reached with srun.",
        ),
        click.option(
            "--transport",
            type=click.Choice(["ssh", "srun", "local"]),
            help="How probes reach the nodes (default: srun with --slurm, else SSH).",
        ),
        click.option(
            "--master-port", type=click.IntRange(1, 65535), help="MASTER_PORT (default 29500)."
        ),
        click.option("--python", metavar="PATH", help="The nodes' python (default python3)."),
        click.option(
            "--hostfile", metavar="PATH", help="The nodes from an MPI/DeepSpeed hostfile."
        ),
    ]
    out: Any = wrapper
    for option in reversed(options):
        out = option(out)
    return out  # type: ignore[no-any-return]


def load_cluster(config: str | None, sources: SourceOptions) -> tuple[ClusterConfig, str]:
    """The cluster to work on; a config or Slurm problem is exit 2 with its reason."""
    from ddptui.cli import _fatal_config, _load

    if not sources.any:
        return _load(config)
    try:
        cfg, source, _ = resolve_cluster(config, sources)
    except ConfigError as exc:
        _fatal_config(exc)
        raise AssertionError from None  # unreachable
    except SlurmError as exc:
        click.secho(f"ddptui: {exc}", fg="red", err=True)
        sys.exit(2)
    return cfg, source
