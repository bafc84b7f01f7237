"""`inventory`: facts per node and the skew across nodes."""

from __future__ import annotations

from typing import Any

from ddptui.checklist.base import Step, StepContext
from ddptui.diagnosis.finding import Finding
from ddptui.diagnosis.kb import kb_finding
from ddptui.diagnosis.model import NodeResult, majority_value, odd_nodes
from ddptui.diagnosis.ranking import Topology

# (fact key, finding id, label); severity and why it matters are in kb/checklist.yaml.
SKEW_RULES: tuple[tuple[str, str, str], ...] = (
    ("torch", "INV-SKEW-TORCH", "torch version"),
    ("torch_cuda", "INV-SKEW-TORCH-CUDA", "torch CUDA build"),
    ("nccl", "INV-SKEW-NCCL", "NCCL runtime"),
    ("python_minor", "INV-SKEW-PYTHON", "python version"),
    ("gpu_count", "INV-SKEW-GPU-COUNT", "GPU count"),
    ("driver", "INV-SKEW-DRIVER", "NVIDIA driver"),
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
                    kb_finding(
                        "INV-NO-TORCH",
                        [name],
                        f"{name}: torch is not usable with {data.get('python_executable')}",
                        [f"{name}: python {data.get('python')} at {data.get('python_executable')}"],
                        error=data["torch_error"],
                    )
                )
            if data.get("gpu_error"):
                findings.append(
                    kb_finding(
                        "INV-GPU-ERROR",
                        [name],
                        f"{name}: GPUs could not be listed",
                        [f"{name}: {data['gpu_error']}"],
                        error=data["gpu_error"],
                    )
                )
        findings += skew_findings(facts)
        findings += same_machine_findings(ctx, facts)
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


def same_machine_findings(ctx: StepContext, facts: dict[str, dict[str, Any]]) -> list[Finding]:
    """Config entries that reach one host and network stack (same boot id and network
    namespace): usually a mistake, expected when every node is `host: local`."""
    targets = [t for t in ctx.targets if t.name in facts]
    topo = Topology.from_nodes(
        (t.name, t.host, t.port, facts[t.name].get("boot_id"), facts[t.name].get("netns"))
        for t in targets
    )
    demo = all(t.host == "local" for t in ctx.targets)
    return [
        kb_finding(
            "INV-SAME-MACHINE",
            group,
            f"{', '.join(group)} are the same machine"
            + (" (expected: every node is `host: local`)" if demo else ""),
            [
                f"{n}: host {facts[n].get('hostname')}, machine-id {facts[n].get('machine_id')}, "
                f"boot-id {facts[n].get('boot_id')}, network namespace {facts[n].get('netns')}"
                for n in group
            ],
            severity="info" if demo else None,
        )
        for group in topo.same_host_groups()
    ]


def skew_table(facts: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{fact: {node: value}} for the facts that matter across nodes."""
    keys = [k for k, _, _ in SKEW_RULES] + ["python", "kernel", "os"]
    return {k: {n: d.get(k) for n, d in facts.items()} for k in keys}


def skew_findings(facts: dict[str, dict[str, Any]]) -> list[Finding]:
    out: list[Finding] = []
    if len(facts) < 2:
        return out
    for key, fid, label in SKEW_RULES:
        values = {n: d.get(key) for n, d in facts.items()}
        if key in ("driver", "nccl", "torch_cuda") and all(v is None for v in values.values()):
            continue
        distinct = set(map(str, values.values()))
        if len(distinct) < 2:
            continue
        odd = odd_nodes({n: str(v) for n, v in values.items()})
        common = majority_value({n: str(v) for n, v in values.items()}) or "no majority"
        out.append(
            kb_finding(
                fid,
                odd,
                f"{label} differs across nodes: {', '.join(odd)} "
                f"{'differs' if len(odd) == 1 else 'differ'} from the rest ({common})",
                [f"{n}: {v}" for n, v in values.items()],
                common=common,
            )
        )
    return out
