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
Core layer, stdlib only; the rules file and the other predicates are factrules.py's."""

from __future__ import annotations

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
