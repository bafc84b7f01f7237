"""cluster.yaml: typed models, loading with file:line:column errors, JSON Schema.

Core layer: imports neither textual nor asyncssh.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ConfigError(Exception):
    """A config that cannot be used; str() is the full message for the user."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def _check_env(env: Any) -> Any:
    """Names must be valid; scalar values (1, true, 2.5) become strings as a shell would see them."""
    if not isinstance(env, dict):
        return env
    out: dict[str, Any] = {}
    for key, value in env.items():
        if isinstance(value, bool):
            out[key] = "1" if value else "0"
        elif isinstance(value, (int, float)):
            out[key] = str(value)
        else:
            out[key] = value
    for key in out:
        if not ENV_NAME.match(key):
            raise ValueError(
                f"environment variable name {key!r} is not valid "
                "(letters, digits and '_', not starting with a digit)"
            )
    return out


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)


FIRST_NODE = "(first node)"  # master.addr until the nodes are known (Slurm job, hostfile)


class Master(_Model):
    addr: str = Field(default=FIRST_NODE, min_length=1)
    """MASTER_ADDR as the nodes see it (an IP or a hostname); default: the first node."""
    port: int = Field(default=29500, ge=1, le=65535)
    """MASTER_PORT: the TCP port of the rendezvous store on the master."""


class NodeConfig(_Model):
    host: str = Field(min_length=1)
    """SSH target: hostname, IP, or a ~/.ssh/config alias; "local" runs on this machine without SSH."""
    name: str | None = Field(default=None, min_length=1)
    """Display name (default: host)."""
    user: str | None = None
    """SSH user (default: from ~/.ssh/config, else the current user)."""
    port: int | None = Field(default=None, ge=1, le=65535)
    """SSH port (default: from ~/.ssh/config, else 22)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra launch environment on this node; overrides the global env."""
    python: str | None = None
    """Interpreter on this node that has torch (default: the global python)."""

    @field_validator("env", mode="before")
    @classmethod
    def _env_names(cls, v: Any) -> Any:
        return _check_env(v)

    @property
    def display(self) -> str:
        return self.name or self.host


class SSHConfig(_Model):
    known_hosts: str | list[str] | None = None
    """known_hosts file(s) used to verify host keys (default: ~/.ssh/known_hosts and /etc/ssh/ssh_known_hosts)."""
    accept_new_host_keys: bool = False
    """Accept and record host keys not yet known (trust on first use). A CHANGED key is never accepted."""
    identity_file: str | list[str] | None = None
    """Private key file(s) to offer; the SSH agent and ~/.ssh/config are honoured too."""
    config: str | None = None
    """OpenSSH client config to read (default: ~/.ssh/config)."""
    connect_timeout: float = Field(default=10, gt=0, le=600)
    """Seconds to wait for a node's SSH connection and login."""
    keepalive_interval: float = Field(default=5, gt=0, le=600)
    """Seconds between keepalives; a node that misses 3 in a row is reported lost."""
    max_concurrent_connects: int = Field(default=8, ge=1, le=256)
    """Bound on simultaneous connection attempts (OpenSSH MaxStartups drops beyond 10 by default)."""
    jump_host: str | None = None
    """Bastion to reach the nodes through (ProxyJump in ~/.ssh/config works too)."""


class Timeouts(_Model):
    step: float = Field(default=30, gt=0, le=3600)
    """Seconds one checklist step may take on one node."""
    allreduce: float = Field(default=60, gt=0, le=7200)
    """Seconds the whole allreduce step may take."""
    ddp: float = Field(default=90, gt=0, le=7200)
    """Seconds the whole ddp step (a few DDP training steps on every rank) may take."""
    fabric: float = Field(default=120, gt=0, le=7200)
    """Seconds the whole fabric step (rounds of pair tests between nodes) may take."""


_SUFFIX = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}


class DdpSettings(_Model):
    model_params: int = Field(default=100_000_000, ge=1)
    """Parameters of YOUR model, for the ddp step's scaling projection: a number or 125M, 7B."""
    grad_dtype: Literal["fp32", "bf16"] = "fp32"
    """Gradient precision your job all-reduces: fp32 (4 bytes per parameter) or bf16 (2)."""
    compute_s: float | None = Field(default=None, gt=0)
    """Your model's forward+backward seconds per step on one rank, if measured (default: the probe model's, scaled)."""

    @field_validator("model_params", mode="before")
    @classmethod
    def _count(cls, v: Any) -> Any:
        if isinstance(v, str) and v.strip()[-1:].upper() in _SUFFIX:
            try:
                return round(float(v.strip()[:-1]) * _SUFFIX[v.strip()[-1].upper()])
            except ValueError:
                raise ValueError("a parameter count like 100000000, 125M or 7B") from None
        return v


