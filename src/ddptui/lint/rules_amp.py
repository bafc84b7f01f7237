"""DDP-AUTOCAST-SCALER: float16 autocast with no loss scaling (split from rules_model)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddptui.lint.flow import Flow, ident
from ddptui.lint.model import Hit
from ddptui.lint.script import Script
from ddptui.lint.syntax import const, kwarg, last


def autocast_scaler(s: Script, f: Flow) -> Iterator[Hit]:
    if f.uses("GradScaler", "ShardedGradScaler", "NativeScaler", "NativeScalerWithGradNormCount"):
        return  # timm's NativeScaler (and MAE's copy) hold a GradScaler
    backwards = [c for c in s.calls if f.is_backward(c)]
    if not backwards or any("scaler" in (ident(c.func) or "").lower() and c.args for c in s.calls):
        return  # `loss_scaler(loss, optimizer, ...)`: a scaler object called with the loss
    if all(
        isinstance(c.func, ast.Attribute) and f.launcher_value(c.func.value) for c in backwards
    ):
        # round 22 (blind AX1, diffusers' train_text_to_image.py): `accelerator.backward(loss)`
        # scales the loss itself under mixed_precision="fp16" (accelerate's and Fabric's own
        # GradScaler); an autocast around the validation pipeline is no training step
        return

    for c in s.calls:
        qn = s.call_name(c)
        if (
            last(qn) != "autocast"
            or not qn.startswith("torch")
            or const(kwarg(c, "enabled")) is False
        ):
            continue
        dtype = kwarg(c, "dtype", None if "amp.autocast" in qn and "cuda" in qn else 1)
        if dtype is not None:
            fp16 = ident(dtype) in ("float16", "half")
        else:
            device = const(kwarg(c, "device_type", 0))
            fp16 = ".cuda." in qn or device == "cuda"
        if fp16:
            yield Hit.at(
                "DDP-AUTOCAST-SCALER",
                c,
                (f"`{ast.unparse(c)}` runs in float16 and no GradScaler scales the loss"),
            )
            return


RULES = (autocast_scaler,)
