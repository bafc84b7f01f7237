"""Launch-environment audit across nodes: pure rules over what the env probe saw.

Core layer: stdlib and ddptui.diagnosis only (rule parameters in envkb, finding text in
kb/checklist.yaml and signatures.yaml, inputs and helpers in envfacts, interface rules
in envrules_net). Values arrive already
redacted on the node ("<redacted:HASH>", probes/env.py); they are compared as
opaque strings and shown only in that form. Rules follow
reference/failure-signatures.md section 4 and its ENV-* / BOOT-* entries.
"""

from __future__ import annotations

__all__ = [
    "EXPECTED_TO_DIFFER",
    "GIB",
    "EnvFacts",
    "audit_env",
    "env_diff",
    "nccl_ifname_match",
    "visible_gpu_count",
]

from collections import Counter
from collections.abc import Callable, Iterable

from ddptui.diagnosis.envfacts import (
    EnvFacts,
    Rule,
    _by,
    _int,
    _Job,
    _kv,
    _make,
    _names,
    _outliers,
    _per_node,
    _set,
    _where,
)
from ddptui.diagnosis.envkb import (
    DEPRECATED,
    EXPECTED_TO_DIFFER,
    GIB,
    NCCL_MUST_MATCH,
    NCCL_PER_NODE,
    PET_VARS,
    TORCH_SHOULD_MATCH,
)
from ddptui.diagnosis.envrules_net import _rule_gloo_count, _rule_gloo_syntax, _rule_ifname
from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.netmatch import _same_addr, is_loopback, nccl_ifname_match

# --------------------------------------------------------------------------- master, ranks, world


def _master_finding(
    nodes: list[EnvFacts], job: _Job, var: str, expected: str, same: Callable[[str], bool | None]
) -> Finding | None:
    # A loopback MASTER_ADDR on a multi-node job is ENV-MASTER-LOOPBACK's finding.
    seen = {
        f.name: v
        for f in nodes
        if (v := _set(f, var)) is not None
        and not (var == "MASTER_ADDR" and job.multi_host and is_loopback(v))
    }
    verdicts = {n: same(v) for n, v in seen.items()}
    bad = [f for f in nodes if f.name in verdicts and verdicts[f.name] is not True]
    if not bad:
        return None
    across = len({v.strip().lower() for v in seen.values()}) > 1
    definite = across or any(verdicts[f.name] is False for f in bad)
    how = "differs across nodes and from" if across else "differs from"
    maybe = "" if definite else " (a name vs an address: check both resolve alike)"
    return _make(
        "ENV-MASTER-MISMATCH",
        [f.name for f in bad],
        f"{var} {how} the config's {expected}{maybe}",
        [_kv(f, var) for f in nodes] + [f"config: master {job.master_addr}:{job.master_port}"],
        severity="error" if definite else "warning",
        var=var,
        expected=expected,
        place=_where(bad[0], var),
    )


def _rule_master(nodes: list[EnvFacts], job: _Job) -> list[Finding]:
    found = [
        _master_finding(
            nodes, job, "MASTER_ADDR", job.master_addr, lambda v: _same_addr(v, job.master_addr)
        ),
        _master_finding(
            nodes, job, "MASTER_PORT", str(job.master_port), lambda v: _int(v) == job.master_port
        ),
    ]
    return [x for x in found if x is not None]


def _rule_master_loopback(nodes: list[EnvFacts], job: _Job) -> list[Finding]:
    if not job.multi_host:
        return []
    if is_loopback(job.master_addr):
        return [
            _make(
                "ENV-MASTER-LOOPBACK",
                [f.name for f in nodes],
                f"master.addr {job.master_addr} in "
                f"the config is loopback on a {job.nnodes}-node job",
                [f"config: master {job.master_addr}:{job.master_port}"],
                var="master.addr",
                place="in the config",
            )
        ]
    bad = [f for f in nodes if is_loopback(_set(f, "MASTER_ADDR") or "x")]
    return (
        [
            _make(
                "ENV-MASTER-LOOPBACK",
                [f.name for f in bad],
                f"MASTER_ADDR={bad[0].env['MASTER_ADDR']} is loopback on a {job.nnodes}-node job",
                [_kv(f, "MASTER_ADDR") for f in nodes],
                var="MASTER_ADDR",
                place=_where(bad[0], "MASTER_ADDR"),
            )
        ]
        if bad
        else []
    )


