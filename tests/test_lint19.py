"""Round 19: the false errors of blind batches N and O on correct projects, each followed
in general. The code is the real projects' (only the lines needed, each cited with its
repository and commit); each correct shape stays silent beside a wrong twin that keeps
its finding."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project
from lintproject import severities as _sev

# A helper's barrier behind a flag the caller turns off (blind O, correct).
# allenai/OLMo @ c13090d77f9e8573cd325f44217b68b5627d1cc3: olmo/checkpoint.py's
# save_state_dict keeps `barrier()` under `if synchronize:`, and the checkpointer calls it
# on rank 0 only with `synchronize=False`, then runs barrier() on every rank.
OLMO_CKPT = """\
import torch
import torch.distributed as dist


def barrier():
    if dist.is_initialized():
        dist.barrier()


def save_state_dict(checkpoint_dir, fname, state_dict, *, upload_to=None, synchronize=True):
    target_path = checkpoint_dir + "/" + fname
    if synchronize:
        barrier()
    torch.save(state_dict, target_path)


def write_model_dict(model_state_dict, checkpoint_dir):
    if dist.get_rank() == 0:
        save_state_dict(checkpoint_dir, "model.pt", model_state_dict, synchronize={SYNC})
    del model_state_dict
    barrier()
"""
OLMO_TRAIN = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from checkpoint import write_model_dict


def main(net, loader, opt):
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    model = DDP(net.cuda(), device_ids=[int(os.environ["LOCAL_RANK"])])
    for batch in loader:
        opt.zero_grad()
        model(batch).sum().backward()
        opt.step()
    write_model_dict(model.module.state_dict(), "ckpt")
"""


def test_barrier_behind_a_flag_the_call_turns_off_is_silent(tmp_path: Path) -> None:
    ok = {"train.py": OLMO_TRAIN, "checkpoint.py": OLMO_CKPT.replace("{SYNC}", "False")}
    assert _sev(lint_project(tmp_path / "ok", ok), "DDP-RANK-DIVERGENCE") == []
    bad = {"train.py": OLMO_TRAIN, "checkpoint.py": OLMO_CKPT.replace("{SYNC}", "True")}
    found = _sev(lint_project(tmp_path / "bad", bad), "DDP-RANK-DIVERGENCE")
    assert [(n, ln, sv) for n, ln, sv in found] == [("checkpoint.py", 19, "error")]


# A NaN-loss `continue` inside a loop bounded by the completed steps (blind N, correct).
# haofeixu/gmflow @ 6034d22be615c3d24dabc7fd55fcb8d6de167e06: main.py runs
# `while total_steps < args.num_steps: for sample in train_loader:` and skips a batch with
# `if torch.isnan(loss): continue` before `loss.backward()`; `total_steps += 1` follows
# the step, so every rank runs num_steps backward passes and they pair up one for one.
GMFLOW = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(args, net, train_loader, train_sampler, optimizer, loss_func):
    dist.init_process_group("nccl")
    torch.cuda.set_device(args.local_rank)
    model = DDP(net.cuda(), device_ids=[args.local_rank])
    total_steps = 0
    epoch = 0
    {LOOP}
        train_sampler.set_epoch(epoch)
        for i, sample in enumerate(train_loader):
            loss = loss_func(model(sample))
            if torch.isnan(loss):
                continue
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total_steps += 1
        epoch += 1
"""


def test_continue_in_a_loop_bounded_by_completed_steps_is_silent(tmp_path: Path) -> None:
    ok = {"train.py": GMFLOW.replace("{LOOP}", "while total_steps < args.num_steps:")}
    assert _sev(lint_project(tmp_path / "ok", ok), "DDP-RANK-DIVERGENCE") == []
    bad = {"train.py": GMFLOW.replace("{LOOP}", "for epoch in range(args.epochs):")}
    found = _sev(lint_project(tmp_path / "bad", bad), "DDP-RANK-DIVERGENCE")
    assert found == [("train.py", 17, "error")]


# An attribute the script sets on the wrapper itself (blind N, correct).
# WongKinYiu/yolov9 @ 5b1ea9a8b3f0ffe4fe0e203ec6232d788bb3fcff: train.py wraps
# `model = smart_DDP(model)`, then `model.hyp = hyp` and `ComputeLoss(model)`, whose
# __init__ (utils/loss_tal.py) reads `h = model.hyp`: the wrapper holds it.
YOLO_LOSS = """\
import torch


