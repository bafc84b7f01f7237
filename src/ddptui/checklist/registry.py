"""The checklist: step ids in order, and the class for each."""

from __future__ import annotations

from ddptui import stepmeta
from ddptui.checklist.base import Step
from ddptui.checklist.steps.allreduce import AllreduceStep
from ddptui.checklist.steps.ddp import DdpStep
from ddptui.checklist.steps.env import EnvStep
from ddptui.checklist.steps.fabric import FabricStep
from ddptui.checklist.steps.inventory import InventoryStep
from ddptui.checklist.steps.ping import PingStep
from ddptui.checklist.steps.port import PortStep
from ddptui.checklist.steps.ssh import SSHStep

STEPS: dict[str, type[Step]] = {
    cls.id: cls
    for cls in (
        SSHStep,
        InventoryStep,
        PingStep,
        PortStep,
        EnvStep,
        AllreduceStep,
        FabricStep,
        DdpStep,
    )
}
ORDER = stepmeta.ORDER
TITLES = stepmeta.TITLES
# The plain-data copy that views use must describe exactly these steps.
assert tuple(STEPS) == ORDER and {k: v.title for k, v in STEPS.items()} == TITLES


def parse_steps(spec: str | None) -> list[str]:
    """`--steps a,b` -> ordered ids (ssh always included: every step needs the connection)."""
    if not spec:
        return list(ORDER)
    wanted = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in STEPS]
    if unknown:
        raise ValueError(
            f"unknown step(s): {', '.join(unknown)} (valid steps, in order: {', '.join(ORDER)})"
        )
    chosen = set(wanted) | {"ssh"}
    return [s for s in ORDER if s in chosen]
