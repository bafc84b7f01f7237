"""Rules over the facts ranks state in their logs: factrules.yaml loaded, validated and
applied to the per-process facts of ddptui/logs/facts.py.  Core layer, stdlib and
ruamel.yaml only.  The judgement of an interface is data (factrules.yaml `interfaces`);
which finding outranks which is ranking.yaml's (`explains`)."""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from ddptui.diagnosis import factrules_gpu12 as gpu12
from ddptui.diagnosis.factcontext import (
    Context,
    Hit,
    Proc,
    local_across_hosts,
    missing_nodes,
    name_elsewhere,
    shm_context,
    span,
    stalled,
    stalled_one_host,
    values_said,
    who,
)
from ddptui.diagnosis.factmodel import (
    APP_EXCEPTION,
    UNRECOGNIZED,
    FactRule,
    FactRules,
    IfaceClass,
    Stall,
    ip_of,
)
from ddptui.diagnosis.factrules_collective import not_in_collective, op_mismatch
from ddptui.diagnosis.factrules_env import nccl_env_differs
from ddptui.diagnosis.factrules_gpu7 import lightning_gpus, lightning_gpus_slurm
from ddptui.diagnosis.factrules_gpu9 import left_early
from ddptui.diagnosis.factrules_gpu10 import kept_running, sizes_differ
from ddptui.diagnosis.factrules_gpu11 import comm_not_joined
from ddptui.diagnosis.factrules_logs6 import independent_rank0, registered_block_missing
from ddptui.diagnosis.factrules_logs7 import (
    nccl_predates_gpu,
)
from ddptui.diagnosis.factrules_logs8 import ib_verbs_unusable, sigkill_while_loading
from ddptui.diagnosis.factrules_logs9 import barrier_device_guess, timeout_short
from ddptui.diagnosis.factrules_logs11 import bench_repeated
from ddptui.diagnosis.factrules_logs12 import shm_exhausted
from ddptui.diagnosis.factrules_logs13 import bench_headers, connect_loopback, shm_cuda_register
from ddptui.diagnosis.factrules_logs14 import (
    main_first_bar_alone,
    main_first_bar_beside,
    world_of_one,
)
from ddptui.diagnosis.factrules_logs15 import ib_hca_unfound, ray_worker_vanished
from ddptui.diagnosis.factrules_logs16 import lightning_slurm_alone, rdns_slow
from ddptui.diagnosis.factrules_logs17 import nccl_crash, sigkill_host_memory
from ddptui.diagnosis.factrules_logs18 import graph_file_set
from ddptui.diagnosis.factrules_logs19 import shell_child_killed
from ddptui.diagnosis.factrules_logs21 import accept_closed_early
from ddptui.diagnosis.factrules_logs22 import (
    envoy_in_path,
    gdr_off_everywhere,
    ofi_libfabric_mismatch,
    pyxis_enroot_failed,
    sigkill_model_sync,
    watchdog_in_capture,
)
from ddptui.diagnosis.factrules_logs23 import bench_init_one_host, whole_job_one_host
from ddptui.diagnosis.factrules_logs26 import sidecar_pod, srun_step_killed
from ddptui.diagnosis.factrules_logs27 import ras_missing
from ddptui.diagnosis.factrules_logs28 import ib_link_mixed, ssh_hostkey_prompt
from ddptui.diagnosis.factrules_logs30 import credential_clock, ib_asked_unfound
from ddptui.diagnosis.factrules_logs31 import stack_wait, store_alone
from ddptui.diagnosis.factrules_logs34 import fr_not_joined
from ddptui.diagnosis.factrules_logs35 import noroute_on_subnet
from ddptui.diagnosis.factrules_logs36 import nccl1_in_use
from ddptui.diagnosis.factrules_p2p import first_collective_hang
from ddptui.diagnosis.finding import Finding, Severity
from ddptui.diagnosis.kb import kb_finding
from ddptui.diagnosis.ranking import load_ranking

