"""Rules over facts added in round logs13 (issue 15), read from NCCL's own message
formats rather than from one excerpt.

connect_loopback: NCCL's socket layer (misc/socket.cc) says "Connect to <addr><<port>>
failed" for the address it was handed: a peer's (or the root's) advertised listening
address.  A failed connect to 127.x or ::1 means some rank advertised a loopback address
that does not lead to it (NCCL bootstrapped on lo): AR-BOOT-LOOPBACK, which explains the
generic connect failure.

shm_cuda_register: NCCL's shmutils (2.12-2.19) maps a /dev/shm/nccl-* segment and
registers it with CUDA (cudaHostRegister); a "Cuda failure" right there is followed by
"Error while creating shared memory segment /dev/shm/nccl-<id> (size N)": the pages of
the segment could not be backed, /dev/shm too small (docker's 64 MB), not a CUDA fault.

bench_headers: nccl-tests prints its header ("# Using devices", then one line per rank)
once per run, from rank 0 only under MPI; a second header before any device line or
summary of the first is a second process that started a test of its own at the same time
(a binary built without MPI=1, or an MPI library that does not fit it, under mpirun).
Core layer, stdlib only; the rules file and the other predicates are factrules.py's."""

from __future__ import annotations

from ddptui.diagnosis.evidence import parse_evidence
from ddptui.diagnosis.factcontext import Context, Hit


def connect_loopback(rules: object, rule: object, ctx: Context) -> Hit | None:
    """NCCL failed to connect to a loopback address (hints.connect_loopback)."""
    line = ctx.hints.get("connect_loopback")
    if line is None:
        return None
    said = (
        "NCCL failed to connect to a loopback address it was given as a peer's listening "
        "address: a rank advertised lo/127.x (its bootstrap interface is loopback)"
    )
    return [], [line], said, {}


def shm_cuda_register(rules: object, rule: object, ctx: Context) -> Hit | None:
    """A CUDA failure inside NCCL's creation of a /dev/shm segment (hints.shm_register and
    hints.nccl_cuda_failure): the segment's pages could not be registered."""
    shm, cuda = ctx.hints.get("shm_register"), ctx.hints.get("nccl_cuda_failure")
    if shm is None or cuda is None:
        return None
    said = (
        "NCCL could not create its /dev/shm segment and the CUDA failure before it is the "
        "registration of that segment's pages: /dev/shm is too small (a container's 64 MB)"
    )
    return [], [shm, cuda], said, {}


def bench_headers(rules: object, rule: object, ctx: Context) -> Hit | None:
    """nccl-tests printed its header twice before listing any device (facts.py
    bench_headers): each process ran a world of its own."""
    if len(ctx.bench_headers) < 2:
        return None
    first, second = ctx.bench_headers[:2]
    places = f"{parse_evidence(first).place} and {parse_evidence(second).place}"
    said = (
        f"nccl-tests printed its header twice before listing any device ({places}): two "
        "processes each started a test of its own"
    )
    fill = {
        "count": "2",
        "hosts": f"the processes that printed nccl-tests' header at {places}",
        "ranks": "from 0 (each its own header and device list)",
    }
    return [], [first, second], said, fill
