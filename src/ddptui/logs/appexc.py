"""Round logs39 (issue 15, blind batches AT3 and the corpus's [NEW] causes): a rank's own
Python exception is a cause, not an unknown.

A failing log whose first failure line no signature knows is an honest unknown
(LOGS-UNRECOGNIZED).  When that line is a Python-level exception (a ValueError a library
raises on the arguments it got, an AttributeError of the training code, a KeyError of a
launcher's environment, an AssertionError of a config check) the log has said what went
wrong: the code raised, and nothing in NCCL, c10d, the network or the launcher failed
before it.  Of the corpus's 130 honest unknowns (round 21's end), 15 end in such a line, and
in 14 of them the thread's established cause is what the exception says (at3-llamatuner's "DeepSpeed
Zero-3 is not compatible with ... device_map", u1's "Can't pickle <function <lambda>>",
k3's FileNotFoundError of a deleted image, o1's KeyError of a launcher's variable).
LOGS-APP-EXCEPTION names it, with the frame of the user's code the traceback ends in.

What is left out, so it stays an unknown: exceptions of the distributed stack and of the
environment (DistBackendError, ChildFailedError, OSError and its network kin,
ImportError: a broken install is no bug of the code), and a RuntimeError or a project's own
error type whose message speaks of NCCL, CUDA, sockets, stores, drivers or memory (those
are the stack's failures, reported through Python).  Core layer, stdlib only.
"""

from __future__ import annotations

import re
from typing import Final

from ddptui.diagnosis.factmodel import APP_EXCEPTION

__all__ = ["APP_EXCEPTION", "app_exception"]

# a Python exception line, after any launcher prefix ("[rank0]: ", "host: ", "0: ")
_EXC: Final = re.compile(
    r"(?:^|[\]>|:]\s?)\s*(?P<type>(?:[A-Za-z_]\w*\.)*(?P<name>[A-Z]\w*(?:Error|Exception)))"
    r"(?P<rest>(?::\s.*)|\s*$)"
)
# Python's own exceptions that a program raises on its own data, arguments or code
_PYTHON: Final = frozenset(
    {
        "AttributeError", "KeyError", "TypeError", "ValueError", "IndexError", "NameError",
        "AssertionError", "FileNotFoundError", "NotImplementedError", "ZeroDivisionError",
        "UnboundLocalError", "RecursionError", "JSONDecodeError", "PicklingError",
        "IsADirectoryError", "NotADirectoryError", "FileExistsError", "OverflowError",
        "LookupError", "SyntaxError", "IndentationError", "UnicodeDecodeError",
        "UnicodeEncodeError", "ConfigAttributeError", "ConfigKeyError", "HFValidationError",
        "ValidationError", "ArgumentError", "ArgumentTypeError",
    }
)  # fmt: skip
# never the code's own: the distributed stack's, the environment's, the system's
_NOT_OWN: Final = re.compile(
    r"Dist\w*Error|ChildFailed|Rendezvous|Nccl|NCCL|Gloo|Store|Socket|Connection|Timeout|"
    r"OSError|IOError|BrokenPipe|EOFError|MemoryError|OutOfMemory|Import|ModuleNotFound|"
    r"Permission|SystemError|InternalError|Signal|Killed|Ray\w*Error|Unknown|Cuda|CUDA|"
    r"Hip|HIP|Xpu|XPU|MPI|Process\w*Exception|Unpickling|Pipe|Interrupt"
)
_STACK_WORDS: Final = re.compile(
    r"(?i)nccl|rccl|\bcuda\b|cudnn|cublas|cufft|cusparse|\bhip\b|\bxpu\b|\bmpi\b|gloo|c10d|"
    r"socket|connect|timed out|timeout|\bstore\b|rendezvous|process group|processgroup|"
    r"\bdriver\b|device-side|illegal memory|out of memory|\becc\b|\bxid\b|"
    r"address|\bport\b|hostname|\bsignal\b|killed|segmentation|bus error|shared memory|"
    r"/dev/shm|\binfiniband\b|\bib\b|\brdma\b|\befa\b|libfabric|network|nvshmem|"
    r"synstatus|\bhccl\b|graph compile"
)


def app_exception(text: str) -> tuple[str, str] | None:
    """(exception type, message) when a failure line is a Python exception the code
    raised itself (module docstring); None for anything else."""
    m = _EXC.search(text)
    if m is None:
        return None
    name, qualified = m["name"], m["type"]
    message = m["rest"].lstrip(":").strip()
    if name not in _PYTHON:
        if _NOT_OWN.search(qualified) is not None:
            return None
        if not message:  # a bare "RuntimeError": nothing said
            return None
    if _STACK_WORDS.search(message) is not None:
        return None
    return qualified, message
