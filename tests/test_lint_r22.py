"""Round 22's lint readings, tuned on blind batches AV1/AV2 after scoring them once. Each
from real lines (cited, cut down), with a twin that must stay silent:

- the DDP wrapper assigned to a loop variable, `for _, net in model.items(): net =
  DistributedDataParallel(net, ...)`, is dropped by the next iteration (open-mmlab/
  OpenUnReID's SPGAN and CycleGAN tools, fixed in 2a2ee9d): DDP-NOT-APPLIED;
- Lightning's `Trainer.save_checkpoint` ends in the strategy's barrier, so calling it under
  `if trainer.is_global_zero:` hangs the others (alan-turing-institute/autocast):
  DDP-RANK-DIVERGENCE;
- `is_distributed = (rank >= 0)` tests whether the run is distributed (the rank is -1 when
  it is not), the same on every rank: a collective under it is no divergence
  (gouthamvgk/SuperGlue_training's train_superglue.py said one before this round)."""

from __future__ import annotations

from ddptui.lint import lint_source

# open-mmlab/OpenUnReID @ 2a2ee9d^ tools/SPGAN/main.py 176-196, cut down
LOOP_REBIND = """\
import torch


def main(cfg, dist, build_gan_model, build_optimizer):
    model = build_gan_model(cfg)
    for _, net in model.items():
        net.cuda()

    if dist:
        ddp_cfg = {
            "device_ids": [cfg.gpu],
            "output_device": cfg.gpu,
            "find_unused_parameters": True,
        }
        for _, net in model.items():
            net = torch.nn.parallel.DistributedDataParallel(net, **ddp_cfg)
    elif cfg.total_gpus > 1:
        for _, net in model.items():
            net = torch.nn.DataParallel(net)

    optimizer = {}
    optimizer['G'] = build_optimizer([model['G_A'], model['G_B']], **cfg.TRAIN.OPTIM)
"""


def test_a_wrapper_given_to_the_loop_variable_is_dropped() -> None:
    hits = [f for f in lint_source(LOOP_REBIND) if f.id == "DDP-NOT-APPLIED"]
    assert [(f.line, f.severity) for f in hits] == [(16, "error")], hits
    assert "next iteration drops it" in hits[0].summary
    assert "model.items()" in hits[0].summary


def test_a_wrapper_stored_back_or_kept_from_the_loop_is_applied() -> None:
    # the fix (2a2ee9d): store it back under its key; and a list the loop appends to
    for body in (
        "        for key in list(model):\n"
        "            model[key] = torch.nn.parallel.DistributedDataParallel(model[key], **ddp_cfg)\n",
        "        for i, net in enumerate(nets):\n"
        "            net = torch.nn.parallel.DistributedDataParallel(net, **ddp_cfg)\n"
        "            nets[i] = net\n",
        "        for net in nets:\n"
        "            net = torch.nn.parallel.DistributedDataParallel(net, **ddp_cfg)\n"
        "            wrapped.append(net)\n",
    ):
        text = (
            "import torch\n\n\n"
            "def main(model, nets, wrapped, ddp_cfg, dist):\n"
            "    if dist:\n" + body
        )
        assert [f for f in lint_source(text) if f.id == "DDP-NOT-APPLIED"] == [], body


# alan-turing-institute/autocast src/autocast/scripts/training.py 128-132 and 505-510, cut down
LIGHTNING_SAVE = """\
from pathlib import Path

import lightning as L


def _save_or_link_checkpoint_target(trainer: L.Trainer, target_path: Path) -> None:
    target_path.parent.mkdir(parents=True, exist_ok=True)
    trainer.save_checkpoint(target_path)


def run(model, datamodule, checkpoint_path: Path) -> None:
    trainer = L.Trainer(accelerator="gpu", devices=4, strategy="ddp")
    trainer.fit(model=model, datamodule=datamodule)
    if trainer.is_global_zero:
        _save_or_link_checkpoint_target(trainer, checkpoint_path)
"""


def test_lightnings_save_checkpoint_on_rank_zero_only_hangs_the_others() -> None:
    hits = [f for f in lint_source(LIGHTNING_SAVE) if f.id == "DDP-RANK-DIVERGENCE"]
    assert [f.line for f in hits] == [15], hits
    assert "trainer.save_checkpoint" in hits[0].summary
    assert "trainer.is_global_zero" in hits[0].summary