FACTRULES_FILE: Final = Path(__file__).with_name("factrules.yaml")
NEEDS: Final = frozenset({"explains", "several_hosts", "failure", "itself"})
ASPECTS: Final = frozenset({"family", "kind", "network"})
FACTS: Final = frozenset({"nccl_version", "world_size", "network", "net_plugin"})
HINTS: Final = frozenset(
    {"sigbus", "system_error", "container", "shm", "nccl"}
    | {"ib_unusable", "socket_ipoib", "sigkill", "loading"}  # logs8
    | {"barrier", "invalid_usage"}  # logs9
    | {"torchrun_summary"}  # logs11
    | {"shm_full", "semlock", "enospc"}  # logs12
    | {"connect_loopback", "shm_register", "nccl_cuda_failure"}  # logs13
    | {"connect_failed"}  # logs14
    | {"ib_hca_named", "net_socket", "ray_worker_eof", "crashed"}  # logs15
    | {"slurm"}  # logs16
    | {"host_memory", "signal_report", "nccl_frame"}  # logs17
    | {"shell_killed"}  # logs19
    | {"lightning_gpus", "lightning_gpus_have"}  # gpu7
    | {"peer_closed", "accept_magic", "accept_finalize"}  # logs21
    | {"watchdog_died", "capture_refused", "pyxis_failed", "enroot_said"}  # logs22
    | {"gdr_off", "gdr_on", "model_sync", "ofi_version", "envoy_rbac", "envoy_inbound"}  # logs22
    | {"bench_devices", "bench_table", "init_complete", "nccl_using_net", "nccl_warn", "ib_channel_k"}  # logs23
    | {"nccl_release"}  # logs23
    | {"srun_killed", "srun_killed_last", "srun_other_end", "k8s_sidecar_pod"}  # logs26
    | {"ras_missing", "ras_missing_who", "ras_missing_rank"}  # logs27
    | {"ib_link_mixed", "ssh_hostkey", "ssh_prompt"}  # logs28
    | {"self_requeue"}  # logs29
    | {"credential_expired", "ib_disable_zero", "ib_hca_set"}  # logs30
    | {"store_alone"}  # logs31
    | {"fr_not_joined", "fr_missing", "fr_collective"}  # logs34
    | {"noroute_peer"}  # logs35
    | {"ofi_register"}  # round 21
    | {"nccl1"}  # logs36
    | {"comm_destroyed", "exit_barrier_error"}  # gpu9
    | {"exit_no_destroy"}  # gpu11
    | {"ops_failed_alone", "teardown", "agent_stopped"}  # gpu10
    | {"net_gone", "store_client_failed"}  # gpu12
)
_PRIVATE: Final = tuple(
    ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
)


class FactRuleError(ValueError):
    """factrules.yaml is malformed; the message names the rule and the problem."""


def _list(rid: str, entry: Mapping[str, Any], key: str) -> list[str]:
    value = entry.get(key)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FactRuleError(f"{rid}: {key} must be a list of strings")
    return value


def _compile(where: str, pattern: object) -> re.Pattern[str]:
    if not isinstance(pattern, str) or not pattern:
        raise FactRuleError(f"{where}: a pattern must be a non-empty string")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise FactRuleError(f"{where}: {pattern!r} does not compile: {exc}") from exc


def _rule(entry: object, i: int, classes: set[str], known: set[str] | None) -> FactRule:
    if not isinstance(entry, dict):
        raise FactRuleError(f"rule {i + 1}: expected a mapping")
    rid = f"rule {entry.get('id', i + 1)}"
    when = entry.get("when")
    if when not in PREDICATES:
        raise FactRuleError(f"{rid}: when {when!r} is not one of {sorted(PREDICATES)}")
    key = {"iface_class": "class", "iface_mixed": "aspect", "differs": "fact"}.get(str(when))
    allowed = {"id", "when", "needs", "severity", *([key] if key else [])}
    if set(entry) != allowed:
        raise FactRuleError(f"{rid}: keys must be {sorted(allowed)}, got {sorted(entry)}")
    param = entry.get(key) if key else None
    valid = {"class": classes, "aspect": ASPECTS, "fact": FACTS}.get(key or "", set())
    if key and param not in valid:
        raise FactRuleError(f"{rid}: {key} {param!r} is not one of {sorted(valid)}")
    needs = _list(rid, entry, "needs")
    if not needs or set(needs) - NEEDS:
        raise FactRuleError(f"{rid}: needs must list some of {sorted(NEEDS)}")
    if entry["severity"] not in ("error", "warning", "info"):
        raise FactRuleError(f"{rid}: severity {entry['severity']!r}")
    if known is not None and entry["id"] not in known:
        raise FactRuleError(f"{rid}: {entry['id']!r} has no entry in kb/*.yaml")
    return FactRule(str(entry["id"]), str(when), param, tuple(needs), entry["severity"])