class ComputeLoss:
    def __init__(self, model):
        device = next(model.parameters()).device
        h = model.hyp
        self.cls_pw = torch.tensor([h["cls_pw"]], device=device)
"""
YOLO_TRAIN = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from loss_tal import ComputeLoss

LOCAL_RANK = int(os.getenv("LOCAL_RANK", -1))


def train(hyp, model, loader, optimizer):
    torch.cuda.set_device(LOCAL_RANK)
    dist.init_process_group("nccl")
    model = DDP(model.cuda(), device_ids=[LOCAL_RANK])
    {SET}
    compute_loss = ComputeLoss(model)
    for imgs, targets in loader:
        optimizer.zero_grad()
        compute_loss(model(imgs), targets).backward()
        optimizer.step()
"""


def test_attribute_set_on_the_wrapper_is_silent(tmp_path: Path) -> None:
    ok = {"train.py": YOLO_TRAIN.replace("{SET}", "model.hyp = hyp"), "loss_tal.py": YOLO_LOSS}
    assert _sev(lint_project(tmp_path / "ok", ok), "DDP-WRAPPER-ATTR") == []
    bad = {"train.py": YOLO_TRAIN.replace("{SET}", "model.module.hyp = hyp"), "loss_tal.py": YOLO_LOSS}
    found = _sev(lint_project(tmp_path / "bad", bad), "DDP-WRAPPER-ATTR")
    assert found == [("loss_tal.py", 7, "error")]
    # stored while the name held the plain model, then wrapped again: the wrapper lacks it
    # (netspresso-trainer's `model = build_model(...); model.backbone = ...` shape)
    rewrap = "model = model.module\n    model.hyp = hyp\n    model = DDP(model, device_ids=[LOCAL_RANK])"
    again = {"train.py": YOLO_TRAIN.replace("{SET}", rewrap), "loss_tal.py": YOLO_LOSS}
    found = _sev(lint_project(tmp_path / "again", again), "DDP-WRAPPER-ATTR")
    assert found == [("loss_tal.py", 7, "error")]


# A name that may also hold a project object with the attribute (blind O, correct).
# apple/ml-cvnets @ 77717569ab4a852614dae01f010b32b820cb33bb: main_train.py builds
# `model_ema = EMA(model=model, ...)` (cvnets/misc/averaging_utils.py, a plain class with
# update_parameters and self.ema_model) and hands it to the Trainer, whose step calls
# `self.model_ema.update_parameters(self.model)`; a finetune branch rebinds it from a
# helper that returns the model. The wrapper's own class method stays a finding.
CVNETS = """\
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def load_state_dict(model, state_dict):
    if hasattr(model, "module"):
        model.module.load_state_dict(state_dict)
    else:
        model.load_state_dict(state_dict)
    return model


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)

    def freeze_norm(self):
        pass


class EMA(object):
    def __init__(self, model, ema_momentum=0.1):
        self.ema_model = model
        self.momentum = ema_momentum

    def update_parameters(self, model):
        pass


class Trainer(object):
    def __init__(self, model, model_ema, optimizer, loader):
        self.model = model
        self.model_ema = model_ema
        self.optimizer = optimizer
        self.loader = loader

    def train_epoch(self):
        for batch in self.loader:
            self.optimizer.zero_grad()
            self.model(batch).sum().backward()
            self.optimizer.step()
            self.model_ema.update_parameters(self.model)
            {EXTRA}


def main(local_rank, loader, finetune_ema):
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = DDP(Net().cuda(), device_ids=[local_rank])
    model_ema = EMA(model=model)
    if finetune_ema is not None:
        model_ema = load_state_dict(model, torch.load(finetune_ema, map_location="cpu"))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    Trainer(model, model_ema, opt, loader).train_epoch()
"""