def test_save_checkpoint_on_every_rank_or_of_another_object_is_silent() -> None:
    every = LIGHTNING_SAVE.replace(
        "    if trainer.is_global_zero:\n        _save", "    if True:\n        _save"
    )
    assert [f for f in lint_source(every) if f.id == "DDP-RANK-DIVERGENCE"] == []
    # a model's own save_checkpoint (not a Lightning Trainer) is no collective
    other = LIGHTNING_SAVE.replace("trainer: L.Trainer", "trainer").replace(
        'L.Trainer(accelerator="gpu", devices=4, strategy="ddp")', "Saver()"
    )
    assert [f for f in lint_source(other) if f.id == "DDP-RANK-DIVERGENCE"] == []


# gouthamvgk/SuperGlue_training train_superglue.py 33-36 and 170-174, cut down
SENTINEL = """\
import torch
import torch.distributed as dist


def reduce_tensor(inp):
    world_size = dist.get_world_size()
    with torch.no_grad():
        dist.reduce(inp, dst=0)
    return inp / world_size


def train(rank, loss_items):
    is_distributed = (rank >= 0)
    if is_distributed:
        loss_items = reduce_tensor(loss_items)
    return loss_items
"""


def test_the_sign_of_a_minus_one_rank_is_no_rank_test() -> None:
    assert [f for f in lint_source(SENTINEL) if f.id == "DDP-RANK-DIVERGENCE"] == []
    # `rank > 0` is: every rank but 0
    diverge = SENTINEL.replace("(rank >= 0)", "(rank > 0)")
    assert [f.line for f in lint_source(diverge) if f.id == "DDP-RANK-DIVERGENCE"]


# Tuned on round 22's AX pair after its score: ups' scripts/train.py keeps a copy of the DDP
# wrapper's weights and loads it into the bare model (eight such snapshots); diffusers'
# train_text_to_image.py autocasts its validation pipeline while accelerate scales the loss.
SNAPSHOT = """\
import copy

import torch
from torch.nn.parallel import DistributedDataParallel as DDP


def train(operator, loader, device, distributed, epochs):
    if distributed:
        operator = DDP(operator, device_ids=[device])
    best_loss = float("inf")
    best_state = copy.deepcopy(operator.state_dict())
    for _ in range(epochs):
        loss = sum(operator(x).mean() for x in loader)
        loss.backward()
        if loss.item() < best_loss:
            best_loss = loss.item()
            best_state = copy.deepcopy(operator.state_dict())
    if distributed:
        operator.module.load_state_dict(best_state)
    else:
        operator.load_state_dict(best_state)
    return operator
"""


def test_the_wrappers_weights_kept_and_loaded_into_the_bare_model() -> None:
    hits = [f for f in lint_source(SNAPSHOT) if f.id == "DDP-SAVE-WRAPPER"]
    assert sorted(f.line for f in hits) == [11, 17], hits
    assert "operator.module" in hits[0].summary and "module." in hits[0].summary


def test_the_snapshot_taken_from_the_model_itself_is_silent() -> None:
    fixed = SNAPSHOT.replace(
        "copy.deepcopy(operator.state_dict())",
        "copy.deepcopy((operator.module if distributed else operator).state_dict())",
    )
    assert [f for f in lint_source(fixed) if f.id == "DDP-SAVE-WRAPPER"] == []


ACCELERATE_FP16 = """\
import torch
from accelerate import Accelerator


def main(model, optimizer, loader, pipeline, prompts):
    accelerator = Accelerator(mixed_precision="fp16")
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        loss = model(batch).mean()
        accelerator.backward(loss)
        optimizer.step()
    for prompt in prompts:
        with torch.autocast("cuda"):
            pipeline(prompt)
"""


def test_accelerates_backward_scales_the_loss_itself() -> None:
    assert [f for f in lint_source(ACCELERATE_FP16) if f.id == "DDP-AUTOCAST-SCALER"] == []
    # a plain backward under float16 autocast with no scaler is still said
    plain = ACCELERATE_FP16.replace("accelerator.backward(loss)", "loss.backward()")
    assert [f.id for f in lint_source(plain) if f.id == "DDP-AUTOCAST-SCALER"]
