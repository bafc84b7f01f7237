"""`inventory`: facts per node and the skew across nodes."""

from __future__ import annotations

from collections import Counter
from typing import Any

from ddptui.checklist.base import Step, StepContext
from ddptui.diagnosis.model import Finding, NodeResult, finding

# (fact key, label, severity when nodes differ, why it matters)
SKEW_RULES: tuple[tuple[str, str, str, str], ...] = (
    (
        "torch",
        "torch version",
        "error",
        "Every rank must run the same torch build: collectives, the c10d store protocol and "
        "pickled objects differ between versions (connection resets or hangs at init).",
    ),
    (
        "torch_cuda",
        "torch CUDA build",
        "error",
        "Different CUDA builds of torch ship different NCCL and kernels.",
    ),
    (
        "nccl",
        "NCCL runtime",
        "error",
        "NCCL >= 2.23 refuses peers of another version; older ones misbehave (message truncated, "
        "'is neither AF_INET' errors).",
    ),
    (
        "python_minor",
        "python version",
        "warning",
        "Different Python minor versions usually mean different environments (and packages).",
    ),
    (
        "gpu_count",
        "GPU count",
        "warning",
        "nproc_per_node=gpus then starts a different number of ranks per node, and torchrun "
        "assumes a homogeneous local world size.",
    ),
    (
        "driver",
        "NVIDIA driver",
        "warning",
        "Different drivers can support different CUDA versions; align them to avoid surprises.",
    ),
)


class InventoryStep(Step):
    id = "inventory"
    title = "Node inventory and version skew"

    async def check(
        self, ctx: StepContext, nodes: dict[str, NodeResult]
    ) -> tuple[list[Finding], dict[str, Any]]:
        findings: list[Finding] = []
        facts = await self.gather_facts(
            ctx, nodes, findings, "inventory", lambda t: {}, _summary, _enrich
        )

        for name, data in facts.items():
            if data.get("torch_error"):
                findings.append(
                    finding(
                        "INV-NO-TORCH",
                        "error",
                        [name],
                        f"{name}: torch is not usable with {data.get('python_executable')}",
                        f"{data['torch_error']}. The allreduce (and your job) cannot start there.",
                        "Point `python:` at the training environment's interpreter, or install torch "
                        "into it (`python -m pip install torch==<the version on the other nodes>`).",
                        [f"{name}: python {data.get('python')} at {data.get('python_executable')}"],
                    )
                )
            if data.get("gpu_error"):
                findings.append(
                    finding(
                        "INV-GPU-ERROR",
                        "warning",
                        [name],
                        f"{name}: GPUs could not be listed",
                        str(data["gpu_error"]),
                        "Run `nvidia-smi` on the node; a driver/library mismatch needs a reboot or "
                        "a driver reinstall.",
                        [f"{name}: {data['gpu_error']}"],
                    )
                )
        findings += skew_findings(facts)
        table = skew_table(facts)
        self.judge_nodes(ctx, nodes, findings)
        return findings, {"skew": table}


def _enrich(data: dict[str, Any]) -> None:
    data["python_minor"] = ".".join(str(data.get("python", "")).split(".")[:2])
    data["gpu_count"] = len(data.get("gpus") or [])


def _summary(data: dict[str, Any]) -> str:
    gpus = data.get("gpus") or []
    gpu = f"{len(gpus)}x {gpus[0]['name']}" if gpus else "no GPU"
    torch = data.get("torch") or "no torch"
    cuda = f"+cuda{data['torch_cuda']}" if data.get("torch_cuda") else ""
    return f"{data.get('hostname')}: python {data.get('python')}, torch {torch}{cuda}, {gpu}"


def skew_table(facts: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{fact: {node: value}} for the facts that matter across nodes."""
    keys = [k for k, *_ in SKEW_RULES] + ["python", "kernel", "os"]
    return {k: {n: d.get(k) for n, d in facts.items()} for k in keys}


def skew_findings(facts: dict[str, dict[str, Any]]) -> list[Finding]:
    out: list[Finding] = []
    if len(facts) < 2:
        return out
    for key, label, severity, why in SKEW_RULES:
        values = {n: d.get(key) for n, d in facts.items()}
        if key in ("driver", "nccl", "torch_cuda") and all(v is None for v in values.values()):
            continue
        distinct = set(map(str, values.values()))
        if len(distinct) < 2:
            continue
        common, _ = Counter(map(str, values.values())).most_common(1)[0]
        odd = [n for n, v in values.items() if str(v) != common]
        out.append(
            finding(
                f"INV-SKEW-{key.upper().replace('_MINOR', '').replace('_', '-')}",
                severity,  # type: ignore[arg-type]
                odd,
                f"{label} differs across nodes: {', '.join(odd)} "
                f"{'differs' if len(odd) == 1 else 'differ'} from the rest ({common})",
                why,
                f"Install the same {label} on every node (the majority has {common}); "
                "one shared environment image or a pinned requirements file avoids drift.",
                [f"{n}: {v}" for n, v in values.items()],
            )
        )
    return out