def _node_rank_problems(f: EnvFacts, var: str, nodes: list[EnvFacts], job: _Job) -> list[str]:
    n = _int(f.env[var])
    if n is None:
        return ["is not an integer"]
    problems = []
    if not 0 <= n < job.nnodes:
        problems.append(f"is out of range 0..{job.nnodes - 1}")
    if n != f.rank:
        # Only the node whose value is wrong is named; its twin holding the right value is fine.
        problems.append(f"but {f.name} is node {f.rank} in the config")
        twins = [g.name for g in nodes if g is not f and _int(g.env.get(var, "x")) == n]
        problems += [f"also claimed by {_names(twins)}"] if twins else []
    return problems


def _rule_node_rank(nodes: list[EnvFacts], job: _Job) -> list[Finding]:
    out = []
    for var in ("NODE_RANK", "GROUP_RANK"):
        for f in nodes:
            problems = _node_rank_problems(f, var, nodes, job) if _set(f, var) else []
            if problems:
                out.append(
                    _make(
                        "ENV-DUPRANK",
                        [f.name],
                        f"{var}={f.env[var]} {'; '.join(problems)}",
                        [_kv(g, var) for g in nodes],
                    )
                )
    return out


def _rule_rank(nodes: list[EnvFacts], job: _Job) -> list[Finding]:
    ranks = {f.name: _int(v) for f in nodes if (v := _set(f, "RANK")) is not None}
    world, counts = job.world, Counter(r for r in ranks.values() if r is not None)
    groups = [
        (
            [n for n, r in ranks.items() if r is not None and counts[r] > 1],
            "is the same on several nodes",
        ),
        (
            [
                n
                for n, r in ranks.items()
                if r is None or r < 0 or (world is not None and r >= world)
            ],
            f"is not in 0..{world - 1 if world else 'WORLD_SIZE-1'}",
        ),
    ]
    return [
        _make(
            "ENV-DUPRANK",
            bad,
            f"RANK {what}",
            [_kv(f, "RANK") for f in nodes],
        )
        for bad, what in groups
        if bad
    ]


def _rule_world_size(nodes: list[EnvFacts], job: _Job) -> list[Finding]:
    values = {f.name: v for f in nodes if (v := _set(f, "WORLD_SIZE")) is not None}
    world = job.world
    if world is not None:
        bad = [n for n, v in values.items() if _int(v) != world]
        why = f"differs from nnodes x nproc_per_node = {job.nnodes} x {job.nproc} = {world}"
    else:
        bad = _outliers(values) if len(set(values.values())) > 1 else []
        why = "differs across nodes"
    if not bad:
        return []
    return [
        _make(
            "ENV-WORLDSIZE",
            bad,
            f"WORLD_SIZE {why}",
            [_kv(f, "WORLD_SIZE") for f in nodes],
            place=_where(_by(nodes, bad[0]), "WORLD_SIZE"),
        )
    ]


# --------------------------------------------------------------------------- NCCL_* consistency


def _diff(
    var: str,
    values: dict[str, str | None],
    nodes: list[EnvFacts],
    *,
    critical: bool = False,
    also: str = "",
) -> Finding:
    # A variable that must match (NCCL_MUST_MATCH) makes the difference an error.
    return _make(
        "ENV-NCCL-DIFF",
        _outliers(values),
        f"{var} differs from the other nodes",
        [_kv(f, var) if var in f.env or also not in f.env else _kv(f, also) for f in nodes],
        severity="error" if critical else None,
        var=var,
        detail=f"Here {also} counts where {var} is unset." if also else "",
    )


