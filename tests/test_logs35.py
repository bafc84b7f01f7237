"""Round logs35 (blind batch Z: repositories' notes, troubleshooting docs): each reading on
the real excerpt it came from (tests/fixtures/corpus/round12z.yaml, each excerpt's url
names its source), through the real log diagnosis, both feeds (lines in memory, a file's
byte chunks), and for the wrapped NCCL WARN the node's filtered read too."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from pathlib import Path

import pytest
from corpus_excerpts import CORPUS, excerpt, ids, lead
from logchunks import first_via_chunks
from test_sharedfs_filter import _linescan, _probe, _seen, _spooled

from ddptui.logs import reader
from ddptui.logs.diagnose import diagnose_lines
from ddptui.logs.inputs import diagnose_paths
from ddptui.logs.scan import node_filter
from ddptui.logs.warnwrap import WARN_WRAP


def _lines(eid: str) -> list[str]:
    return list(CORPUS[eid].lines)


def _errors(lines: list[str]) -> list[str]:
    return [f.id for f in diagnose_lines(lines).findings if f.severity == "error"]


def test_no_route_to_a_peer_on_the_ranks_own_network_is_a_firewall() -> None:
    # FelixFu520/README envs/parallel_computing/all.md: NCCL 2.4.8 on 192.168.80.156 gets
    # "No route to host" from 192.168.80.157's ephemeral ports; turning the firewalls off fixed it
    eid = "z1-felix-noroute-firewall"
    d = excerpt(eid)
    assert lead(d) == "PORT-PAIR-NOROUTE" and "BOOT-CONN" in ids(d)
    assert d.first is not None and "192.168.80.157" in d.first.fix
    assert "enp2s0 (192.168.80.156)" in d.first.summary
    assert first_via_chunks(_lines(eid), "z1.log") == "PORT-PAIR-NOROUTE"
    # the rank's own address on another network: a wrong interface is as likely, not read
    elsewhere = [line.replace("192.168.80.156", "10.1.2.3") for line in _lines(eid)]
    assert lead(diagnose_lines(elsewhere)) == "BOOT-CONN"
    # no address of its own in the log (pytorch/pytorch transformer thread: a wrong adapter)
    assert lead(excerpt("p1-ifname-noroute-pytorch-transformer-distributed-1")) == "BOOT-CONN"
    # another error to a peer on the same network is not this reading
    refused = [line.replace("No route to host", "Connection refused") for line in _lines(eid)]
    assert "PORT-PAIR-NOROUTE" not in ids(diagnose_lines(refused))
    # the same page's working two-node run stays silent
    assert _errors(_lines("z1-felix-healthy-socket")) == []


def test_enroots_error_relayed_by_pyxis_is_the_container_plugins_failure() -> None:
    # CoreWeave SUNK support article (via a fork of azurehpc's health-check docs): a
    # container directory left by a preempted attempt, "pyxis: ERROR File already exists"
    eid = "z2-coreweave-sunk-pyxis-file-exists-after-preempt"
    d = excerpt(eid)
    assert lead(d) == "SLURM-PYXIS-ENROOT" and "SLURM-LAUNCH-FAILED" in ids(d)
    assert d.first is not None and "File already exists" in d.first.cause
    assert first_via_chunks(_lines(eid), "pyxis.log") == "SLURM-PYXIS-ENROOT"
    # spank's line alone, as pasted without its callback's parentheses
    assert lead(diagnose_lines(_lines(eid)[2:])) == "SLURM-PYXIS-ENROOT"
    # pyxis importing an image in a working srun stays silent
    assert _errors(_lines("x1-healthy-pyxis-srun-container-readme")) == []


def test_a_subcommand_cli_that_takes_the_launchers_local_rank_for_a_command() -> None:
    # ChatLM notes: the deepspeed launcher runs "script.py --local_rank=0 train config.yaml",
    # llmtuner's cli.main() reads sys.argv[1] as its command
    eid = "z2-chatlm-deepspeed-local-rank-as-command"
    d = excerpt(eid)
    assert lead(d) == "LAUNCH-LOCAL-RANK-ARG"
    assert d.first is not None and "--local_rank=N as an unknown command" in d.first.cause
    assert first_via_chunks(_lines(eid), "cli.log") == "LAUNCH-LOCAL-RANK-ARG"
    # another unknown command is the script's own business
    assert "LAUNCH-LOCAL-RANK-ARG" not in ids(diagnose_lines(["NotImplementedError: Unknown command: --local_rank_file"]))
    assert "LAUNCH-LOCAL-RANK-ARG" not in ids(diagnose_lines(["NotImplementedError: Unknown command: --help"]))


def test_an_nccl_warn_wrapped_without_its_cut_space_is_read_whole() -> None:
    # EldritchJS/ml-dev-env@e4683e6 docs/rdma/IOMMU-PASSTHROUGH-FIX.md: IBV_WC_LOC_PROT_ERR
    # (vendor_err=81) with the IOMMU in translation mode; the page wraps the WARN over 4 lines
    eid = "z2-mldevenv-ib-loc-prot-err-iommu"
    d = excerpt(eid)
    assert lead(d) == "IB-CQERR"
    assert d.first is not None and "vendor error 81" in d.first.cause and "iommu=pt" in d.first.fix
    assert d.first.evidence[0].endswith("vendor_err=81 req_type=Send localGid ::ffff:10.0.106.7")
    assert first_via_chunks(_lines(eid), "ib.log") == "IB-CQERR"
    # stas00/ml-engineering debug notes: the same WARN cut after "len" (a [NEW] label there)
    assert lead(excerpt("t1-ib-azure-avset-ml-engineering-debug-pytorch")) == "IB-CQERR"
    head = _lines(eid)[0]
    # NCCL's own next line is never a continuation; nor is a line no signature needs
    nccl_next = [head, "h-kim-0:1353:1409 [3] NCCL INFO transport/net.cc:1134 -> 6"]
    assert "IB-CQERR" not in ids(diagnose_lines(nccl_next))
    # a WARN that a signature reads as it stands is not joined with what follows
    whole = "node1:1:2 [0] bootstrap.cc:114 NCCL WARN Bootstrap : no socket interface found"
    d2 = diagnose_lines([whole, "epoch 1 done"])
    assert lead(d2) == "BOOT-NOIF" and d2.first is not None
    assert d2.first.evidence[0].endswith("no socket interface found")
    # Lightning's device check cut at its width (logs31) still joins though its second line
    # now holds a trigger of the prefilter's choice (navsim multinode notes)
    assert lead(excerpt("w1-lightning-ntasks-navsim-multinode-fix")) == "LAUNCH-LIGHTNING-SLURM"


def test_the_probe_follows_a_warn_as_far_as_the_login_node_joins() -> None:
    assert _linescan()["WARN_WRAP"] == WARN_WRAP


@pytest.mark.parametrize("chunk", [(1 << 20, 64 * 1024), (1500, 700)], ids=["real", "tiny"])
def test_the_wrapped_warn_reads_the_same_filtered_on_a_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: tuple[int, int]
) -> None:
    size, sniff = chunk
    monkeypatch.setattr(reader, "CHUNK", size)
    monkeypatch.setattr(reader, "SNIFF", sniff)
    noise = [f"step {i} loss 0.{i:04d}" for i in range(400)]
    log = tmp_path / "ib.log"
    log.write_text("\n".join([*noise, *_lines("z2-mldevenv-ib-loc-prot-err-iommu"), *noise]) + "\n")
    here = diagnose_paths([str(log)])
    assert here.first is not None and here.first.id == "IB-CQERR"
    there = _spooled(_probe([log], {**node_filter(), "chunk": size, "sniff": sniff}), [log], tmp_path)
    assert _seen(there) == _seen(here)
