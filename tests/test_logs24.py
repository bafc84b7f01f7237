"""logs24: the log pipeline's special cases made general.

A rank's own exception outranks a leading finding marked `secondary` (a consequence: a
peer that went away, a rendezvous an agent closed), not a hand list of ids; and one reading
of the places findings quote ("file:line: text", "file:line", "file", "rank N") instead of
splits at each use.  Real excerpts and captures only.
"""

from __future__ import annotations

from pathlib import Path

from capturecases import diagnose_in
from corpus_excerpts import CORPUS

from ddptui.diagnosis.evidence import Quote, parse_evidence, parse_place
from ddptui.diagnosis.signatures import secondary_ids
from ddptui.logs.diagnose import diagnose_lines
from ddptui.logs.report import InputInfo, step_result

FAIL8 = Path(__file__).parent / "fixtures" / "gpu-h200" / "fail8"
REMOTE = "node1:/var/log/train.log"  # a remote input's label: a colon in the source


def test_peer_loss_findings_are_consequences_by_data() -> None:
    # what crashfirst.py listed by hand, now the signatures' own `secondary` flag
    peer_loss = {"BOOT-PEERCLOSED", "C10D-RDZV-CLOSED", "C10D-CLOSED", "GLOO-PEER-READ",
                 "GLOO-PEER-CLOSED", "WATCHDOG-TEARDOWN"}
    assert peer_loss <= secondary_ids()


def test_the_closed_rendezvous_gives_way_to_the_rank_that_raised() -> None:
    # restart2: rank 1 raises its own RuntimeError, the survivor's agent then finds the
    # rendezvous closed: the crash leads, the closed rendezvous is a consequence
    code, doc = diagnose_in(FAIL8, "restart2-n0.log", "restart2-n1.log")
    assert code == 1
    first = doc["first_failure"]
    assert first["finding"] == "LOGS-APP-EXCEPTION", first  # logs39: its own exception
    assert "rank 1 raised RuntimeError" in first["summary"], first
    ids = [f["id"] for f in doc["steps"][0]["findings"]]
    assert "C10D-RDZV-CLOSED" in ids


def _quoted(name: str, source: str) -> list[tuple[Quote, list[str]]]:
    lines = list(CORPUS[name].lines)
    d = diagnose_lines(lines, source)
    return [(parse_evidence(e), lines) for f in d.findings for e in f.evidence]


def test_every_quote_of_real_excerpts_reads_back_to_its_line() -> None:
    # excerpts whose lines hold colons of their own (c10d's "[::]:29500", NCCL's
    # "host:pid:tid", Python's "RuntimeError: ...") read from a remote input's label
    names = [
        "a-ib-faulty-nodes-nccl-2076",
        "b-master-is-headnode-aws-hpc-tutorials-448",
        "b-second-node-rank0-readme-pytorch-distributed-example-19",
        "c-c10d-hostname-etc-hosts-pytorch-67547",
    ]
    seen = 0
    for name in names:
        for q, lines in _quoted(name, REMOTE):
            assert q.source == REMOTE and q.placed, q
            assert q.line is not None and 1 <= q.line <= len(lines)
            said = lines[q.line - 1].strip()  # the quote may join the wrapped line after it
            assert said[:200] == q.text[: len(said)][:200], (name, q)
            assert q.place == f"{REMOTE}:{q.line}"
            seen += 1
    assert seen >= len(names)


def test_places_without_a_line_or_as_a_rank() -> None:
    assert parse_place("a.log:12") == Quote("a.log", 12, "")
    assert parse_place(REMOTE) == Quote(REMOTE, None, "")  # no line number: all source
    assert parse_place("rank 3") == Quote(None, None, "", 3)
    q = parse_evidence("rank 3: corpus:1: RuntimeError: Address already in use")
    assert (q.rank, q.source, q.line, q.text) == (3, "corpus", 1, "RuntimeError: Address already in use")
    plain = parse_evidence("ranks 0, 1, 2, 3 all run on fastmoe")  # SHM-SIZE's, no place
    assert plain == Quote(None, None, "ranks 0, 1, 2, 3 all run on fastmoe") and plain.place == ""


def test_a_fact_finding_belongs_to_the_remote_input_it_quotes() -> None:
    # LOGS-NOT-IN-COLLECTIVE names no host; its quote names the input (a label with a
    # colon of its own), so that input is not reported clean
    lines = list(CORPUS["timeout-accelerate-223"].lines)
    d = diagnose_lines(lines, REMOTE)
    fact = next(f for f in d.findings if f.id == "LOGS-NOT-IN-COLLECTIVE")
    assert fact.nodes == ()
    step = step_result(d, [InputInfo(REMOTE, lines=len(lines))], 0.1)
    placed = next(f for f in step.findings if f.id == "LOGS-NOT-IN-COLLECTIVE")
    assert placed.nodes == (REMOTE,)
    assert step.nodes[REMOTE].status == "fail"
