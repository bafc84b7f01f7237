"""Round logs37 (issue 15: round 13's blind batch AA): NCCL warnings a healthy run
printed and got past, read on the real excerpts they came from
(tests/fixtures/corpus/round13aa.yaml, each excerpt's url names its source), through the
real log diagnosis, both feeds (lines in memory, a file's byte chunks), each with a twin
in which the same lines still say something is wrong."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from corpus_excerpts import CORPUS, excerpt, ids, lead
from logchunks import first_via_chunks

from ddptui.logs.diagnose import diagnose_lines

FASTSOCKET = "aa1-fastsocket-warn-retries-healthy"
TEARDOWN = "aa4-hcdd-lab06-2node-allreduce-socket-teardown-warns-ok"


def _lines(eid: str) -> list[str]:
    return list(CORPUS[eid].lines)


def _soft_warning(lines: list[str]) -> bool:
    d = diagnose_lines(lines)
    return lead(d) == "LOGS-UNRECOGNIZED" and d.first is not None and d.first.severity == "warning"


def test_a_net_plugins_retry_warnings_its_threads_got_past_are_silent() -> None:
    # google/nccl-fastsocket#4 (2x8 A100 on GCE, the fastsocket net plugin): "Maximum retry
    # reached for accept 3." / "... connect 3." and, on the same threads (4300:4325,
    # 4024:4055), "NET/FastSocket : Connected after 1000 retries.": net_fastsocket.cc takes
    # the first free socket after MAX_CONNECT_RETRY and connects; "The code runs despite
    # the warning"
    d = excerpt(FASTSOCKET)
    assert d.first is None and "LOGS-UNRECOGNIZED" not in ids(d)
    assert first_via_chunks(_lines(FASTSOCKET), "fastsocket.log") is None
    # twin: the same warnings, the threads never say they connected: still a soft warning
    cut = [line for line in _lines(FASTSOCKET) if "Connected after" not in line]
    assert _soft_warning(cut)
    assert first_via_chunks(cut, "fastsocket.log") == "LOGS-UNRECOGNIZED"
    # twin: another thread connecting does not recover this one's warning
    other = [line.replace("4024:4055", "4024:4056") if "Connected after" in line else line for line in _lines(FASTSOCKET)]
    assert _soft_warning(other)


def test_a_warning_held_for_its_thread_stays_the_first_unknown_line() -> None:
    # the retry warning of a thread that never connected is still quoted first, before a
    # later unknown warning of the same process (its place in the log is kept)
    lines = [line for line in _lines(FASTSOCKET) if "Connected after" not in line]
    lines.append("full-debug2-test-0:4300:4399 [0] net_fastsocket.cc:900 NCCL WARN Something else went wrong")
    d = diagnose_lines(lines, "fs.log")
    assert d.first is not None and d.first.id == "LOGS-UNRECOGNIZED"
    assert "Maximum retry reached for accept 3." in d.first.evidence[0]


def test_a_socket_plugins_missing_incoming_cpu_hint_is_silent() -> None:
    # nccl-fastsocket#4: "Cannot get incoming CPU." (getsockopt SO_INCOMING_CPU failed):
    # the flow is placed without the hint and the run goes on
    cpu = [line for line in _lines(FASTSOCKET) if "Cannot get incoming CPU" in line]
    assert len(cpu) == 2 and diagnose_lines(cpu).first is None
    # twin: the plugin's fatal warning of the same loop ("Cannot find empty socket for %d.",
    # it returns ncclInternalError) is not that hint
    fatal = [cpu[0].replace("Cannot get incoming CPU.", "Cannot find empty socket for 3.")]
    assert _soft_warning(fatal)


def test_return_traces_of_an_abort_on_the_thread_that_said_it_are_silent() -> None:
    # hypercomputer-internode-deepdive lab 06 (rank 0 of a 2-node GKE A3 all-reduce sweep
    # that printed its table to 1 GB and "# done"): "socketProgressOpt: abort called" then
    # "misc/socket.cc:47 -> 3" ... on the same threads (1596:2324, 1596:2172) while the
    # communicator is torn down ("Abort COMPLETE")
    d = excerpt(TEARDOWN)
    assert d.first is None and "LOGS-UNRECOGNIZED" not in ids(d)
    assert "NCCL-PROXY-TEARDOWN" in ids(d)  # logs34: the proxy's warnings stay infos
    assert first_via_chunks(_lines(TEARDOWN), "rank0.log") is None
    # twin: the same traces without the abort line: an unknown error trace, a soft warning
    no_abort = [line for line in _lines(TEARDOWN) if "abort called" not in line]
    assert _soft_warning(no_abort)
    assert first_via_chunks(no_abort, "rank0.log") == "LOGS-UNRECOGNIZED"
    # twin: a trace on a thread the abort never reached is still read
    called = [line for line in _lines(TEARDOWN) if "abort called" in line or " -> 3" in line]
    moved = [line.replace(":2172 [0] NCCL INFO misc/", ":2999 [0] NCCL INFO misc/") for line in called]
    assert _soft_warning(moved)
    # twin: after the process's Abort COMPLETE the thread's abort is over
    done = [line for line in _lines(TEARDOWN) if "Abort COMPLETE" in line]
    after = [*called[:2], *done, called[1]]
    assert _soft_warning(after)


def test_an_abort_inside_a_real_failure_leaves_the_failure_leading() -> None:
    # the same abort traces after a watchdog timeout: the timeout still leads
    called = [line for line in _lines(TEARDOWN) if "abort called" in line or " -> 3" in line]
    timeout = "[rank0]:[E722 08:55:15.721744728 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=19, OpType=ALLREDUCE, NumelIn=268435456, NumelOut=268435456, Timeout(ms)=60000) ran for 60001 milliseconds before timing out."
    d = diagnose_lines([timeout, *called])
    assert d.first is not None and d.first.severity == "error" and d.first.id != "LOGS-UNRECOGNIZED"


JOBSET = "aa4-hcdd-lab10-jobset-failfast-rank-pod-deleted"


def test_jobsets_default_failure_handling_alone_leads() -> None:
    # hypercomputer-internode-deepdive lab 10: rank 3's pod force-deleted; JobSet's status and
    # event "jobset failed due to one or more job failures (first failed job: ...-worker-3)"
    # (kubernetes-sigs/jobset FailedJobsMessage: no failure policy defined), restarts 0: the
    # default policy took the whole gang down
    d = excerpt(JOBSET)
    assert lead(d) == "K8S-JOB-FAILED"
    assert d.first is not None and "spec.failurePolicy.maxRestarts" in d.first.fix
    assert first_via_chunks(_lines(JOBSET), "jobset.txt") == "K8S-JOB-FAILED"
    # twin: the rank's own failure beside it leads (the JobSet line only says where)
    d = diagnose_lines([*_lines(JOBSET), "      Reason:       OOMKilled"])
    assert lead(d) == "K8S-OOMKILLED"
    # twin: the training operator's condition alone stays an honest unknown (logs6)
    d = diagnose_lines(["PyTorchJob default/train is failed because 1 Worker replica(s) failed."])
    assert lead(d) == "LOGS-UNRECOGNIZED"
    # twin: JobSet failing after the restarts it was allowed is not its default handling
    maxed = [line.replace("one or more job failures", "reaching max number of restarts") for line in _lines(JOBSET)]
    assert lead(diagnose_lines(maxed)) != "K8S-JOB-FAILED"
