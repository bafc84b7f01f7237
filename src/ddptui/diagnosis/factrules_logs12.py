"""Rules over facts added in round logs12 (issue 15), read from the printing program's
own message format rather than from one excerpt.

shm_exhausted: torch's MapAllocator (aten/src/ATen/MapAllocator.cpp) could not reserve
a shared-memory tensor file "/torch_<pid>_<n>" (posix_fallocate: "unable to allocate
shared memory(shm) for file <...>: <strerror> (<errno>)", any errno, since it breaks
out before the message only for EINVAL/EOPNOTSUPP; older releases' write of the last
byte: "unable to write to file <...>"), any program's ENOSPC on a /dev/shm path
(hints.shm_full in factrules.yaml), or Python's multiprocessing SemLock (a POSIX
semaphore, sem_open's /dev/shm/sem.*) failing with ENOSPC (hints.semlock, enospc).
Core layer, stdlib only; the rules file and the other predicates are factrules.py's."""

from __future__ import annotations

from ddptui.diagnosis.factcontext import Context, Hit


def shm_exhausted(rules: object, rule: object, ctx: Context) -> Hit | None:
    """torch or another program could not grow a file in /dev/shm (hints.shm_full)."""
    line = ctx.hints.get("shm_full")
    if line is not None:
        said = (
            "torch could not reserve a shared-memory tensor file (/dev/shm/torch_*): /dev/shm is full or too small"
            if "torch_" in line
            else "a write to /dev/shm failed for lack of space: /dev/shm is full or too small"
        )
        return [], [line], said, {}
    sem, nospace = ctx.hints.get("semlock"), ctx.hints.get("enospc")
    if sem is None or nospace is None:
        return None
    said = (
        "Python could not create a multiprocessing semaphore (sem_open in /dev/shm): "
        "No space left on device, /dev/shm is full or too small"
    )
    return [], [nospace, sem], said, {}
