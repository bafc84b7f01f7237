"""The findings around the verdict: nodes that could not be looked at or run no part of
the job, other jobs, why stacks are missing, unreadable output, GPU matching, NCCL RAS,
the flight recorder, the launch environment's audit and the job's own log lines."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ddptui.config import ClusterConfig
from ddptui.diagnosis.envaudit import EnvFacts, audit_env
from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.kb import kb_finding
from ddptui.job.flight import RankDump, UnsafeDump, load_dump, parse_dump
from ddptui.job.joblogs import classify
from ddptui.job.model import NodeView
from ddptui.job.ras import parse_ras
from ddptui.job.readings import flight_findings, ras_findings
from ddptui.job.stacks import rank_ranges
from ddptui.job.verdict import JobVerdict
from ddptui.transport.base import NodeTarget

_PTRACE_WORDS = ("permission denied", "operation not permitted", "eperm", "elevated permissions")
_ORDER = {"error": 0, "warning": 1, "info": 2}


def side_findings(
    views: Sequence[NodeView],
    verdict: JobVerdict,
    config: ClusterConfig,
    match: str | None,
    targets: Sequence[NodeTarget],
) -> tuple[Finding, ...]:
    out: list[Finding] = list(verdict.findings)
    found = [v for v in views if v.found]
    for v in views:
        if v.problem:
            out.append(
                kb_finding(
                    "JOB-NODE-UNREACHABLE", [v.node], f"{v.node}: {v.problem}", why=v.problem
                )
            )
    if verdict.state == "none":
        out.append(_not_found(views, config, match))
    elif found:
        for v in views:
            if not v.found and not v.problem:
                out.append(
                    kb_finding(
                        "JOB-NODE-NO-JOB",
                        [v.node],
                        f"{v.node}: no process of the job runs here",
                        [f"{c.node}: {c.cmd}" for c in v.candidates][:3],
                        node=v.node,
                    )
                )
    out += _others(views)
    out += _stack_problems(views, targets)
    out += _outputs(views)
    out += _gpu(views)
    out += _ras(views)
    out += _flight(views)
    out += _env(found, config)
    out += _logs(views, {f.id for f in out})
    first, rest = out[:1], out[1:]
    rest.sort(key=lambda f: _ORDER.get(f.severity, 3))
    return tuple(first + rest)


# What the job's own communicators say now (the flight recorder's dumps of this job, NCCL
# RAS's answer): a collective that timed out, ranks that part ways, a communicator in error
_STUCK_BY: frozenset[str] = frozenset({"JOB-FR-DIVERGED", "JOB-FR-TIMEOUT", "JOB-RAS-PROBLEM"})


def overruled(verdict: JobVerdict, findings: tuple[Finding, ...]) -> tuple[JobVerdict, tuple[Finding, ...]]:
    """gpu11: ranks alive and busy are no proof of progress when the job's communicators say
    otherwise. NCCL's proxy and watchdog threads spin at 100 % CPU in a collective that can
    never complete (rank 0 in a barrier while rank 1 all-reduces: NCCL's "message truncated",
    both ranks alive, output quiet), so the process readings call it healthy, while the
    flight recorder shows the ranks parting ways and RAS a communicator in error. Then the
    job is hung: the headline says what the communicators say, and JOB-HEALTHY goes. Where
    the stacks read "every rank waits in one collective" and the flight recorder shows the
    ranks calling different ones, the flight recorder leads."""
    if verdict.state == "hung" and verdict.findings and verdict.findings[0].id == "JOB-HUNG-COLLECTIVE":
        # the stacks put a rank at a sync point with the others' collective (NCCL is
        # asynchronous), while the flight recorder shows which collective each rank called:
        # rank 0 in barrier(), rank 1 at synchronize() after its all_reduce (gpu11)
        div = next((f for f in findings if f.id == "JOB-FR-DIVERGED"), None)
        if div is None:
            return verdict, findings
        rest = tuple(f for f in findings if f.id != "JOB-HUNG-COLLECTIVE" and f is not div)
        what = f"hung: {div.summary}" + (f" ({'; '.join(div.evidence[:2])})" if div.evidence else "")
        return replace(verdict, headline=what, findings=(div,)), (div, *rest)
    if verdict.state not in ("healthy", "waiting"):
        return verdict, findings
    said = next((f for f in findings if f.id in _STUCK_BY and f.severity == "error"), None)
    if said is None:
        return verdict, findings
    headline = f"hung: the ranks are alive and busy, but {said.summary}"
    rest = tuple(f for f in findings if f.id not in ("JOB-HEALTHY", "JOB-WAITING"))
    first = (said, *(f for f in rest if f is not said))
    return replace(verdict, state="hung", headline=headline, findings=(said,)), first


def chosen_keys(views: Sequence[NodeView]) -> dict[str, str]:
    """{node: the identity (MASTER_ADDR|MASTER_PORT|run id|WORLD_SIZE) of the job looked at}."""
    return {v.node: v.candidates[0].key for v in views if v.found and v.candidates}


def ambiguity(views: Sequence[NodeView]) -> Finding | None:
    """The nodes' newest jobs are different jobs: say which, with every candidate."""
    keys = chosen_keys(views)
    if len(set(keys.values())) < 2:
        return None
    jobs = "; ".join(f"{n}: {k}" for n, k in keys.items())
    evidence = [f"{c.node} pid {c.pid}: {c.cmd}" for v in views for c in v.candidates]
    return kb_finding(
        "JOB-AMBIGUOUS",
        sorted(keys),
        "several different jobs run on these nodes",
        evidence,
        jobs=jobs,
    )


