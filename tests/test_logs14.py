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


def test_ddp_reducer_message_hard_wrapped_by_the_paste() -> None:
    """torch's reducer says "Expected to have finished reduction in the prior iteration
    before starting a new one." first; a paste that hard-wraps the rest of the sentence
    ("were not used i" / "n producing loss") keeps the reading."""
    d = excerpt("i2-unused-params-mmagic-419")
    assert lead(d) == "DDP-UNUSED-PARAMS", ids(d)


def test_every_process_rank_0_of_1_under_mpirun_is_independent_worlds() -> None:
    """mpirun -np 2 and both processes say "process 0 of 1" (MPI_Comm_rank/size): each is
    an MPI_COMM_WORLD of its own (a binary built against another MPI than this mpirun).
    Under -np 1, or with ranks 0 and 1 of 2, nothing is said."""
    d = excerpt("i1-mpi-mismatch-all-rank0-starcluster-533")
    assert lead(d) == "LAUNCH-INDEPENDENT-JOBS", ids(d)
    assert any("mpirun -np 2" in e for e in d.first.evidence)
    assert "another MPI" in d.first.cause
    one = diagnose_lines(["mpirun -np 1 ./hello", "Hello world from process 0 of 1"], "np1")
    assert one.first is None, ids(one)
    two = diagnose_lines(["mpirun -np 2 ./hello", "Hello world from process 0 of 2", "Hello world from process 1 of 2"], "ok")
    assert two.first is None, ids(two)


def test_a_data_preparation_bar_that_ran_the_timeout_is_the_main_process_alone() -> None:
    """A progress bar of data preparation (datasets' "Running tokenizer on dataset", a
    latent cache) at 30:0x when the job failed: the main process prepared data alone and
    the others' wait hit the 30-minute timeout (the watchdog's, or torch's default when
    the paste cut the error).  An evaluation bar (yolov5's "mAP@.5" columns) or a training
    bar is not."""
    d = excerpt("i4-timeout-LlamaFactory-956")
    assert lead(d) == "LOGS-MAIN-FIRST-WAIT", ids(d)
    assert "Running tokenizer on dataset" in d.first.summary
    # an unlabelled bar, one rank's watchdog in collective #3 (setup): only the bar says
    # who was elsewhere, and what it did leads
    sd = excerpt("i4-timeout-sd-scripts-971")
    assert lead(sd) == "LOGS-MAIN-FIRST-WAIT", ids(sd)
    assert "collective #3" in sd.first.summary
    # ranks 1, 2, 3 time out: their numbers name rank 0 as absent (LOGS-NOT-IN-COLLECTIVE
    # leads, as tests/test_logs3 asks) and the tokenizer bar's reading follows it
    ll = excerpt("timeout-llamafactory-2424")
    assert ids(ll)[:2] == ["LOGS-NOT-IN-COLLECTIVE", "LOGS-MAIN-FIRST-WAIT"], ids(ll)
    val = excerpt("h-timeout-short-pg-timeout-yolov5-4400")
    assert "LOGS-MAIN-FIRST-WAIT" not in ids(val), ids(val)
    # a bar at 30:05 and no failure line (NCCL's info that it found no IB device): no finding
    quiet = diagnose_lines(["Running tokenizer on dataset: 47%|████▊ | 1695000/3634744 [30:05<33:25, 967.30 examples/s]", "host:1:1 [0] NCCL INFO NET/IB : No device found."], "quiet")
    assert not [f for f in quiet.findings if f.severity != "info"], ids(quiet)
    train = diagnose_lines(["Epoch 3: 47%|████▊ | 1695/3634 [30:09<33:25, 1.2it/s]Traceback (most recent call last):"], "train")
    assert "LOGS-MAIN-FIRST-WAIT" not in ids(train), ids(train)