def _rule_nccl_diff(nodes: list[EnvFacts], job: _Job) -> list[Finding]:
    skip = NCCL_PER_NODE | set(DEPRECATED) | {"NCCL_COMM_ID"}
    out = []
    for var in sorted({k for f in nodes for k in f.env if k.startswith("NCCL_")} - skip):
        values = {f.name: f.env.get(var) for f in nodes}
        if len(set(values.values())) > 1:
            out.append(_diff(var, values, nodes, critical=var in NCCL_MUST_MATCH))
    for var in TORCH_SHOULD_MATCH:
        old = var.removeprefix("TORCH_")
        values = {f.name: f.env.get(var, f.env.get(old)) for f in nodes}
        if len(set(values.values())) > 1:
            out.append(
                _diff(var, values, nodes, also=old)
            )
    return out


def _rule_deprecated(nodes: list[EnvFacts], job: _Job) -> list[Finding]:
    out = []
    for old in DEPRECATED:
        new, holders = "TORCH_" + old, [f for f in nodes if old in f.env]
        ev = [
            line
            for f in holders
            for line in [_kv(f, old)]
            + (
                [f"{_kv(f, new)} -- differs; PyTorch uses this one (the TORCH_ name wins)"]
                if new in f.env and f.env[new] != f.env[old]
                else []
            )
        ]
        if holders:
            out.append(
                _make(
                    "ENV-DEPRECATED",
                    [f.name for f in holders],
                    f"{old} is deprecated; use {new}",
                    ev,
                    old=old,
                    new=new,
                )
            )
    return out


def _rule_comm_id(nodes: list[EnvFacts], job: _Job) -> list[Finding]:
    holders = [f for f in nodes if "NCCL_COMM_ID" in f.env]
    return (
        [
            _make(
                "BOOT-COMMID",
                [f.name for f in holders],
                "NCCL_COMM_ID is set",
                [_kv(f, "NCCL_COMM_ID") for f in holders],
                severity="warning",  # set, not yet fatal: a warning until a log line shows it
            )
        ]
        if holders
        else []
    )


# --------------------------------------------------------------------------- GPUs, shm, PET_*


def visible_gpu_count(value: str, gpu_count: int | None) -> int:
    """How many devices CUDA_VISIBLE_DEVICES exposes. CUDA stops at the first invalid
    entry (negative, out of range, repeated); UUIDs and MIG ids count one each."""
    text = value.strip()
    if text.lower() in ("", "-1", "none", "nodevfiles", "void"):
        return 0
    seen: list[str] = []
    for raw in text.split(","):
        item = raw.strip()
        index = _int(item) if item.lstrip("-").isdigit() else None
        if (
            not item
            or item in seen
            or (index is not None and (index < 0 or (gpu_count is not None and index >= gpu_count)))
        ):
            break
        seen.append(item)
    return len(seen)


