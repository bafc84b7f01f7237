"""Round logs14 (issue 15): general readings of blind batch I's misses, each read from the
printing program's own message format (NCCL, torch, gloo, glibc, Open MPI) and checked on
the real excerpt as pasted, and on the neighbours it must leave alone."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from corpus_excerpts import excerpt, ids, lead

from ddptui.logs.diagnose import diagnose_lines


def test_two_ranks_on_one_cuda_device_in_any_wrapper() -> None:
    """NCCL's init.cc says "Duplicate GPU detected : rank %d and rank %d both on CUDA device
    %lx"; a wrapper that re-prints it as "Error: rank 27 and rank 19 both on CUDA device
    53000" (a write-up's check of the bus ids) states the same fact."""
    d = excerpt("i3-dupgpu-thomaskalnik-deepseek-part4")
    assert lead(d) == "ENV-DUPGPU", ids(d)
    assert "27" in d.first.cause and "19" in d.first.cause
    assert lead(excerpt("dupgpu-dfine-289")) == "ENV-DUPGPU"  # NCCL's own wording


def test_torch_1x_assertion_default_process_group_is_not_initialized() -> None:
    """torch 1.x's _check_default_pg() asserts "Default process group is not initialized"
    (c10d's C++ checkDefaultPg too): the same call before init_process_group as the newer
    "has not been initialized, please make sure to call init_process_group"."""
    d = excerpt("i2-not-initialized-universenet-8")
    assert lead(d) == "C10D-NOT-INITIALIZED", ids(d)
    own = diagnose_lines(["print('Default process group is not initialized, falling back to one process')"], "own")
    assert "C10D-NOT-INITIALIZED" not in ids(own), ids(own)


def test_gloo_unable_to_find_interface_for_its_own_address() -> None:
    """gloo's tcp/device.cc sockaddrToInterfaceName: "Unable to find interface for: <addr>"
    when the address the host name resolved to (and bound) is on no local interface: the
    name resolves to an address that is not this machine's (GLOO-HOST-UNRESOLVED).  Its
    neighbour "Unable to find address for: <iface>" keeps its reading."""
    d = excerpt("i3-gloo-iface-3dspeaker-gitcode-bbe3db31")
    assert lead(d) == "GLOO-HOST-UNRESOLVED", ids(d)
    assert "[0.0.12.18]" in d.first.cause
    other = diagnose_lines(["Unable to find interface for update: path[/a], name[b]"], "dbus")
    assert "GLOO-HOST-UNRESOLVED" not in ids(other), ids(other)
    assert lead(excerpt("i-gloo-ifname-eth0-sparkrun-275")) == "ENV-GLOO-SYNTAX"


def test_glibc_heap_corruption_and_open_mpi_signal_are_failures() -> None:
    """glibc's malloc_printerr ("free(): corrupted unsorted chunks") and Open MPI's signal
    handler ("[host:pid] Signal: Aborted (6)") only print when a process dies: the log is
    an honest unknown, never clean (here NCCL 2.21 on GB200, which the lines do not say)."""
    d = excerpt("i1-nccl-predates-gb200-nccl-1611")
    assert lead(d) == "LOGS-UNRECOGNIZED", ids(d)
    assert "free(): corrupted unsorted chunks" in d.first.cause
    for line in ("munmap_chunk(): invalid pointer", "free(): double free detected in tcache 2", "corrupted size vs. prev_size", "[gpu3:4411] Signal: Segmentation fault (11)"):
        assert diagnose_lines([line], "x").first is not None, line
    quiet = diagnose_lines(["[node1:123] Signal handler installed", "malloc(): using 4 arenas"], "q")
    assert quiet.first is None, ids(quiet)


def test_a_check_that_found_none_of_what_it_expected_is_a_failure() -> None:
    """A validator's "expected 8 GPU NIC networks, found 0" is a failure no signature knows:
    an honest unknown quoting it, not clean.  "expected 8, found 8" is no failure."""
    d = excerpt("i4-k8s-gke-nic-aicr-2215")
    assert lead(d) == "LOGS-UNRECOGNIZED", ids(d)
    assert "found 0" in d.first.cause
    fine = diagnose_lines(["[INFO] expected 8 GPU NIC networks, found 8"], "ok")
    assert fine.first is None, ids(fine)
