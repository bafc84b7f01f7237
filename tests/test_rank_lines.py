"""The NCCL facts of every node reach the analysis: the launcher tags each line with
the worker's GLOBAL rank and its local rank, and the analysis files it under the global
rank. (A bug read the global rank as the local one, so on NCCL runs every node after the
first fed no facts.) The NCCL text is real: a healthy H100 init (NCCL 2.28.9)."""

from __future__ import annotations

from pathlib import Path

from ddptui.checklist.allreduce_analysis import ArRun, analyze
from ddptui.checklist.base import StepContext
from ddptui.checklist.runner import targets_from
from ddptui.config import parse_config
from ddptui.diagnosis.logstore import LogStore

H100_LOG = Path(__file__).parent / "fixtures" / "gpu-h100-raw" / "healthy-1gpu.log"
CONFIG = """
master: {addr: 10.0.0.1, port: 29500}
nodes: [{host: 10.0.0.1, name: node0}, {host: 10.0.0.2, name: node1},
        {host: 10.0.0.3, name: node2}]
nproc_per_node: 2
"""


def launcher_records(node_rank: int, nproc: int, lines: list[str]) -> list[dict[str, object]]:
    """What probes/allreduce.py emits on one node: per local rank, its worker records
    and every line it printed, tagged with the global and the local rank."""
    out: list[dict[str, object]] = [{"kind": "launch", "nproc": nproc, "backend": "nccl"}]
    for local in range(nproc):
        rank = node_rank * nproc + local
        worker = {"rank": rank, "local_rank": local}
        out.append({"kind": "worker", "record": {**worker, "kind": "phase", "phase": "init"}})
        for line in lines:
            # Each rank's host:pid prefix differs on a real cluster.
            text = line.replace("vm:758:758", f"gpu{node_rank}:{700 + local}:{700 + local}")
            out.append({"kind": "log", "stream": "out", "rank": rank, "local_rank": local,
                        "line": text})
        out.append({"kind": "worker", "record": {**worker, "kind": "phase", "phase": "done"}})
    out.append({"kind": "exit", "code": 0})
    return out


def test_three_nodes_two_ranks_each_give_nccl_facts_for_all_six_ranks() -> None:
    config = parse_config(CONFIG, "cluster.yaml")
    targets = targets_from(config)
    store = LogStore(t.name for t in targets)
    ctx = StepContext(config=config, targets=targets, transports={}, salt="s", logs=store)
    run = ArRun(backend="nccl", deadline_s=60, forced={}, unset=[], started=0.0)
    lines = H100_LOG.read_text().splitlines()
    for t in targets:
        for rec in launcher_records(t.rank, 2, lines):
            run.take(t.name, rec, 1.0, store)
    _, data, _ = analyze(ctx, run)
    facts = data["nccl"]
    assert sorted(facts, key=int) == ["0", "1", "2", "3", "4", "5"]
    for rank, f in facts.items():
        assert f["nccl_version"] == "2.28.9", rank
        assert f["bootstrap_if"] == "eth0" and f["transport"] == "Socket", rank
        assert f["init_complete"], rank
    # Every line keeps its rank and id: node2's lines belong to ranks 4 and 5.
    node2 = store.lines("node2")
    assert {ln.rank for ln in node2} == {4, 5} and {ln.local_rank for ln in node2} == {0, 1}
    assert node2[0].id == "node2#1" and store.get(node2[10].id) == node2[10]
    assert node2[-1].tagged().startswith("[r5] ")
