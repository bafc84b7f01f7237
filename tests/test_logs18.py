"""Round logs18 (issue 15, blind batch L's misses that name an id): each reading comes from
the printing program's own message format (torch's socket.cpp, Python's os.environ
KeyError naming LOCAL_RANK) and is checked on the real excerpt as pasted and on the
neighbours it must leave alone."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from corpus_excerpts import excerpt, ids, lead

from ddptui.logs.diagnose import diagnose_lines


def test_socket_cpps_bind_line_alone_without_a_glog_prefix_is_the_master_port_in_use() -> None:
    """torch's socket.cpp formats each bind attempt "The server socket has failed to bind
    to {addr}:{port} (errno: 98 - Address already in use)".  As a line of its own (no glog
    prefix, or after the exception's name) it is the message torch < 2.4 raised from its
    only TCPStore backend (lmdeploy#1925: MASTER_PORT 29500 already held); only torch >= 2.4
    with use_libuv=0 prints it with a timestamped glog prefix (the legacy backend)."""
    d = excerpt("l2-port-inuse-lmdeploy-1925")
    assert lead(d) == "PORT-INUSE", ids(d)
    assert d.first is not None and "sport = :29500" in d.first.fix
    wrapped = diagnose_lines(["torch.distributed.DistNetworkError: The server socket has failed to bind to 0.0.0.0:29500 (errno: 98 - Address already in use)"], "x")
    assert lead(wrapped) == "PORT-INUSE", ids(wrapped)
    legacy = diagnose_lines(["[W1122 13:52:25.570934259 socket.cpp:752] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use)."], "x")
    assert lead(legacy) == "PORT-INUSE-LEGACY", ids(legacy)
    denied = diagnose_lines(["The server socket has failed to bind to 0.0.0.0:80 (errno: 13 - Permission denied)"], "x")
    assert lead(denied) not in ("PORT-INUSE", "PORT-INUSE-LEGACY"), ids(denied)


def test_os_environs_keyerror_on_local_rank_is_no_launcher_setting_it() -> None:
    """Python's os.environ raises KeyError(key): the script read os.environ["LOCAL_RANK"]
    and was started without torchrun (LOMO#31 in a notebook, its "KeyError: 'LOCAL_RANK'";
    MC-DDPM#1 pasted the KeyError's value alone, "'LOCAL_RANK'", then the frame reading
    it).  RANK, WORLD_SIZE and MASTER_* stay ENV-MISSING (env:// itself needs them)."""
    for name in ("l3-no-local-rank-lomo-31", "l3-no-local-rank-mc-ddpm-1"):
        d = excerpt(name)
        assert lead(d) == "C10D-NO-LOCAL-RANK", (name, ids(d))
    rank = diagnose_lines(["KeyError: 'RANK'"], "x")
    assert lead(rank) == "ENV-MISSING", ids(rank)
    quoted = diagnose_lines(["setting key 'LOCAL_RANK' to 0 for this worker"], "x")
    assert lead(quoted) is None, ids(quoted)


def test_nccl_graph_file_set_by_environment_is_the_graph_xml_as_a_warning() -> None:
    """NCCL's param.cc prints "NCCL_GRAPH_FILE set by environment to F" (NCCL_DEBUG=INFO):
    NCCL imports its graphs from F instead of searching them (NCCL#1240: Azure's ncv4
    graph.xml from nccl.conf; "This parameter should never be set in production").  With
    nothing failing it leads as a warning (never an error: a healthy paste may state it);
    a failure the log states still leads."""
    d = excerpt("l3-graphfile-nccl-1240")
    assert lead(d) == "NCCL-TOPO-XML", ids(d)
    assert d.first is not None and d.first.severity == "warning"
    assert "/opt/microsoft/ncv4/graph.xml" in d.first.summary
    healthy = diagnose_lines([
        "gpu1:100:100 [0] NCCL INFO NCCL_GRAPH_FILE set by environment to /etc/nccl/graph.xml",
        "gpu1:100:100 [0] NCCL INFO comm 0x55d0 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE",
    ], "x")
    assert not any(f.severity == "error" for f in healthy.findings), ids(healthy)
    other = diagnose_lines([
        "gpu1:100:100 [0] NCCL INFO NCCL_GRAPH_FILE set by environment to /etc/nccl/graph.xml",
        "RuntimeError: The server socket has failed to listen on any local network address. The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).",
    ], "x")
    assert lead(other) == "PORT-INUSE", ids(other)
    unset = diagnose_lines(["gpu1:100:100 [0] NCCL INFO NCCL_TOPO_FILE set by environment to /etc/nccl/topo.xml"], "x")
    assert lead(unset) != "NCCL-TOPO-XML", ids(unset)


def test_a_debuggers_stack_inside_ncclcomminit_is_never_called_clean() -> None:
    """gdb's backtrace of a process in NCCL's communicator init ("#6  ncclCommInitRankSync
    (newcomm=0x.., nranks=2, ...) at init.cc:950", NCCL#234: rank 0 in accept() while its
    peer chose another transport).  The stack shows where it waits, not why: an honest
    unknown, never "nothing wrong".  A source line naming the function stays silent."""
    d = excerpt("l3-ib-one-side-nccl-234")
    assert lead(d) == "LOGS-UNRECOGNIZED", ids(d)
    assert d.first is not None and any("ncclCommInitRankSync" in e for e in d.first.evidence)
    quiet = diagnose_lines(["    NCCLCHECK(ncclCommInitRank(&comm, nranks, id, rank));"], "x")
    assert lead(quiet) is None, ids(quiet)