def _ordinal_problem(f: EnvFacts, job: _Job) -> str | None:
    if f.gpu_count == 0:
        return None  # a CPU node: the job runs gloo there, there is no ordinal to get wrong
    cvd = _set(f, "CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        visible = visible_gpu_count(cvd, f.gpu_count)
        if isinstance(job.nproc, int) and visible < job.nproc:
            return f"={cvd} exposes {visible} GPU(s) but nproc_per_node is {job.nproc}"
        return f"={cvd} hides every GPU (nproc_per_node: {job.nproc})" if visible == 0 else None
    if isinstance(job.nproc, int) and f.gpu_count and job.nproc > f.gpu_count:
        return f" is unset and {f.name} has {f.gpu_count} GPU(s), but nproc_per_node is {job.nproc}"
    return None


@_per_node
def _rule_ordinal(f: EnvFacts, job: _Job) -> Finding | None:
    problem = _ordinal_problem(f, job)
    gpus = "unknown" if f.gpu_count is None else str(f.gpu_count)
    return (
        None
        if problem is None
        else _make(
            "ENV-ORDINAL",
            [f.name],
            f"CUDA_VISIBLE_DEVICES{problem}",
            [_kv(f, "CUDA_VISIBLE_DEVICES") + f"; GPUs found: {gpus}"],
        )
    )


@_per_node
def _rule_shm(f: EnvFacts, job: _Job) -> Finding | None:
    if f.shm_bytes is None or f.shm_bytes >= GIB:
        return None
    mib = f.shm_bytes // (1024 * 1024)
    return _make(
        "SHM-SIZE",
        [f.name],
        f"/dev/shm is only {mib} MiB (under 1 GiB)",  # noqa: S108 - a fact, not a temp file
        [f"{f.name}: /dev/shm size {f.shm_bytes} bytes ({mib} MiB)"],
        severity="warning",  # small, not yet failed: a warning until a log line shows it
    )


def _pet_agrees(var: str, value: str, wanted: str) -> bool:
    if var == "PET_MASTER_ADDR":
        return _same_addr(value, wanted) is not False
    if var == "PET_NPROC_PER_NODE" and wanted == "gpu":
        return value.strip() in ("gpu", "gpus")
    return value.strip() in (wanted, f"{wanted}:{wanted}")  # PET_NNODES may be "min:max"


@_per_node
def _rule_pet(f: EnvFacts, job: _Job) -> Finding | None:
    want = {
        "PET_NNODES": str(job.nnodes),
        "PET_NODE_RANK": str(f.rank),
        "PET_MASTER_ADDR": job.master_addr,
        "PET_MASTER_PORT": str(job.master_port),
        # torchrun spells the config's "gpus" as "gpu"
        "PET_NPROC_PER_NODE": "gpu" if job.nproc == "gpus" else str(job.nproc),
    }
    bad = [v for v in PET_VARS if (x := _set(f, v)) is not None and not _pet_agrees(v, x, want[v])]
    if not bad:
        return None
    return _make(
        "ENV-PET-OVERRIDE",
        [f.name],
        f"{bad[0]}={f.env[bad[0]]} disagrees with the config ({want[bad[0]]})",
        [_kv(f, v) for v in bad],
        variables=" ".join(bad),
        place=_where(f, bad[0]),
        config=", ".join(f"{v}={want[v]}" for v in bad),
    )


# --------------------------------------------------------------------------- entry points

RULES: tuple[Rule, ...] = (
    _rule_master,
    _rule_master_loopback,
    _rule_node_rank,
    _rule_rank,
    _rule_world_size,
    _rule_ifname,
    _rule_gloo_syntax,
    _rule_gloo_count,
    _rule_nccl_diff,
    _rule_deprecated,
    _rule_comm_id,
    _rule_ordinal,
    _rule_shm,
    _rule_pet,
)


def audit_env(
    nodes: list[EnvFacts],
    *,
    master_addr: str,
    master_port: int,
    nproc_per_node: int | str,
    single_host: bool = False,
) -> list[Finding]:
    """Every finding for these nodes (given in config order, rank = position), rule by rule.
    single_host: every node is this machine (the local demo), so loopback is right."""
    job = _Job(master_addr, master_port, nproc_per_node, len(nodes), single_host)
    return [x for rule in RULES for x in rule(nodes, job)]


def env_diff(
    nodes: list[EnvFacts], *, ignore: Iterable[str] = ()
) -> dict[str, dict[str, str | None]]:
    """Variables whose (redacted) values differ across nodes, set-vs-unset included:
    {VAR: {node: value or None}}, sorted by name. Pass ignore=EXPECTED_TO_DIFFER to
    leave out what differs by nature (hostnames, ranks, interface names)."""
    names = sorted({k for f in nodes for k in f.env} - set(ignore))
    values = {var: {f.name: f.env.get(var) for f in nodes} for var in names}
    return {var: v for var, v in values.items() if len(set(v.values())) > 1}