def parse_factrules(text: str, known_ids: Iterable[str] | None = None) -> FactRules:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        doc = YAML(typ="safe").load(text)
    except YAMLError as exc:
        raise FactRuleError(f"not valid YAML: {exc}") from exc
    if not isinstance(doc, dict) or set(doc) - {"run_ended", "hints", "stalls"} != {
        "interfaces", "rules", "failure_lines", "not_clean", "wrappers"
    }:
        raise FactRuleError(
            "expected top-level 'interfaces:', 'rules:', 'failure_lines:', 'not_clean:' and "
            "'wrappers:' (and 'run_ended:', 'hints:', 'stalls:')"
        )
    classes = []
    for name, entry in (doc["interfaces"] or {}).items():
        if not isinstance(entry, dict) or set(entry) != {"prefixes", "networks"}:
            raise FactRuleError(f"interface class {name}: keys must be prefixes, networks")
        try:
            nets = tuple(ipaddress.ip_network(n) for n in _list(name, entry, "networks"))
        except ValueError as exc:
            raise FactRuleError(f"interface class {name}: {exc}") from exc
        classes.append(IfaceClass(str(name), tuple(_list(name, entry, "prefixes")), nets))
    known = set(known_ids) if known_ids is not None else None
    names = {c.name for c in classes}
    rules = tuple(_rule(e, i, names, known) for i, e in enumerate(doc["rules"] or []))
    fl = doc["failure_lines"]
    if not isinstance(fl, dict) or set(fl) - {"benign", "plain"} != {"hard", "soft"}:
        raise FactRuleError(
            "failure_lines: expected 'hard:', 'soft:' (and 'plain:', 'benign:') lists"
        )
    hard = tuple(_compile("failure_lines.hard", p) for p in fl["hard"] or [])
    soft = tuple(_compile("failure_lines.soft", p) for p in fl["soft"] or [])
    plain = tuple(_compile("failure_lines.plain", p) for p in fl.get("plain") or [])
    benign = [_compile("failure_lines.benign", p).pattern for p in fl.get("benign") or []]
    not_clean = _list("not_clean", doc, "not_clean")
    wrappers = _list("wrappers", doc, "wrappers")
    for key, named in (("not_clean", not_clean), ("wrappers", wrappers)):
        if known is not None and set(named) - known:
            raise FactRuleError(f"{key}: {sorted(set(named) - known)} have no entry")
    ended = [_compile("run_ended", p).pattern for p in doc.get("run_ended") or []]
    hint_doc = doc.get("hints") or {}
    if not isinstance(hint_doc, dict) or set(hint_doc) - HINTS:
        raise FactRuleError(f"hints: expected a mapping with some of {sorted(HINTS)}")
    hints = tuple(
        (str(name), re.compile("|".join(f"(?:{_compile('hints.' + name, p).pattern})" for p in pats)))
        for name, pats in hint_doc.items()
        if _list(f"hints.{name}", hint_doc, name)
    )
    return FactRules(
        tuple(classes), rules, hard, soft, tuple(not_clean),
        re.compile("|".join(f"(?:{b})" for b in benign)) if benign else None,
        frozenset(wrappers),
        re.compile("|".join(f"(?:{e})" for e in ended)) if ended else None,
        hints,
        _stalls(doc.get("stalls") or []),
        plain,
    )