def _not_found(views: Sequence[NodeView], config: ClusterConfig, match: str | None) -> Finding:
    looked = "torchrun / python -m torch.distributed.run" + (
        f" matching /{match}/" if match else ""
    )
    users = sorted({v.user for v in views if v.user}) or ["(the SSH user)"]
    reachable = [v.node for v in views if not v.problem]
    logs = [f"{log.node}: {log.path}: {log.error or 'read'}" for v in views for log in v.logs]
    return kb_finding(
        "JOB-NOT-FOUND",
        reachable or [v.node for v in views],
        f"no training job found on {', '.join(reachable) or 'any node'}",
        [f"looked for: {looked}", f"user: {', '.join(users)}", *logs],
        looked_for=looked,
        user=", ".join(users),
        on_nodes=", ".join(reachable) or "no reachable node",
    )


def _others(views: Sequence[NodeView]) -> list[Finding]:
    extra = [c for v in views if v.found for c in v.candidates[1:]]
    if not extra:
        return []
    chosen = next(v.candidates[0].cmd for v in views if v.found and v.candidates)
    return [
        kb_finding(
            "JOB-OTHER-JOBS",
            sorted({c.node for c in extra}),
            f"{len(extra)} other torchrun job(s) run on these nodes; showing the newest",
            [f"{c.node} pid {c.pid}: {c.cmd}" for c in extra][:8],
            chosen=chosen[:120],
            count=len(extra),
        )
    ]


def _stack_problems(views: Sequence[NodeView], targets: Sequence[NodeTarget]) -> list[Finding]:
    out = []
    python = {t.name: t.python for t in targets}
    for v in views:
        if not v.ranks:
            continue
        if v.stacks_unavailable and "not installed" in v.stacks_unavailable:
            out.append(
                kb_finding(
                    "JOB-STACKS-NO-PYSPY",
                    [v.node],
                    f"{v.node}: no stacks: {v.stacks_unavailable}",
                    python=python.get(v.node, "python3"),
                )
            )
            continue
        failed = [r for r in v.ranks if r.stack_error]
        refused = [
            r for r in failed if any(w in (r.stack_error or "").lower() for w in _PTRACE_WORDS)
        ]
        if refused:
            why, howto = _ptrace_why(v, [r.env for r in refused])
            out.append(
                kb_finding(
                    "JOB-STACKS-PTRACE",
                    [v.node],
                    f"{v.node}: py-spy was refused on rank(s) "
                    f"{rank_ranges(r.rank for r in refused if r.rank is not None)}: {why}",
                    [(refused[0].stack_error or "")[:300]],
                    why=why,
                    howto=howto,
                )
            )
        rest = [r for r in failed if r not in refused]
        if rest:
            out.append(
                kb_finding(
                    "JOB-STACKS-FAILED",
                    [v.node],
                    f"{v.node}: no stack for rank(s) {rank_ranges(r.rank for r in rest if r.rank is not None)}",
                    [(r.stack_error or "")[:300] for r in rest][:3],
                    count=len(rest),
                    why=(rest[0].stack_error or "?").splitlines()[-1][:200],
                )
            )
    return out


