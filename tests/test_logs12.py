"""Round logs12 (issue 15): general readings of failing logs whose cause has an id, each
taken from the printing program's own message format (torch's MapAllocator, coreutils),
checked on a real capture or a real line, and on the neighbours it must leave alone."""

# ruff: noqa: E501  (log lines are quoted whole)

from __future__ import annotations

from pathlib import Path

from corpus_excerpts import excerpt, ids, lead

from ddptui.logs.diagnose import diagnose_lines

# real captures of this round (raw stdout/stderr; tests/fixtures/logs/ holds the testbed format)
LOGS = Path(__file__).parent / "fixtures" / "logs12"


def test_torch_unable_to_allocate_shm_is_dev_shm_too_small() -> None:
    """torch's MapAllocator reserves a DataLoader worker's (or share_memory_()'s) tensor
    file /torch_<pid>_<n> in /dev/shm with posix_fallocate and, when it cannot, says
    "unable to allocate shared memory(shm) for file <...>: <strerror> (<errno>)"
    (aten/src/ATen/MapAllocator.cpp).  Captured for real: torch 2.13, a 1 MB tmpfs on
    /dev/shm, DataLoader(num_workers=2) over 16 MB samples.  The log was an honest
    unknown before; the reading is the cause, with the worker's wrapper after it."""
    lines = (LOGS / "shm_full_dataloader.log").read_text(encoding="utf-8").splitlines()
    d = diagnose_lines(lines, "shm_full_dataloader.log")
    assert lead(d) == "SHM-SIZE", ids(d)
    assert "torch_" in d.first.evidence[0] and "No space left on device" in d.first.evidence[0]
    assert "/dev/shm/torch_" in d.first.summary


def test_enospc_on_a_dev_shm_path_is_dev_shm_full_and_other_enospc_is_not() -> None:
    """Any program's ENOSPC on a /dev/shm path (coreutils' own format, captured on the
    same 1 MB tmpfs) is /dev/shm full; the same error on another path (a full disk when
    saving a checkpoint) is not, and neither is torch's shm error with EMFILE (the
    open-files limit keeps its own id)."""
    dd = diagnose_lines(["dd: error writing '/dev/shm/blob': No space left on device"], "dd")
    assert lead(dd) == "SHM-SIZE", ids(dd)
    disk = diagnose_lines(["OSError: [Errno 28] No space left on device: '/scratch/ckpt/model_00012.pt'"], "disk")
    assert "SHM-SIZE" not in ids(disk), ids(disk)
    fd = diagnose_lines(["RuntimeError: unable to open shared memory object </torch_6391_2806421166> in read-write mode: Too many open files (24)"], "fd")
    assert lead(fd) == "NOFILE-LIMIT", ids(fd)


def test_shm_reading_leaves_the_corpus_shm_excerpts_as_they_were() -> None:
    """The NCCL shm excerpts the corpus already reads right keep their lead (the new
    reading emits the same id or stays silent)."""
    assert lead(excerpt("shm-nccl-342")) == "SHM-FALLOCATE"
    assert lead(excerpt("c-sigbus-shm-docker-pipedream-76")) == "SHM-SIZE"
    assert lead(excerpt("shm-megatron-878")) == "SHM-DATALOADER"


def test_lightning_devices_times_nodes_not_the_world_is_named() -> None:
    """Lightning's TorchElasticEnvironment.validate_settings says devices x num_nodes is
    not torchrun's WORLD_SIZE (the "forgot num_nodes" mistake of lightning#3029, in the
    words Lightning >= 2 prints).  Captured for real: lightning 2.5.0 on torch 2.13 CPU,
    Trainer(devices=1, num_nodes=1) under torchrun --nproc-per-node 2.  Before, the lead
    was torchrun's SIGTERM of the other child (C10D-CHILD-SIGNAL)."""
    lines = (LOGS / "lightning_world_mismatch.log").read_text(encoding="utf-8").splitlines()
    d = diagnose_lines(lines, "lightning_world_mismatch.log")
    assert lead(d) == "LAUNCH-LIGHTNING-WORLD", ids(d)
    assert "devices=1 and num_nodes=1" in d.first.cause and "world of 2" in d.first.cause
    # Lightning's Slurm check keeps its own id
    slurm = diagnose_lines(["ValueError: You set `devices=2` in Lightning, but the number of tasks per node configured in SLURM `--ntasks-per-node=1` does not match. HINT: Set `devices=1`."], "slurm")
    assert lead(slurm) == "LAUNCH-LIGHTNING-SLURM", ids(slurm)


def test_python_semaphore_without_space_is_dev_shm_full() -> None:
    """Python's multiprocessing Lock/Queue (a DataLoader's, any launcher's) is a POSIX
    semaphore that sem_open creates in /dev/shm; when /dev/shm is full the traceback ends
    in _multiprocessing.SemLock( with "[Errno 28] No space left on device" and names no
    path.  Captured for real (CPython 3.11, a full 1 MB tmpfs on /dev/shm).  The same
    ENOSPC in a traceback without SemLock (a full disk under torch.save) is not /dev/shm."""
    lines = (LOGS / "shm_full_semlock.log").read_text(encoding="utf-8").splitlines()
    d = diagnose_lines(lines, "shm_full_semlock.log")
    assert lead(d) == "SHM-SIZE", ids(d)
    assert any("SemLock(" in e for e in d.first.evidence)
    disk = ["Traceback (most recent call last):", '  File "save.py", line 3, in <module>', "    torch.save(model, path)", "OSError: [Errno 28] No space left on device"]
    assert "SHM-SIZE" not in ids(diagnose_lines(disk, "disk"))


def test_nccl_segment_errors_with_enospc_lead_with_dev_shm_too_small() -> None:
    """NCCL 2.28's shmutils.cc names the errno ("failed to create shared memory file %s,
    error %s (%d)", "Error while creating shared memory segment %s (size %ld), error: %s
    (%d)": tests/fixtures/source_sites/nccl-v2.28.9-1.tsv).  With ENOSPC on its /dev/shm
    path the space is the cause (SHM-SIZE leads the segment error); with another errno
    (permission) the segment error stays what it is."""
    full = diagnose_lines(["node0:1234:1300 [0] misc/shmutils.cc:131 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-Uo7yHY (size 9637888), error: No space left on device (28)"], "full")
    assert ids(full)[:2] == ["SHM-SIZE", "SHM-SEGMENT"], ids(full)
    perm = diagnose_lines(["node0:1234:1300 [0] misc/shmutils.cc:73 NCCL WARN Error: failed to create shared memory file /dev/shm/nccl-Uo7yHY, error Permission denied (13)"], "perm")
    assert lead(perm) == "SHM-SEGMENT", ids(perm)