def _stalls(entries: object) -> tuple[Stall, ...]:
    if not isinstance(entries, list):
        raise FactRuleError("stalls: expected a list")
    out = []
    for i, e in enumerate(entries, 1):
        keys = {"what", "start", "done", "first_step", "header", "precedes"}
        if not isinstance(e, dict) or not {"what", "start"} <= set(e) <= keys:
            raise FactRuleError(
                f"stalls[{i}]: keys must be what, start (and done, first_step, header, precedes)"
            )
        done = _compile(f"stalls[{i}].done", e["done"]) if e.get("done") else None
        start = _compile(f"stalls[{i}].start", e["start"])
        if start.groupindex:
            raise FactRuleError(f"stalls[{i}].start: no named groups")
        header = e.get("header", 0)
        if not isinstance(header, int) or isinstance(header, bool) or header < 0:
            raise FactRuleError(f"stalls[{i}].header: expected a count of lines (0 or more)")
        precedes = _compile(f"stalls[{i}].precedes", e["precedes"]) if e.get("precedes") else None
        if precedes is not None and "proc" not in precedes.groupindex:
            raise FactRuleError(f"stalls[{i}].precedes: needs a named group proc")
        first = bool(e.get("first_step", False))
        out.append(Stall(str(e["what"]), start, done, first, header, precedes))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def load_factrules() -> FactRules:
    from ddptui.diagnosis.kb import load_kb

    try:
        text = FACTRULES_FILE.read_text(encoding="utf-8")
    except OSError as exc:
        raise FactRuleError(f"cannot read {FACTRULES_FILE.name}: {exc}") from exc
    try:
        return parse_factrules(text, load_kb())
    except FactRuleError as exc:
        raise FactRuleError(f"{FACTRULES_FILE.name}: {exc}") from None


def explained(fid: str, present: Iterable[str]) -> list[str]:
    """The present finding ids that `fid` outranks by a ranking.yaml precedence rule."""
    out = []
    for rule in load_ranking().precedence:
        if rule.is_cause(fid):
            out += [p for p in present if rule.is_consequence(p) and p not in out]
    return out


def outranks_line(fid: str, lead: str) -> bool:
    """Whether `fid` outranks `lead` by a ranking.yaml precedence rule marked `lines`
    (one that holds between line signatures too, not only for the facts' findings)."""
    return any(
        r.lines and r.is_cause(fid) and r.is_consequence(lead) for r in load_ranking().precedence
    )


# --------------------------------------------------------------------------- the facts


_PLURAL: Final = {"family": "families", "kind": "kinds", "network": "networks"}
_CONNECT_TO: Final = re.compile(r"\b[Cc]onnect to \[?([0-9A-Za-z:.%_-]+?)\]?<(?:\d+|\.\.\.)>")


def _failed_peer(ctx: Context) -> str | None:
    """The address NCCL failed to connect to, where it is an address some rank of the log
    chose (logs14): then the interface that failed is known, and an interface of another
    class elsewhere (a second NIC's link-local address) did not cause the failure."""
    line = ctx.hints.get("connect_failed")
    m = _CONNECT_TO.search(line or "")
    chosen = {a for p in ctx.procs for _, _, a in p.interfaces}
    return m.group(1) if m and m.group(1) in chosen else None


