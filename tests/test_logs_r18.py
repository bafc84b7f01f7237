"""Round 18's reading from its blind batch AM3 (tests/fixtures/corpus/round18am.yaml, scored
once before it): NVIDIA/nccl#331, two containers on two hosts on docker's default bridge,
NCCL's `Connect to 172.17.0.3<37551> failed : Connection refused` from a host named by its
container id: the peer advertised its container address (AR-BOOT-VIRTUAL), not a generic
connect failure.  Twins change the one fact the reading needs."""

from __future__ import annotations

from corpus_excerpts import CORPUS, excerpt, ids, lead

from ddptui.logs.diagnose import diagnose_lines

NAME = "am3-nccl331-docker-bridge"


def test_a_peer_on_dockers_bridge_seen_from_a_container_is_the_virtual_bridge() -> None:
    d = excerpt(NAME)
    assert lead(d) == "AR-BOOT-VIRTUAL", ids(d)
    assert d.first is not None and "172.17.0.3 port 37551" in d.first.summary
    assert "BOOT-CONN" in ids(d)  # the connect failure, now its consequence


def test_the_same_failure_outside_a_container_stays_a_connect_failure() -> None:
    # twin: the host is named gpu-node-2, not by a container id: a LAN may use 172.17.x
    lines = [t.replace("71d46aa8dab5", "gpu-node-2") for t in CORPUS[NAME].lines]
    d = diagnose_lines(lines, NAME)
    assert lead(d) == "BOOT-CONN", ids(d)


def test_a_routable_peer_from_a_container_stays_a_connect_failure() -> None:
    # twin: the same container reaching for a host's 10.x address: nothing says bridge
    lines = [t.replace("172.17.0.3", "10.20.0.3") for t in CORPUS[NAME].lines]
    d = diagnose_lines(lines, NAME)
    assert lead(d) == "BOOT-CONN", ids(d)