class SlurmSpec(_Model):
    job: str | None = None
    """The Slurm job whose nodes to check (default: $SLURM_JOB_ID, inside salloc/sbatch)."""

    @field_validator("job", mode="before")
    @classmethod
    def _job_id(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            v = str(v)
        if isinstance(v, str) and not re.fullmatch(r"\d+(_\d+)?(\+\d+)?", v.strip()):
            raise ValueError("a Slurm job id like 1234 (or 1234_5 for an array task)")
        return v.strip() if isinstance(v, str) else v


class ClusterConfig(_Model):
    master: Master = Field(default_factory=Master)
    """Where the rendezvous store listens (rank 0); default: the first node, port 29500."""
    nodes: list[NodeConfig] = Field(default_factory=list)
    """The nodes, in NODE_RANK order; an entry may be a hostlist expression (gpu[001-064])."""
    hostfile: str | None = None
    """An MPI/DeepSpeed hostfile (`host slots=N`, or one host per line) naming the nodes."""
    slurm: SlurmSpec | None = None
    """The nodes of a Slurm job (in place of `nodes:`), reached through srun by default."""
    transport: Literal["ssh", "srun", "local"] | None = None
    """How probes reach the nodes (default: srun for a Slurm job, else SSH; "local" runs them here)."""
    name: str | None = None
    """Cluster name shown in reports and the TUI header."""
    nproc_per_node: int | Literal["gpus"] = 1
    """Processes per node for the allreduce; "gpus" means one per visible GPU."""
    python: str = "python3"
    """Interpreter on the nodes that has torch (the training environment)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Launch environment of the training job, applied on every node."""
    ssh: SSHConfig = Field(default_factory=SSHConfig)
    """How to connect to the nodes."""
    timeouts: Timeouts = Field(default_factory=Timeouts)
    """Time limits, in seconds."""
    ddp: DdpSettings = Field(default_factory=DdpSettings)
    """The ddp step's scaling projection: your model's size and gradient precision."""
    metrics_interval: float = Field(default=1.0, gt=0, le=60)
    """Seconds between live metric samples from each node."""
    script: str | None = Field(default=None, min_length=1)
    """The training job's entry point (.py, relative to this config file); `ddptui lint --config` audits it."""

    @field_validator("script")
    @classmethod
    def _python_script(cls, v: str | None) -> str | None:
        if v is not None and not v.endswith(".py"):
            raise ValueError("must be the path of a Python file (ending in .py)")
        return v

    @field_validator("env", mode="before")
    @classmethod
    def _env_names(cls, v: Any) -> Any:
        return _check_env(v)

    @field_validator("nproc_per_node", mode="before")
    @classmethod
    def _positive_nproc(cls, v: Any) -> Any:
        if v == "gpus":
            return v
        if isinstance(v, str) and v.strip().isdigit():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError('must be a positive integer or "gpus"')
        return v

    @model_validator(mode="before")
    @classmethod
    def _expand_nodes(cls, data: Any) -> Any:
        """Hostlist expressions in `nodes:` become one node each; master.addr defaults
        to the first node."""
        from ddptui.sources.nodes import expand_node_entries

        if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
            return data
        data = dict(data)
        data["nodes"] = expand_node_entries(data["nodes"])
        return data

    @model_validator(mode="after")
    def _unique_names(self) -> ClusterConfig:
        if self.slurm is not None and self.nodes and not self.hostfile:
            raise ValueError(
                "give the nodes one way: `slurm:` (the job's nodes) or `nodes:`, not both"
            )
        if self.slurm is None and not self.nodes:
            raise ValueError(
                "no nodes: give `nodes:` (hosts or hostlist expressions like gpu[001-004]), "
                "`hostfile: PATH`, or `slurm: {job: JOBID}`"
            )
        seen: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            if node.display in seen:
                raise ValueError(
                    f"node name {node.display!r} is used by nodes[{seen[node.display]}] and "
                    f"nodes[{i}]; give each node a distinct name:"
                )
            seen[node.display] = i
        return self

    def python_for(self, node: NodeConfig) -> str:
        return node.python or self.python

    @property
    def master_addr_unset(self) -> bool:
        return self.master.addr == FIRST_NODE

    def with_nodes(self, nodes: list[NodeConfig], **update: Any) -> ClusterConfig:
        """This config with these nodes (a source resolved); master.addr, when not
        given, becomes the first node's host."""
        master = self.master
        if self.master_addr_unset and nodes:
            master = master.model_copy(update={"addr": nodes[0].host})
        return self.model_copy(update={"nodes": nodes, "master": master, **update})


def json_schema() -> dict[str, Any]:
    schema = ClusterConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "ddptui cluster.yaml"
    return schema


# --------------------------------------------------------------------------- loading


def _position(node: Any, loc: tuple[int | str, ...]) -> tuple[int, int] | None:
    """Walk ruamel's round-trip tree along a pydantic error location to a (line, col)."""
    best: tuple[int, int] | None = None
    cur = node
    for part in loc:
        lc = getattr(cur, "lc", None)
        try:
            if isinstance(part, str) and lc is not None and isinstance(cur, dict) and part in cur:
                line, col = lc.key(part)
                best = (line, col)
                cur = cur[part]
            elif isinstance(part, int) and lc is not None and isinstance(cur, list):
                line, col = lc.item(part)
                best = (line, col)
                cur = cur[part]
            else:
                break
        except (KeyError, IndexError, TypeError):
            break
    if best is None and getattr(node, "lc", None) is not None:
        best = (node.lc.line, node.lc.col)
    return best


def _key_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _explain(err: dict[str, Any]) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        return "unknown key (misspelled? `ddptui schema` lists the valid keys)"
    if kind == "missing":
        return "required key is missing"
    msg = str(err["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    got = err.get("input")
    if kind not in ("missing",) and not isinstance(got, (dict, list)):
        msg += f" (got {json.dumps(got, default=str)})"
    return msg


def _yaml_syntax_problems(exc: Any, source: str) -> list[str]:
    """Where the parser noticed the error, and where the construct it was inside began
    (an unclosed `[` on line 2 is noticed on line 3: both lines are named)."""
    mark = exc.problem_mark or exc.context_mark
    where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
    problems = [f"{where}: YAML syntax error: {exc.problem or exc}"]
    ctx = exc.context_mark
    if exc.context and ctx is not None and (mark is None or ctx.line != mark.line):
        began = f"{source}:{ctx.line + 1}:{ctx.column + 1}"
        problems.append(f"{began}: ... {exc.context} that began here (is it closed?)")
    return problems


def parse_config(text: str, source: str = "<config>") -> ClusterConfig:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    yaml = YAML(typ="rt")
    try:
        data = yaml.load(text)
    except MarkedYAMLError as exc:
        raise ConfigError(_yaml_syntax_problems(exc, source)) from None
    except YAMLError as exc:
        raise ConfigError([f"{source}: YAML error: {exc}"]) from None
    if not isinstance(data, dict):
        raise ConfigError(
            [
                f"{source}:1:1: expected a mapping with at least `master:` and `nodes:`, "
                f"got {type(data).__name__ if data is not None else 'an empty file'}"
            ]
        )
    plain = _plain(data)
    if isinstance(plain.get("hostfile"), str) and "nodes" not in plain:
        from ddptui.sources.nodes import hostfile_nodes

        try:
            plain = hostfile_nodes(plain, Path(source).parent if source != "<config>" else None)
        except ValueError as exc:
            raise ConfigError([f"{source}: hostfile: {exc}"]) from None
    try:
        cfg = ClusterConfig.model_validate(plain)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            pos = _position(data, loc)
            where = f"{source}:{pos[0] + 1}:{pos[1] + 1}" if pos else source
            problems.append(f"{where}: {_key_path(loc)}: {_explain(dict(err))}")
        raise ConfigError(problems) from None
    if cfg.nodes and cfg.master_addr_unset:
        cfg = cfg.with_nodes(cfg.nodes)
    return cfg


def _plain(node: Any) -> Any:
    """ruamel round-trip containers -> plain dict/list; scalars keep their YAML type."""
    if isinstance(node, dict):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


def load_config(path: str | Path) -> ClusterConfig:
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{p}: no such file (give the path to your cluster.yaml)"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"{p}: cannot read: {exc}"]) from None
    cfg = parse_config(text, str(p))
    if cfg.script is None:
        return cfg
    script = (p.parent / Path(cfg.script).expanduser()).resolve()
    if not script.is_file():
        line = next((i for i, t in enumerate(text.splitlines(), 1) if t.startswith("script:")), 1)
        raise ConfigError(
            [f"{p}:{line}:1: script: {script}: no such file (relative to the config file)"]
        )
    return cfg.model_copy(update={"script": str(script)})