def _ptrace_why(v: NodeView, _envs: Sequence[dict[str, str]]) -> tuple[str, str]:
    if v.ptrace_scope is not None and v.ptrace_scope >= 2:
        return (
            f"kernel.yama.ptrace_scope is {v.ptrace_scope} on {v.node} (only "
            f"{'root with CAP_SYS_PTRACE' if v.ptrace_scope == 2 else 'nobody'} may attach)",
            "Ask an administrator to set `sysctl kernel.yama.ptrace_scope=1` (or 0), or run "
            "ddptui as a user allowed to trace.",
        )
    if v.cap_sys_ptrace is False and v.me_uid == 0:
        return (
            f"ddptui's session on {v.node} lacks CAP_SYS_PTRACE (a container without it)",
            "Start the container with `--cap-add SYS_PTRACE` (docker) or the pod with "
            "securityContext.capabilities.add: [SYS_PTRACE].",
        )
    if v.ptrace_scope == 1:
        return (
            f"kernel.yama.ptrace_scope is 1 on {v.node}: only a process's ancestors, or "
            "CAP_SYS_PTRACE, may attach, and py-spy is not an ancestor of the job",
            "Run ddptui as root or with CAP_SYS_PTRACE on the nodes (`sudo setcap "
            "cap_sys_ptrace+ep $(which py-spy)`), or set `sysctl kernel.yama.ptrace_scope=0`.",
        )
    return (
        f"the job runs as another user than ddptui's SSH user on {v.node}",
        "Connect as the job's user (`user:` of the node in the config).",
    )


def _outputs(views: Sequence[NodeView]) -> list[Finding]:
    out = []
    for v in views:
        blind = [
            r
            for r in v.ranks
            if r.state != "gone" and {r.stdout.kind, r.stderr.kind}.isdisjoint({"file", "unknown"})
        ]
        if blind and not any(not log.error and log.lines for log in v.logs):
            r = blind[0]
            out.append(
                kb_finding(
                    "JOB-OUTPUT-NOT-FILE",
                    [v.node],
                    f"{v.node}: the job's output goes to a {r.stdout.kind}, not a file",
                    [f"{x.label}: stdout {x.stdout.path}, stderr {x.stderr.path}" for x in blind][
                        :4
                    ],
                    ranks=", ".join(x.label for x in blind),
                    kind=r.stdout.kind,
                    path=r.stdout.path or "?",
                )
            )
    return out


def _gpu(views: Sequence[NodeView]) -> list[Finding]:
    return [
        kb_finding("JOB-GPU-UNMATCHED", [v.node], f"{v.node}: {v.gpu_note}", why=v.gpu_note)
        for v in views
        if v.ranks and v.gpu_note and v.gpu_devices and not any(r.gpu for r in v.ranks)
    ]


def _ras(views: Sequence[NodeView]) -> list[Finding]:
    out = []
    for v in views:
        answers = [
            (f"{v.node} sample {sample.get('sample')}", status)
            for sample in v.ras
            for reply in sample.get("replies") or ()
            if (status := parse_ras(str(reply.get("text") or ""))) is not None
        ]
        if answers:
            out += ras_findings(answers, [v.node])
            continue
        failed = [s for s in v.ras if s.get("error")]
        if failed and len(failed) == len(v.ras):
            out.append(
                kb_finding(
                    "JOB-RAS-UNREACHABLE",
                    [v.node],
                    f"{v.node}: NCCL RAS at {failed[0].get('addr')} did not answer",
                    addr=failed[0].get("addr"),
                    why=failed[0].get("error"),
                )
            )
    return out