def test_name_that_may_hold_a_project_object_with_the_attribute_is_silent(tmp_path: Path) -> None:
    ok = {"train.py": CVNETS.replace("{EXTRA}", "pass")}
    assert _sev(lint_project(tmp_path / "ok", ok), "DDP-WRAPPER-ATTR") == []
    bad = {"train.py": CVNETS.replace("{EXTRA}", "self.model.freeze_norm()")}
    found = _sev(lint_project(tmp_path / "bad", bad), "DDP-WRAPPER-ATTR")
    assert found == [("train.py", 49, "error")]


# A loop bound only rank 0 keeps up to date (blind N, a miss).
# facebookresearch/pytext before PR #585: Trainer.train loops `while
# self.continue_training(state):`, which stops once `state.epochs_since_last_improvement`
# reaches early_stop_after; update_best_model resets it, but only below `if state.rank !=
# 0: return`, so the other ranks stop early and rank 0 waits in the next all-reduce. The
# fix moved the early return below the updates.
PYTEXT = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, early_stop_after, epochs):
        self.early_stop_after = early_stop_after
        self.epochs = epochs

    def continue_training(self, state):
        if state.epoch >= self.epochs:
            return False
        if state.epochs_since_last_improvement >= self.early_stop_after:
            return False
        return True

    def update_best_model(self, state, eval_metric):
{BODY}
        state.best_model_state = state.model.state_dict()

    def train(self, state, loader, rank):
        state.model = DDP(state.model, device_ids=[rank])
        while self.continue_training(state):
            state.epoch += 1
            state.epochs_since_last_improvement += 1
            for batch in loader:
                state.optimizer.zero_grad()
                state.model(batch).sum().backward()
                state.optimizer.step()
            eval_metric = state.evaluate()
            if eval_metric > state.best_model_metric:
                self.update_best_model(state, eval_metric)
"""
PYTEXT_BAD = """\
        if state.rank != 0:
            return
        state.epochs_since_last_improvement = 0
        state.best_model_metric = eval_metric"""
PYTEXT_OK = """\
        state.epochs_since_last_improvement = 0
        state.best_model_metric = eval_metric
        if state.rank != 0:
            return"""


def test_loop_bound_only_rank_zero_updates_is_an_error(tmp_path: Path) -> None:
    bad = {"train.py": PYTEXT.replace("{BODY}", PYTEXT_BAD)}
    found = _sev(lint_project(tmp_path / "bad", bad), "DDP-RANK-DIVERGENCE")
    assert found == [("train.py", 19, "error")]
    ok = {"train.py": PYTEXT.replace("{BODY}", PYTEXT_OK)}
    assert _sev(lint_project(tmp_path / "ok", ok), "DDP-RANK-DIVERGENCE") == []


# The prepared wrappers swapped for their .module by a project helper (blind N, a miss).
# kohya-ss/sd-scripts before PR #989: train_network.py rebinds `unet, network =
# train_util.transform_models_if_DDP([unet, network])` right after accelerator.prepare;
# the helper returns `model.module if type(model) == DDP else model` for each, so the
# loop trains the bare modules and no gradient is all-reduced. The fix keeps the wrappers
# and unwraps only for attribute access.
SDS_UTIL = """\
from torch.nn.parallel import DistributedDataParallel as DDP


def transform_models_if_DDP(models):
    return [model.module if type(model) == DDP else model for model in models if model is not None]
"""
SDS_TRAIN = """\
from accelerate import Accelerator
import train_util


def train(args, unet, network, optimizer, train_dataloader, lr_scheduler):
    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
    unet, network, optimizer, train_dataloader, lr_scheduler = accelerator.prepare(
        unet, network, optimizer, train_dataloader, lr_scheduler
    )
    {LHS} = train_util.transform_models_if_DDP([unet, network])
    for epoch in range(args.epochs):
        for batch in train_dataloader:
            with accelerator.accumulate(network):
                loss = unet(batch, network(batch)).mean()
                accelerator.backward(loss)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
