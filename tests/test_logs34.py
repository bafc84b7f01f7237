"""Round logs34 (blind batch Y: PyTorch's flight-recorder tutorials, NVIDIA GPU Operator and
device-plugin troubleshooting, Ray's FAQ, published lab logs): each reading on the real
excerpt it came from (tests/fixtures/corpus/round12y.yaml, each excerpt's url names its
source), through the real log diagnosis, both feeds (lines in memory, a file's byte chunks)."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from corpus_excerpts import CORPUS, excerpt, ids, lead
from logchunks import first_via_chunks

from ddptui.logs.diagnose import diagnose_lines


def _lines(eid: str) -> list[str]:
    return list(CORPUS[eid].lines)


def _errors(lines: list[str]) -> list[str]:
    return [f.id for f in diagnose_lines(lines).findings if f.severity == "error"]


def test_nccl_proxy_teardown_warnings_after_a_completed_run_are_not_a_failure() -> None:
    # hypercomputer-internode-deepdive@0815d73 lab 13: the sweep printed "# done", rank 0 exited 0
    eid = "y4-hcdd-lab13-survivor-rerun-teardown-warns"
    lines = _lines(eid)
    assert _errors(lines) == [] and "NCCL-PROXY-TEARDOWN" in ids(excerpt(eid))
    assert first_via_chunks(lines, "y.log") in (None, "NCCL-PROXY-TEARDOWN")
    teardown = lines[lines.index("# done") + 1 :]
    # the same lines under a real failure (NVIDIA/nccl#1610: a watchdog timeout beside them)
    failing = [*teardown, "[rank9]:[E218 04:54:22.061694977 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=66, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600363 milliseconds before timing out."]
    assert lead(diagnose_lines(failing)) in ("WATCHDOG", "LOGS-NOT-IN-COLLECTIVE")
    # an accept that failed for a real reason, and a proxy Connect that failed, stay errors
    assert "NCCL-SOCKET-CALL" in _errors(["proxy.cc:1587 NCCL WARN [Service thread] Accept failed Software caused connection abort"])
    assert "BOOT-PROXY" in _errors(["node:1:2 [1] proxy.cc:1119 NCCL WARN [Proxy Service 9] Failed to execute operation Connect from rank 9, retcode 6"])


def test_the_flight_recorders_analysis_names_the_rank_that_never_joined() -> None:
    # pytorch/tutorials flight_recorder_tutorial.rst (torchfrtrace's output) and
    # debug_hangs_with_flight_recorder.rst ("Not all ranks joining collective, sequence number: 4")
    for eid in ("y1-pt-tutorial-fr-extra-collective", "y3-fr-tutorial-missing-rank", "y1-pt-tutorial-fr-rank-sleeps"):
        d = excerpt(eid)
        assert lead(d) == "LOGS-NOT-IN-COLLECTIVE", eid
        assert d.first is not None and "rank 1 never showed up" in d.first.cause
        assert "nccl:all_reduce (sequence number" in d.first.cause
        assert first_via_chunks(_lines(eid), "fr.txt") == "LOGS-NOT-IN-COLLECTIVE"
    # the header alone (no "missing ranks" line) names nobody: not read
    head = _lines("y3-fr-tutorial-missing-rank")[:2]
    assert "LOGS-NOT-IN-COLLECTIVE" not in ids(diagnose_lines(head))


def test_a_watchdog_line_cut_after_a_field_is_still_the_watchdog() -> None:
    # hypercomputer-internode-deepdive@12bf93b lab 15: rank 16 sleeps; the others' watchdog fires
    eid = "y4-hcdd-lab15-straggler-rank16-watchdog"
    assert lead(excerpt(eid)) == "WATCHDOG"
    assert first_via_chunks(_lines(eid), "w.log") == "WATCHDOG"


def test_gpu_and_cluster_states_the_operator_and_ray_print() -> None:
    # NVIDIA GPU Operator troubleshooting (nvidia-smi -q's Fabric State), Ray's cluster FAQ,
    # NVIDIA/k8s-device-plugin README (time-slicing with failRequestsGreaterThanOne)
    assert lead(excerpt("y3-gpuop-fabric-in-progress")) == "CUDA-FABRIC-NOTREADY"
    assert lead(excerpt("y1-ray-faq-worker-cannot-reach-gcs")) == "PORT-UNREACH"
    assert lead(excerpt("y3-devplugin-timeslice-request-too-large")) == "K8S-POD-NOT-STARTED"
    # a Fabric state that completed is healthy
    done = ["Fabric", "     State                             : Completed", "     Status                            : Success"]
    assert _errors(done) == []


def test_nvshmem_ibgda_that_cannot_create_its_queue_pairs_is_ib_qp() -> None:
    # spacegoing/st_verl_dockerfile@6b4cb2d cluster_debug/deepep_ibgda_admin_report.md
    eid = "y4-stverl-nvshmem-ibgda-dct-unsupported"
    assert lead(excerpt(eid)) == "IB-QP"
    assert first_via_chunks(_lines(eid), "n.log") == "IB-QP"


def test_a_corrupted_inforom_is_named() -> None:
    # NVIDIA GPU Operator troubleshooting: "infoROM is corrupted (nvidia-smi return code 14)"
    d = excerpt("y3-gpuop-inforom-corrupted")
    assert lead(d) == "GPU-INFOROM-CORRUPT"
    assert d.first is not None and "0000:0B:00.0" in d.first.cause