def read_fr_records(views: Sequence[NodeView]) -> tuple[list[RankDump], list[Finding]]:
    """The flight recorder dumps the nodes sent, read safely; unreadable ones as findings."""
    dumps: list[RankDump] = []
    bad: list[Finding] = []
    for v in views:
        shared = [r for r in v.fr if r.get("found") and r.get("shared_with")]
        if shared:  # gpu10: other running jobs write the same dump files
            bad.append(_shared_dumps(v.node, shared))
        for rec in v.fr:
            if not rec.get("found") or rec.get("stale") or "data_b64" not in rec:
                continue
            if rec.get("shared_with"):
                continue
            path = str(rec.get("path"))
            try:
                data = base64.b64decode(str(rec["data_b64"]), validate=True)
                mtime = rec.get("mtime")
                when = float(mtime) if isinstance(mtime, int | float) else None
                dumps.append(parse_dump(int(rec.get("rank") or 0), load_dump(data), when))
            except (UnsafeDump, binascii.Error, ValueError) as exc:
                bad.append(
                    kb_finding(
                        "JOB-FR-UNREADABLE",
                        [v.node],
                        f"{v.node}: {path} not read: {exc}",
                        path=path,
                        why=exc,
                    )
                )
    return dumps, bad


def _shared_dumps(node: str, recs: Sequence[Mapping[str, Any]]) -> Finding:
    """JOB-FR-SHARED: the dumps at this job's path that other running jobs write too."""
    pids = sorted({str(p) for r in recs for p in r.get("shared_with") or []})
    paths = sorted({str(r.get("path")) for r in recs})
    return kb_finding(
        "JOB-FR-SHARED",
        [node],
        f"{node}: flight recorder dumps not read: {len(pids)} other running job(s) write the same files",
        tuple(paths[:4]),
        paths=", ".join(paths[:4]),
        pids=", ".join(pids[:8]),
    )


def _flight(views: Sequence[NodeView]) -> list[Finding]:
    dumps, bad = read_fr_records(views)
    nodes = sorted({v.node for v in views if v.fr})
    return bad + _triggered(views) + flight_findings(dumps, nodes)


def _triggered(views: Sequence[NodeView]) -> list[Finding]:
    """What --trigger-dump did, per node: pipe written, dump written."""
    out = []
    for v in views:
        asked = (v.fr_config or {}).get("triggered")
        if not isinstance(asked, list) or not asked:
            continue
        lines = [
            f"rank {t.get('rank')}: {t.get('pipe')}: "
            + ("dump written" if t.get("dumped") else "no dump yet")
            if t.get("ok")
            else f"rank {t.get('rank')}: {t.get('pipe')}: {t.get('error')}"
            for t in asked
            if isinstance(t, dict)
        ]
        dumped = sum(1 for t in asked if isinstance(t, dict) and t.get("dumped"))
        out.append(
            kb_finding(
                "JOB-FR-TRIGGERED",
                [v.node],
                f"{v.node}: asked torch for flight recorder dumps; {dumped} of {len(asked)} written",
                lines,
                written=dumped,
                asked=len(asked),
            )
        )
    return out


def _env(found: Sequence[NodeView], config: ClusterConfig) -> list[Finding]:
    facts = []
    for i, v in enumerate(found):
        agent = v.agent or {}
        env = agent.get("env") if isinstance(agent.get("env"), dict) else {}
        if not env:
            continue
        facts.append(
            EnvFacts(
                name=v.node,
                rank=i,
                env={str(k): str(x) for k, x in env.items()},
                sources={str(k): "job" for k in env},
                interfaces=list(agent.get("interfaces") or []),
                route=None,
                shm_bytes=agent.get("shm_bytes")
                if isinstance(agent.get("shm_bytes"), int)
                else None,
                gpu_count=None,
            )
        )
    if not facts:
        return []
    first = facts[0].env
    nproc = max((len(v.ranks) for v in found), default=1) or 1
    findings = audit_env(
        facts,
        master_addr=first.get("MASTER_ADDR") or config.master.addr,
        master_port=int(first.get("MASTER_PORT") or config.master.port),
        nproc_per_node=nproc,
        single_host=all(n.host == "local" for n in config.nodes),
    )
    return [f for f in findings if f.severity != "info"]


def _logs(views: Sequence[NodeView], already: set[str]) -> list[Finding]:
    out = []
    for v in views:
        for log in v.logs:
            if not log.lines:
                continue
            first, _ = classify(log.lines, f"{v.node}:{log.path}")
            if first is None or first.id in already or first.severity == "info":
                continue
            already.add(first.id)
            out.append(first)
    return out