"""


def test_wrappers_swapped_for_their_module_before_training(tmp_path: Path) -> None:
    bad = {"train.py": SDS_TRAIN.replace("{LHS}", "unet, network"), "train_util.py": SDS_UTIL}
    found = _sev(lint_project(tmp_path / "bad", bad), "DDP-NOT-APPLIED")
    assert found == [("train.py", 10, "error")]
    ok = {"train.py": SDS_TRAIN.replace("{LHS}", "unet_m, network_m"), "train_util.py": SDS_UTIL}
    assert _sev(lint_project(tmp_path / "ok", ok), "DDP-NOT-APPLIED") == []


# A loop over a list of the prepared models (blind N, a miss).
# kohya-ss/sd-scripts train_textual_inversion.py (case sdscripts-ti): after
# `text_encoder1, text_encoder2, ... = accelerator.prepare(...)` the SDXL path sets
# `text_encoders = [text_encoder1, text_encoder2]` and loops `for tokenizer, token_ids,
# text_encoder in zip(tokenizers, token_ids_list, text_encoders):` to freeze
# `text_encoder.text_model.encoder`: the element is the DDP wrapper.
SDS_TI = """\
from accelerate import Accelerator


def train(args, text_encoders, tokenizers, token_ids_list, optimizer, loader):
    accelerator = Accelerator()
    text_encoder1, text_encoder2, optimizer, loader = accelerator.prepare(
        text_encoders[0], text_encoders[1], optimizer, loader
    )
    text_encoders = [text_encoder1, text_encoder2]
    for tokenizer, token_ids, text_encoder in zip(tokenizers, token_ids_list, text_encoders):
        text_encoder.requires_grad_(True)
        {READ}.encoder.requires_grad_(False)
    for epoch in range(args.epochs):
        for batch in loader:
            loss = text_encoders[0](batch).mean() + text_encoders[1](batch).mean()
            accelerator.backward(loss)
            optimizer.step()
"""


def test_loop_over_a_list_of_prepared_models_reads_the_wrapper(tmp_path: Path) -> None:
    bad = {"train.py": SDS_TI.replace("{READ}", "text_encoder.text_model")}
    found = _sev(lint_project(tmp_path / "bad", bad), "DDP-WRAPPER-ATTR")
    assert [(n, ln) for n, ln, _ in found] == [("train.py", 12)]
    fixed = "accelerator.unwrap_model(text_encoder).text_model"
    ok = {"train.py": SDS_TI.replace("{READ}", fixed)}
    assert _sev(lint_project(tmp_path / "ok", ok), "DDP-WRAPPER-ATTR") == []


def test_flag_guarded_helpers_in_a_call_cycle_do_not_recurse_forever(tmp_path: Path) -> None:
    """A call cycle through flag-guarded helpers (facebookresearch/mmf's config helpers
    hit Python's recursion limit while the flag was followed) ends with a plain answer."""
    cyc = OLMO_CKPT.replace("{SYNC}", "False") + (
        "\n\ndef ping(n, synchronize=True):\n    if synchronize:\n        barrier()\n"
        "    return pong(n - 1, synchronize)\n\n\ndef pong(n, synchronize):\n"
        "    return ping(n, synchronize) if n else None\n\n\n"
        "def maybe(n):\n    if dist.get_rank() == 0:\n        ping(n, synchronize=False)\n"
    )
    train = OLMO_TRAIN + "    maybe(3)\n"
    train = train.replace("import write_model_dict", "import maybe, write_model_dict")
    found = lint_project(tmp_path / "cyc", {"train.py": train, "checkpoint.py": cyc})
    # the flag handed on through a variable (`pong(n - 1, synchronize)`) is not followed:
    # the cycle's barrier still counts, said once at the rank-0 call
    assert _sev(found, "DDP-RANK-DIVERGENCE") == [("checkpoint.py", 36, "error")]
