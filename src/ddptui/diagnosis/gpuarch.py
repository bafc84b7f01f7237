"""Which NCCL release first supports a GPU: gpuarch.yaml loaded and validated, a GPU
model named in a log matched to its architecture.  Core layer, stdlib and ruamel.yaml."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

GPUARCH_FILE: Final = Path(__file__).with_name("gpuarch.yaml")
_VERSION: Final = re.compile(r"^\d+\.\d+\.\d+$")


class GpuArchError(ValueError):
    """gpuarch.yaml is malformed; the message names the entry and the problem."""


@dataclass(frozen=True)
class Arch:
    arch: str  # "sm_90"
    nccl_since: tuple[int, int, int]
    source: str  # where in NVIDIA/nccl's history the support was added
    gpus: re.Pattern[str]

    @property
    def since(self) -> str:
        return ".".join(map(str, self.nccl_since))


def version_tuple(text: str) -> tuple[int, int, int] | None:
    """"2.14.3" (also "2.14.3+cuda11.8", "2.14.3-1") as a tuple; None if not a version."""
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", text)
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def parse_gpuarch(text: str) -> tuple[Arch, ...]:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        doc = YAML(typ="safe").load(text)
    except YAMLError as exc:
        raise GpuArchError(f"not valid YAML: {exc}") from exc
    if not isinstance(doc, dict) or set(doc) != {"archs"} or not isinstance(doc["archs"], list):
        raise GpuArchError("expected one top-level 'archs:' list")
    out = []
    for i, e in enumerate(doc["archs"], 1):
        keys = {"arch", "nccl_since", "source", "gpus"}
        if not isinstance(e, dict) or set(e) != keys:
            raise GpuArchError(f"archs[{i}]: keys must be {sorted(keys)}")
        since = str(e["nccl_since"])
        got = version_tuple(since)
        if not _VERSION.match(since) or got is None:
            raise GpuArchError(f"archs[{i}]: nccl_since {since!r} is not a version like 2.15.1")
        pats = e["gpus"]
        if not isinstance(pats, list) or not pats or not all(isinstance(p, str) and p for p in pats):
            raise GpuArchError(f"archs[{i}]: gpus must be a non-empty list of patterns")
        try:
            rx = re.compile("|".join(f"(?:{p})" for p in pats))
        except re.error as exc:
            raise GpuArchError(f"archs[{i}]: a gpus pattern does not compile: {exc}") from exc
        out.append(Arch(str(e["arch"]), got, str(e["source"]), rx))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def load_gpuarch() -> tuple[Arch, ...]:
    try:
        text = GPUARCH_FILE.read_text(encoding="utf-8")
    except OSError as exc:
        raise GpuArchError(f"cannot read {GPUARCH_FILE.name}: {exc}") from exc
    try:
        return parse_gpuarch(text)
    except GpuArchError as exc:
        raise GpuArchError(f"{GPUARCH_FILE.name}: {exc}") from None


def arch_of(model: str) -> Arch | None:
    """The architecture of a GPU model as a log names it ("H100 80GB HBM3")."""
    return next((a for a in load_gpuarch() if a.gpus.match(model)), None)
