"""Round logs20 (issue 15: no failing log called clean; fewer wrong causes).  Each reading
is a printing program's own message format, checked on the real excerpts as pasted and on
the healthy neighbours it must leave alone."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from corpus_excerpts import CORPUS, excerpt, ids, lead

from ddptui.logs.diagnose import diagnose_lines


def _errors(lines: list[str]) -> list[str]:
    return [f.id for f in diagnose_lines(lines, "x").findings if f.severity == "error"]


def test_the_loaders_version_error_is_a_failure_even_inside_nccls_plugin_line() -> None:
    """glibc's "version `X' not found (required by LIB)" (a library built against a newer
    one) is no longer called clean, whether NCCL's plugin dlerror quotes it
    (awsome-distributed-ai#292) or it was pasted alone (#284); NCCL's ordinary "No plugin
    found" line stays silent."""
    for name in ("k2-plugin-libfabric-awsome-distributed-ai-292", "l2-ofi-plugin-libfabric-skew-awsome-distributed-ai-284"):
        d = excerpt(name)
        assert lead(d) == "LOGS-UNRECOGNIZED", (name, ids(d))
        assert d.first is not None and d.first.severity == "error"
        assert "not found (required by" in " ".join(d.first.evidence), d.first.evidence
    quiet = "host:1:1 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation"
    assert diagnose_lines([quiet], "x").first is None
    # the loader's harmless note about a library without version tags is no failure
    note = "/bin/bash: /opt/conda/lib/libtinfo.so.6: no version information available (required by /bin/bash)"
    assert _errors([note]) == [] and diagnose_lines([note], "x").first is None


def test_torchs_legacy_cuda_check_failure_is_a_failure() -> None:
    """THCudaCheck FAIL file=F line=N error=E : msg (torch <= 1.x's CUDA check): an honest
    unknown where no signature knows the message (maskrcnn-benchmark#423), the known
    message's own id where one does ("invalid device ordinal")."""
    d = excerpt("l2-bad-install-maskrcnn-benchmark-423")
    assert lead(d) == "LOGS-UNRECOGNIZED" and d.first is not None and d.first.severity == "error", ids(d)
    ordinal = [e for e in CORPUS.values() if any("THCudaCheck FAIL" in x and "invalid device ordinal" in x for x in e.lines)]
    assert ordinal
    for e in ordinal:
        got = lead(excerpt(e.id))
        assert got in e.expected, (e.id, got)


def test_envoys_rbac_denial_keeps_a_log_from_being_clean() -> None:
    """Envoy's (Istio's sidecar) "rbac_access_denied_matched_policy[none]": a connection
    the mesh refused (kubeflow/trainer#1634) leads as an honest unknown, a warning (the
    sidecar's log is not the job's failure line)."""
    d = excerpt("l2-istio-sidecar-kubeflow-trainer-1634")
    assert lead(d) == "LOGS-UNRECOGNIZED", ids(d)
    assert _errors(["RBAC: access denied"]) == []
    assert lead(diagnose_lines(["RBAC: access denied"], "x")) == "LOGS-UNRECOGNIZED"
    assert diagnose_lines(["envoy rbac  enforced allowed, matched policy ns[x]"], "x").first is None
