"""From what the user gave (a cluster.yaml, `--slurm [J]`, `--hostfile`, overrides) to
one ClusterConfig with concrete nodes. Core layer: asks Slurm, reads files, no UI. It
stands above both config.py and the sources (sources/), which config.py itself uses to
expand `nodes:`: kept out of sources/ so no arrow runs from config back up to it."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from ddptui.config import ClusterConfig, ConfigError, NodeConfig, SlurmSpec, load_config
from ddptui.sources.slurm import SlurmError, SlurmJob, job_id_from, query_job


@dataclass(frozen=True)
class SourceOptions:
    """The command line's say on where the nodes come from and how they are reached."""

    slurm: str | None = None  # None: not given; "": given without a job id
    transport: str | None = None
    master_port: int | None = None
    python: str | None = None
    hostfile: str | None = None

    @property
    def any(self) -> bool:
        return any(
            v is not None
            for v in (self.slurm, self.transport, self.master_port, self.python, self.hostfile)
        )


def resolve_cluster(
    config: str | None, opts: SourceOptions
) -> tuple[ClusterConfig, str, SlurmJob | None]:
    """(config, source label, the Slurm job or None). Raises ConfigError (file problems)
    or SlurmError (the job cannot be used): both are usage errors (exit 2)."""
    base: ClusterConfig | None = load_config(config) if config else None
    source = config or ""
    if opts.hostfile is not None:
        from ddptui.sources.nodes import hostfile_nodes

        data: dict[str, object] = {"hostfile": opts.hostfile}
        try:
            nodes = hostfile_nodes(data, Path.cwd())["nodes"]
        except ValueError as exc:
            raise ConfigError([f"--hostfile: {exc}"]) from None
        node_cfgs = [NodeConfig(host=str(n["host"])) for n in nodes]
        base = (
            base.with_nodes(node_cfgs, slurm=None, hostfile=opts.hostfile)
            if base is not None
            else ClusterConfig(nodes=node_cfgs, hostfile=opts.hostfile).with_nodes(node_cfgs)
        )
        source = source or opts.hostfile
    job: SlurmJob | None = None
    wants_slurm = opts.slurm is not None or (base is not None and base.slurm is not None)
    if not wants_slurm and opts.transport == "srun":
        wants_slurm = True  # srun needs a job: $SLURM_JOB_ID, or say how to give one
    if wants_slurm:
        given = opts.slurm if opts.slurm else (base.slurm.job if base and base.slurm else None)
        job = query_job(job_id_from(given))
        nodes = [NodeConfig(host=n) for n in job.nodes]
        template = base or ClusterConfig(slurm=SlurmSpec(job=job.id))
        transport = opts.transport or (base.transport if base else None) or "srun"
        base = template.with_nodes(
            nodes, slurm=SlurmSpec(job=job.id), transport=transport, hostfile=None
        )
        source = source or f"slurm job {job.id}"
    if base is None:
        raise ConfigError(["no cluster given"])  # callers handle the demo before this
    update: dict[str, object] = {}
    if opts.transport is not None:
        update["transport"] = opts.transport
    if opts.python is not None:
        update["python"] = opts.python
    if opts.master_port is not None:
        update["master"] = base.master.model_copy(update={"port": opts.master_port})
    if update:
        base = base.model_copy(update=update)
    if base.transport == "srun" and base.slurm is None:
        raise SlurmError("--transport srun needs a Slurm job: add --slurm [JOBID]")
    if base.transport == "srun" and shutil.which("srun") is None:
        raise SlurmError(
            "srun is not on PATH: the srun transport starts every probe with `srun --overlap`; "
            "load Slurm's module (or PATH), or use --transport ssh to reach the same hosts"
        )
    return base, source, job


_RESOLVED: dict[str, ClusterConfig] = {}


def remember(label: str, config: ClusterConfig) -> None:
    """A cluster resolved from the command line (a Slurm job, a hostfile), findable by
    its label where code takes a config path (diagnose's NODE:GLOB readers)."""
    _RESOLVED[label] = config


def config_for(path: str) -> ClusterConfig:
    """The cluster behind a label or a cluster.yaml path."""
    return _RESOLVED.get(path) or load_config(path)
