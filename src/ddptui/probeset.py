"""Find and assemble the node-side probe scripts.

The probes live in the repository's top-level ``probes/`` folder. A wheel ships
them as ``ddptui/_probes``; an editable checkout reads them from the repo. Both
are found here the same way, so the code shipped to nodes is the code in git.
"""

from __future__ import annotations

import functools
from pathlib import Path

PROBE_PREFIX_FILES = ("_common.py",)
# Extra shared files a probe needs, sent after _common.py and before the probe.
PROBE_LIBS: dict[str, tuple[str, ...]] = {
    "env": ("_redact.py",),
    "job": ("_redact.py", "_proc.py", "_inspector.py", "_fileid.py"),
    "allreduce": ("_redact.py",),
    "fabric": ("_redact.py",),
    "logread": ("_redact.py", "_fileid.py", "_linescan.py"),
}


class ProbeNotFound(LookupError):
    pass


@functools.cache
def probes_dir() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "_probes", here.parent.parent / "probes"):
        if (candidate / "_bootstrap.py").is_file():
            return candidate
    raise ProbeNotFound(
        f"ddptui's probe scripts are missing (looked in {here / '_probes'} and "
        f"{here.parent.parent / 'probes'}); reinstall ddptui"
    )


@functools.cache
def bootstrap_source() -> str:
    return (probes_dir() / "_bootstrap.py").read_text(encoding="utf-8")


@functools.cache
def helper_source(filename: str) -> str:
    """A node-side file that is not a probe itself (e.g. the allreduce worker)."""
    path = probes_dir() / filename
    if not filename.startswith("_") or not path.is_file():
        raise ProbeNotFound(f"no helper file {filename!r} in {probes_dir()}")
    return path.read_text(encoding="utf-8")


@functools.cache
def probe_source(name: str) -> str:
    """The program sent for probe `name`: the shared helpers, then the probe itself."""
    if not name.replace("_", "").isalnum() or name.startswith("_"):
        raise ProbeNotFound(f"invalid probe name {name!r}")
    path = probes_dir() / f"{name}.py"
    if not path.is_file():
        raise ProbeNotFound(f"no probe named {name!r} in {probes_dir()}")
    files = (*PROBE_PREFIX_FILES, *PROBE_LIBS.get(name, ()))
    parts = [(probes_dir() / f).read_text(encoding="utf-8") for f in files]
    parts.append(path.read_text(encoding="utf-8"))
    return "\n".join(parts)
