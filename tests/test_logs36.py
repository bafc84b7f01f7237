"""Round logs36 (issue 15: readings that generalise across the corpus's misses): each
reading on the real excerpts it came from (tests/fixtures/corpus/*.yaml, each excerpt's url
names its source), through the real log diagnosis, both feeds (lines in memory, a file's
byte chunks), each with a twin that must stay silent."""

from __future__ import annotations

from corpus_excerpts import CORPUS, excerpt, ids, lead
from logchunks import first_via_chunks

from ddptui.logs.diagnose import diagnose_lines


def _lines(eid: str) -> list[str]:
    return list(CORPUS[eid].lines)


def _errors(lines: list[str]) -> list[str]:
    return [f.id for f in diagnose_lines(lines).findings if f.severity == "error"]


def test_nccl_tests_built_against_nccl1_failing_is_the_old_library() -> None:
    # NVIDIA/nccl-tests#5: "# NCCL Tests compiled with NCCL 1.0" on 8x P100, 'unhandled cuda
    # error'; "The issue is settled by updating nccl1.0 to nccl" (2)
    eid = "f-old-nccl-nccl-tests-5"
    d = excerpt(eid)
    assert lead(d) == "LOGS-NCCL1"
    assert d.first is not None and "compiled with NCCL 1.0" in "".join(d.first.evidence)
    assert first_via_chunks(_lines(eid), "nccl1.log") == "LOGS-NCCL1"
    # twin: the same run built against NCCL 2 is not this reading (an honest unknown)
    nccl2 = [line.replace("compiled with NCCL 1.0", "compiled with NCCL 2.4") for line in _lines(eid)]
    assert "LOGS-NCCL1" not in ids(diagnose_lines(nccl2))
    # twin: NCCL 1's header on a run that did not fail stays silent (a one-node run works)
    header = [line for line in _lines(eid) if "NCCL failure" not in line]
    assert _errors(header) == []


def test_nccl1s_own_warn_format_across_nodes_is_the_single_node_library() -> None:
    # NVIDIA/nccl#33: NCCL 1.x launched with srun over 2 nodes x 8 GPUs; "No, indeed, NCCL
    # doesn't run across multiple nodes" ... "implemented in NCCL2".  NCCL 1's src/debug.h
    # WARN macro prints "WARN %s:%d " (file, line) with no host:pid and no "NCCL"
    eid = "r1-nccl1-multinode-nccl-33"
    d = excerpt(eid)
    assert lead(d) == "LOGS-NCCL1"
    assert first_via_chunks(_lines(eid), "nccl1-srun.log") == "LOGS-NCCL1"
    # twin: NCCL 2's WARN of the same words (host:pid:tid [dev] file:line NCCL WARN)
    nccl2 = [
        line.replace("WARN src/core.cu", "node1:1234:1234 [4] init.cc:225 NCCL WARN") for line in _lines(eid)
    ]
    assert "LOGS-NCCL1" not in ids(diagnose_lines(nccl2))
    # twin: NCCL 2's version line is not NCCL 1's ("NCCL version 21.0.3" neither)
    ok = ["NCCL version 2.1.15+cuda9.0", "NCCL version 21.0.3", "NCCL failure all_reduce.cu:95 'unhandled cuda error'"]
    assert "LOGS-NCCL1" not in ids(diagnose_lines(ok))
    # NCCL 1's own version line (showVersion in src/core.cu) with a failure is read too
    v1 = ["NCCL version 1.3.4 compiled with CUDA 8.0", *nccl2]
    assert lead(diagnose_lines(v1)) == "LOGS-NCCL1"