def _iface_class(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    ranks, ev, seen = [], [], []
    # logs11: a container's own eth0 on docker's default network (virtual by its address
    # only) where the log shows one host is no bridge between nodes
    one_host = len(ctx.hosts) == 1
    # logs23: every rank of the job on one host: no interface carries anything between
    # machines (NCCL connects one node's GPUs over P2P/SHM), so none explains a failure
    if whole_job_one_host(ctx):
        return None
    failed = _failed_peer(ctx)
    for p in ctx.procs:
        for role, iface, addr in p.interfaces:
            if failed is not None and addr != failed:
                continue
            if rules.iface_class(iface, addr) == rule.param:
                if rule.param == "virtual" and one_host and not rules.is_of("virtual", iface, ""):
                    continue
                if p.rank is not None:
                    ranks.append(p.rank)
                seen.append(f"{iface}:{addr}")
                key = {"bootstrap": "bootstrap", "NET/IB OOB": "ib"}.get(role, "socket")
                ev.append(p.evidence.get(key, f"{who(p)}: {role} {iface}:{addr}"))
                break
    if not seen:
        return None
    chosen = ", ".join(dict.fromkeys(seen))
    said = f"NCCL chose {chosen} ({rule.param})"
    if rule.param == "loopback":
        said += gpu12.fell_back(ctx, seen)  # gpu12: NCCL_SOCKET_IFNAME unset, nothing else up
    return ranks, ev, said, {"iface": chosen}



def _aspect(rules: FactRules, aspect: str, iface: str, addr: str) -> str | None:
    ip = ip_of(addr)
    if aspect == "family":
        return None if ip is None else f"IPv{ip.version}"
    if aspect == "kind":
        return "IPoIB" if rules.is_of("ipoib", iface, addr) else "Ethernet"
    if ip is None or ip.version != 4 or ip.is_loopback or ip.is_link_local:
        return None
    return next((str(n) for n in _PRIVATE if ip in n), "public")


def _iface_mixed(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    by_host: dict[str, tuple[str, str, Proc]] = {}
    for p in ctx.procs:
        boot = [(i, a) for role, i, a in p.interfaces if role == "bootstrap"]
        if p.host and boot:
            by_host.setdefault(p.host, (*boot[0], p))
    values: dict[str, list[str]] = {}
    for host, (iface, addr, _) in by_host.items():
        v = _aspect(rules, str(rule.param), iface, addr)
        if v is not None and not rules.is_of("loopback", iface, addr):
            values.setdefault(v, []).append(f"{host} {iface}:{addr}")
    if len(values) < 2:
        return None
    said = "; ".join(f"{v} on {', '.join(hs)}" for v, hs in values.items())
    ev = [p.evidence.get("bootstrap", "") for _, _, p in by_host.values()]
    ranks = [p.rank for _, _, p in by_host.values() if p.rank is not None]
    kinds = _PLURAL.get(str(rule.param), str(rule.param))
    return ranks, [e for e in ev if e], f"Hosts bootstrap on different {kinds}: {said}", {"which": said}


def _differs(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    attr = str(rule.param)
    groups: dict[str, list[Proc]] = {}
    for p in ctx.procs:
        v = getattr(p, attr)
        if v is not None:
            groups.setdefault(str(v), []).append(p)
    if len(groups) < 2:
        return None
    said = values_said(groups)
    key = {
        "nccl_version": "version", "world_size": "world", "network": "network",
        "net_plugin": "net_plugin",
    }[attr]
    ev = [ps[0].evidence[key] for ps in groups.values() if key in ps[0].evidence]
    ranks = [p.rank for ps in groups.values() for p in ps if p.rank is not None]
    return ranks, ev, f"{attr.replace('_', ' ')} differs: {said}", {"which": said}


def _worlds(ctx: Context) -> dict[int, list[Proc]]:
    out: dict[int, list[Proc]] = {}
    for p in ctx.procs:
        if p.world_size and p.rank is not None and p.world_size <= 4096:
            out.setdefault(p.world_size, []).append(p)
    return out


def _duplicate_node_rank(ctx: Context) -> Hit | None:
    """Two launcher agents (different files or hosts) waiting as one node rank."""
    claims: dict[int, list[Proc]] = {}
    for p in ctx.procs:
        if p.node_rank is not None:
            claims.setdefault(p.node_rank, []).append(p)
    for r, c in sorted(claims.items()):
        where = {p.host or p.source for p in c}
        if len(where) > 1:
            ev = [x.evidence.get("node_rank", x.ident) for x in c[:4]]
            said = f"node rank {r} is claimed by {', '.join(sorted(where)[:4])}"
            nodes = len({p.host or p.source for p in ctx.procs})
            missing = sorted(set(range(nodes)) - set(claims))
            fill = {"dup": f"{r} (a node rank)", "world": f"{nodes} nodes", "missing": span(missing) or "?"}
            return [], ev, said, fill
    return None


def _duplicate_rank(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    node = _duplicate_node_rank(ctx)
    if node is not None:
        return node
    for world, ps in _worlds(ctx).items():
        claims: dict[int, list[Proc]] = {}
        for p in ps:
            claims.setdefault(int(p.rank or 0), []).append(p)
        dups = {r: c for r, c in claims.items() if len({x.ident for x in c}) > 1}
        missing = sorted(set(range(world)) - set(claims))
        if dups and missing:
            r, c = next(iter(dups.items()))
            ev = [x.evidence.get("init") or x.evidence.get("world") or x.ident for x in c]
            said = f"rank {r} of {world} is claimed by {', '.join(x.ident for x in c[:4])}"
            return [r], ev, said, {"dup": str(r), "world": str(world), "missing": span(missing)}
    return None


def _missing_ranks(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    if not (ctx.labelled or len(ctx.hosts) >= 2):
        return None
    worlds = _worlds(ctx)
    if len(worlds) != 1:
        return None
    world, ps = next(iter(worlds.items()))
    seen = {int(p.rank or 0) for p in ps}
    missing = sorted(set(range(world)) - seen)
    if not missing or len(seen) < 2:
        return None
    ev = [p.evidence.get("init") or p.evidence.get("world", "") for p in ps[:3]]
    said = f"{len(seen)} of {world} ranks appear; never seen: {span(missing)}"
    return missing, [e for e in ev if e], said, {"missing": span(missing), "world": str(world)}


def _store_overcount(rules: FactRules, rule: FactRule, ctx: Context) -> Hit | None:
    """c10d's store barrier counted more workers than the world has."""
    for p in ctx.procs:
        if p.store_count is not None and p.store_count[0] > p.store_count[1]:
            count, world = p.store_count
            said = f"{count} workers counted in the store barrier of a world of {world}"
            ranks = [p.rank] if p.rank is not None else []
            return ranks, [p.evidence.get("store_count", "")], said, {"count": str(count), "world": str(world)}
    return None


PREDICATES: Final[dict[str, Callable[[FactRules, FactRule, Context], Hit | None]]] = {
    "iface_class": _iface_class,
    "iface_mixed": _iface_mixed,
    "differs": _differs,
    "duplicate_rank": _duplicate_rank,
    "missing_ranks": _missing_ranks,
    "not_in_collective": not_in_collective,
    "store_overcount": _store_overcount,
    "op_mismatch": op_mismatch,
    "shm_context": shm_context,
    "local_across_hosts": local_across_hosts,
    "missing_nodes": missing_nodes,
    "nccl_predates_gpu": nccl_predates_gpu,
    "stalled": stalled,
    "stalled_one_host": stalled_one_host,
    "registered_block_missing": registered_block_missing,
    "independent_rank0": independent_rank0,
    "name_elsewhere": name_elsewhere,
    "ib_verbs_unusable": ib_verbs_unusable,
    "sigkill_while_loading": sigkill_while_loading,
    "timeout_short": timeout_short,
    "barrier_device_guess": barrier_device_guess,
    "bench_repeated": bench_repeated,  # logs11
    # logs12
    "shm_exhausted": shm_exhausted,
    # logs13
    "connect_loopback": connect_loopback,
    "shm_cuda_register": shm_cuda_register,
    "bench_headers": bench_headers,
    "nccl_env_differs": nccl_env_differs,
    # logs14 (blind batch I)
    "world_of_one": world_of_one,
    "main_first_bar_alone": main_first_bar_alone,
    "main_first_bar_beside": main_first_bar_beside,
    # logs15 (blind batch J)
    "ib_hca_unfound": ib_hca_unfound,
    "ray_worker_vanished": ray_worker_vanished,
    # logs16 (the corpus misses that name an id)
    "rdns_slow": rdns_slow,
    "lightning_slurm_alone": lightning_slurm_alone,
    # logs17 (blind batch K)
    "sigkill_host_memory": sigkill_host_memory,
    "nccl_crash": nccl_crash,
    # logs18 (blind batch L)
    "graph_file_set": graph_file_set,
    # logs19 (blind batch M)
    "shell_child_killed": shell_child_killed,
    # gpu7 (real launcher captures)
    "lightning_gpus": lightning_gpus,
    "lightning_gpus_slurm": lightning_gpus_slurm,
    # logs21 (blind batch N)
    "accept_closed_early": accept_closed_early,
    # logs22 (blind batch O)
    "watchdog_in_capture": watchdog_in_capture,
    "pyxis_enroot_failed": pyxis_enroot_failed,
    "gdr_off_everywhere": gdr_off_everywhere,
    "sigkill_model_sync": sigkill_model_sync,
    "ofi_libfabric_mismatch": ofi_libfabric_mismatch,
    "envoy_in_path": envoy_in_path,
    # a first collective that never completed on one host (P2P-HANG)
    "first_collective_hang": first_collective_hang,
    # logs23 (blind batch P)
    "bench_init_one_host": bench_init_one_host,
    # logs26 (blind batch R)
    "srun_step_killed": srun_step_killed,
    "sidecar_pod": sidecar_pod,
    # logs27 (blind batch S)
    "ras_missing": ras_missing,
    # logs28 (blind batch T)
    "ib_link_mixed": ib_link_mixed,
    "ssh_hostkey_prompt": ssh_hostkey_prompt,
    # logs30 (blind batch V)
    "credential_clock": credential_clock,
    "ib_asked_unfound": ib_asked_unfound,
    # logs31 (blind batch W)
    "store_alone": store_alone,
    "stack_wait": stack_wait,
    # logs34 (blind batch Y)
    "fr_not_joined": fr_not_joined,
    # logs35 (blind batch Z)
    "noroute_on_subnet": noroute_on_subnet,
    # logs36 (the corpus's misses)
    "nccl1_in_use": nccl1_in_use,
    # gpu9 (real captures on a lent GPU)
    "left_early": left_early,
    # gpu10 (real captures on a lent GPU)
    "sizes_differ": sizes_differ,
    "kept_running": kept_running,
    # gpu11 (real captures on a lent GPU)
    "comm_not_joined": comm_not_joined,
    "same_address": gpu12.same_address,  # round 18: gpu12, blind AM3
    "lost_midrun": gpu12.lost_midrun,
    "peer_on_bridge": gpu12.peer_on_bridge,
    "socket_extra": gpu12.socket_extra,
}


def fact_findings(ctx: Context, rules: FactRules | None = None) -> list[Finding]:
    """The findings the facts support, each only where its `needs` hold; a finding that
    explains a present error is an error itself."""
    rules = rules or load_factrules()
    failure = any(sev == "error" for sev in ctx.present.values())
    out = []
    for rule in rules.rules:
        hit = PREDICATES[rule.when](rules, rule, ctx)
        if hit is None:
            continue
        ranks, evidence, summary, fill = hit
        explains = explained(rule.id, ctx.present)
        have = {
            "explains": bool(explains),
            "several_hosts": len(ctx.hosts) >= 2,
            "failure": failure,
            "itself": True,  # the fact is a failure on its own (no healthy run states it)
        }
        if not any(have[n] for n in rule.needs):
            continue
        severity: Severity = rule.severity
        if any(ctx.present[e] == "error" for e in explains):
            severity = "error"
            named = [e if e not in (UNRECOGNIZED, APP_EXCEPTION) else "the failure line" for e in explains[:3]]
            summary += f" (explains {', '.join(named)})"
        hosts = {(p.host or "").partition("#")[0] for p in ctx.procs if p.rank in ranks}
        nodes = tuple(sorted(h for h in hosts if h))
        if not nodes:  # ranks not stated: the hosts the finding names
            nodes = tuple(h for h in ctx.hosts if h in summary)
        out.append(
            kb_finding(
                rule.id,
                nodes,
                summary,
                tuple(e[:400] for e in evidence[:5]),
                severity=severity,
                rank=ranks[0] if len(ranks) == 1 else None,
                facts=fill,
            )
        )
    return out
