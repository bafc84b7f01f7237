"""A saved report back into immutable results (for replay and for snapshot tests), read
through the report model (schema.StepModel) that build_report and load_report check."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddptui.diagnosis.model import StepResult


def results_from_report(report: Mapping[str, Any]) -> dict[str, StepResult]:
    """Each step of `report` as a StepResult; ReportError names a step the model rejects.
    Only `steps` is read, so a partial document (a test's, an older ddptui's) converts."""
    from pydantic import ValidationError  # here: pydantic stays off the TUI's first frame

    from ddptui.report.schema import ReportError, StepModel

    out: dict[str, StepResult] = {}
    for i, step in enumerate(report.get("steps") or []):
        try:
            model = StepModel.model_validate(step)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in ("steps", i, *err["loc"]))
            raise ReportError(f"not a ddptui report: {where}: {err['msg']}") from None
        out[model.id] = model.to_result()
    return out
