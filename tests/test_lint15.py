"""Round 15: false errors blind batch K found on correct real projects, each read in
general. The code is the real projects' (only the lines needed, each cited with its
repository and commit); each correct shape is beside the pitfall it must not hide."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project
from lintproject import severities as _sev

# MzeroMiko/VMamba @ 2ed52ead062a51a64521ed3871d52914bf532876, classification/main.py:
# throughput mode leaves on rank 0 (`config.THROUGHPUT_MODE and dist.get_rank() == 0`);
# an ordinary run has the option off and every rank trains.
VMAMBA = """\
import torch
import torch.distributed as dist


def reduce_tensor(tensor):
    rt = tensor.clone()
    dist.all_reduce(rt, op=dist.ReduceOp.SUM)
    return rt / dist.get_world_size()


def validate(config, data_loader, model):
    for images, target in data_loader:
        loss = model(images).mean()
        loss = reduce_tensor(loss)
    return loss


def throughput(data_loader, model, logger):
    return None


def main(config, model, data_loader_train, data_loader_val, optimizer, logger):
    dist.init_process_group("nccl")
    torch.cuda.set_device(config.LOCAL_RANK)
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[config.LOCAL_RANK])
    if config.THROUGHPUT_MODE and (dist.get_rank() == 0):
        throughput(data_loader_val, model, logger)
        return
    for epoch in range(config.TRAIN.START_EPOCH, config.TRAIN.EPOCHS):
        data_loader_train.sampler.set_epoch(epoch)
        acc = validate(config, data_loader_val, model)
"""


def test_rank0_exit_of_an_option_mode_is_a_warning(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "ok", {"train.py": VMAMBA})
    assert _sev(found, "DDP-RANK-DIVERGENCE") == [("train.py", 31, "warning")]
    assert "THROUGHPUT_MODE" in next(f.summary for f in found if f.id == "DDP-RANK-DIVERGENCE")
    # the rank test alone leaves early on rank 0 in every run: the error stays
    bad = VMAMBA.replace(
        "config.THROUGHPUT_MODE and (dist.get_rank() == 0)", "dist.get_rank() == 0"
    )
    found = lint_project(tmp_path / "bad", {"train.py": bad})
    assert _sev(found, "DDP-RANK-DIVERGENCE") == [("train.py", 31, "error")]


# facebookresearch/DPR @ a31212dc0a54dfa85d8bfa01e1669f149ac832b7, train_dense_encoder.py
# and dpr/utils/model_utils.py: the unwrapped module builds the input batch
# (`get_model_obj(self.biencoder).create_biencoder_input(...)`), the loss comes from the
# wrapper, handed to `_do_biencoder_fwd_pass`, which calls it.
DPR_UTILS = """\
import torch


def setup_for_distributed_mode(model, optimizer, device, n_gpu=1, local_rank=-1):
    model.to(device)
    if local_rank != -1:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device if device else local_rank], output_device=local_rank
        )
    return model, optimizer


def get_model_obj(model):
    return model.module if hasattr(model, "module") else model
"""

DPR = """\
import torch

from model_utils import get_model_obj, setup_for_distributed_mode


def _do_biencoder_fwd_pass(model, input, cfg):
    if model.training:
        model_out = model(input.question_ids, input.context_ids)
    else:
        with torch.no_grad():
            model_out = model(input.question_ids, input.context_ids)
    loss = model_out[0].sum()
    return loss, 0


class BiEncoderTrainer:
    def __init__(self, cfg, model, optimizer):
        model, optimizer = setup_for_distributed_mode(model, optimizer, cfg.device, cfg.n_gpu, cfg.local_rank)
        self.biencoder = model
        self.optimizer = optimizer

    def train_epoch(self, cfg, train_data_iterator, epoch):
        biencoder = get_model_obj(self.biencoder)
        for i, samples_batch in enumerate(train_data_iterator.iterate_ds_data(epoch=epoch)):
            biencoder_batch = biencoder.create_biencoder_input(samples_batch, True)
            loss, correct_cnt = _do_biencoder_fwd_pass(self.biencoder, biencoder_batch, cfg)
            loss.backward()
            self.optimizer.step()


def main(cfg, model, optimizer, it):
    torch.distributed.init_process_group("nccl")
    trainer = BiEncoderTrainer(cfg, model, optimizer)
    trainer.train_epoch(cfg, it, 0)
"""


def test_unwrapped_module_beside_a_helper_that_runs_the_wrapper(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "ok", {"train.py": DPR, "model_utils.py": DPR_UTILS})
    assert _sev(found, "DDP-FORWARD-BYPASS") == []
    # the helper given the unwrapped module: the loss bypasses the wrapper
    bad = DPR.replace("_do_biencoder_fwd_pass(self.biencoder,", "_do_biencoder_fwd_pass(biencoder,")
    bad = bad.replace("biencoder.create_biencoder_input(", "biencoder.compute_loss(")
    bad = bad.replace(
        "loss, correct_cnt = _do_biencoder_fwd_pass(biencoder, biencoder_batch, cfg)",
        "loss = biencoder_batch",
    )
    found = lint_project(tmp_path / "bad", {"train.py": bad, "model_utils.py": DPR_UTILS})
    assert [(n, ln) for n, ln, _ in _sev(found, "DDP-FORWARD-BYPASS")] == [("train.py", 25)]


# hkchengrex/Cutie @ ec5cdd4cf16f75c73ad785a2f96fb97dbad4125a, cutie/train.py and
# cutie/model/trainer.py: the trainer names the global rank `local_rank` (a one-node
# design), and the resume loads `cfg['checkpoint']` once, clearing it, in the loop over
# training stages whose end saves on rank 0.
CUTIE_TRAINER = """\
import os

import torch
import torch.nn as nn


class Trainer:
    def __init__(self, cfg, net, run_path):
        local_rank = torch.distributed.get_rank()
        self.local_rank = local_rank
        self.cutie = nn.parallel.DistributedDataParallel(
            net.cuda(), device_ids=[local_rank], output_device=local_rank, broadcast_buffers=False
        )
        self.run_path = run_path
        self.optimizer = torch.optim.AdamW(self.cutie.parameters(), lr=1e-4)

    def do_pass(self, data, it):
        loss = self.cutie(data).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()

    def save_checkpoint(self, it):
        if self.local_rank != 0:
            return
        checkpoint = {"it": it, "weights": self.cutie.module.state_dict()}
        model_path = os.path.join(self.run_path, "ckpt_last.pth")
        torch.save(checkpoint, model_path)

    def load_checkpoint(self, path):
        map_location = "cuda:%d" % self.local_rank
        checkpoint = torch.load(path, map_location={"cuda:0": map_location})
        self.cutie.module.load_state_dict(checkpoint["weights"])
        return checkpoint["it"]
"""

CUTIE = """\
import os

import torch
from torch import distributed

from trainer import Trainer

local_rank = int(os.environ["LOCAL_RANK"])


def distributed_setup():
    distributed.init_process_group(backend="nccl")
    local_rank = distributed.get_rank()
    return local_rank, distributed.get_world_size()


def train(cfg, net, stages, loader):
    local_rank, world_size = distributed_setup()
    torch.cuda.set_device(local_rank)
    for stage in stages:
        trainer = Trainer(cfg, net, "runs")
        if cfg["checkpoint"] is not None:
            curr_iter = trainer.load_checkpoint(cfg["checkpoint"])
            cfg["checkpoint"] = None
        else:
            curr_iter = 0
        loader.sampler.set_epoch(0)
        for data in loader:
            trainer.do_pass(data, curr_iter)
            curr_iter += 1
        trainer.save_checkpoint(curr_iter)
"""


def test_global_rank_named_local_rank_and_one_shot_resume(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "ok", {"train.py": CUTIE, "trainer.py": CUTIE_TRAINER})
    assert {s for _, _, s in _sev(found, "DDP-HARDCODED-DEVICE")} == {"warning"}
    assert _sev(found, "DDP-CKPT-BARRIER") == []
    # named `rank`, the global rank is a mix-up (the error stays), and a resume that
    # stays set reloads, on every stage, what rank 0 alone just wrote
    bad_t = CUTIE_TRAINER.replace("local_rank", "rank")
    bad = CUTIE.replace('            cfg["checkpoint"] = None\n', "")
    found = lint_project(tmp_path / "bad", {"train.py": bad, "trainer.py": bad_t})
    assert ("trainer.py", 12, "error") in _sev(found, "DDP-HARDCODED-DEVICE")
    assert _sev(found, "DDP-CKPT-BARRIER") == [("trainer.py", 32, "error")]


# wenet-e2e/wespeaker @ c8d020c3f83106f7bdf5c96c528cdae39264d02e, wespeaker/utils/
# checkpoint.py and wespeaker/bin/train.py (fixed in 68c0d31): the file is mapped to the
# CPU only where no GPU exists; every DDP process takes the unmapped CUDA arm.
WESPEAKER_CKPT = """\
import torch


def load_checkpoint(model: torch.nn.Module, path: str):
    if torch.cuda.is_available():
        checkpoint = torch.load(path)
    else:
        checkpoint = torch.load(path, map_location='cpu')
    model.load_state_dict(checkpoint, strict=False)
"""

WESPEAKER = """\
import os

import torch
import torch.distributed as dist

from checkpoint import load_checkpoint


def train(configs, model, checkpoint):
    gpu = int(os.environ['LOCAL_RANK'])
    torch.cuda.set_device(gpu)
    dist.init_process_group(backend='nccl')
    if checkpoint is not None:
        load_checkpoint(model, checkpoint)
    model = model.cuda()
    ddp_model = torch.nn.parallel.DistributedDataParallel(model)
"""

# Z-Zheng/SimpleCV @ 3e27e893955a9ecea5493b1d2a8ee9dbb1080ae6, simplecv/util/checkpoint.py
# (fixed in fbf9903): a static loader returns what torch.load gave; try_resume, run on
# every rank, reads its keys.
SIMPLECV_CKPT = """\
import torch


class CheckPoint(object):
    MODEL = 'model'
    OPTIMIZER = 'opt'

    def __init__(self, launcher=None):
        self._launcher = launcher

    @staticmethod
    def load(filepath):
        ckpt = torch.load(filepath)

        return ckpt

    def try_resume(self, last_path):
        ckpt = self.load(last_path)
        self._launcher.model.load_state_dict(ckpt[CheckPoint.MODEL])
        self._launcher.optimizer.load_state_dict(ckpt[CheckPoint.OPTIMIZER])
"""

SIMPLECV = """\
import torch
import torch.distributed as dist

from checkpoint import CheckPoint


def run(local_rank, launcher, model, last_path):
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl", init_method="env://")
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
    CheckPoint(launcher).try_resume(last_path)
"""


def test_unmapped_load_in_the_cuda_arm_and_through_a_returning_loader(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "w", {"train.py": WESPEAKER, "checkpoint.py": WESPEAKER_CKPT})
    assert [(n, ln) for n, ln, _ in _sev(found, "DDP-LOAD-MAP-LOCATION")] == [("checkpoint.py", 6)]
    found = lint_project(tmp_path / "s", {"train.py": SIMPLECV, "checkpoint.py": SIMPLECV_CKPT})
    assert [(n, ln) for n, ln, _ in _sev(found, "DDP-LOAD-MAP-LOCATION")] == [("checkpoint.py", 13)]
    # the fixes (map_location given) are silent; so is a CPU-only arm's unmapped load
    for name, text, broken, fixed in (
        ("wf", WESPEAKER, WESPEAKER_CKPT, "torch.load(path, map_location='cpu')\n    else"),
        ("sf", SIMPLECV, SIMPLECV_CKPT, "torch.load(filepath, map_location=torch.device('cpu'))"),
    ):
        ckpt = broken.replace("torch.load(path)\n    else", fixed).replace(
            "torch.load(filepath)", fixed
        )
        found = lint_project(tmp_path / name, {"train.py": text, "checkpoint.py": ckpt})
        assert _sev(found, "DDP-LOAD-MAP-LOCATION") == []
    cpu_arm = WESPEAKER_CKPT.replace(
        "if torch.cuda.is_available():", "if not torch.cuda.is_available():"
    )
    found = lint_project(tmp_path / "c", {"train.py": WESPEAKER, "checkpoint.py": cpu_arm})
    assert _sev(found, "DDP-LOAD-MAP-LOCATION") == []


# DLLXW/baby-llama2-chinese @ 9edb74c109614455c81c814a3fb6583905ac6c50, pretrain.py (fixed
# in 02e0aa4, PR #56): `if ddp and get_rank() == 0: ... else: ...` sends every other rank
# of the DDP run to the `else`, which saves the wrapper's own state_dict() too.
BABY_LLAMA2 = """\
import os

import torch
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP


def train_epoch(epoch, model, train_loader, optimizer, save_dir, save_interval):
    for step, (X, Y) in enumerate(train_loader):
        loss = model(X, Y)
        loss.backward()
        optimizer.step()
        if step % save_interval == 0:
            if ddp and torch.distributed.get_rank() == 0:
                torch.save(model.module.state_dict(), '{}/iter_{}.pth'.format(save_dir, step))
            else:
                torch.save(model.state_dict(), '{}/iter_{}.pth'.format(save_dir, step))


ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    init_process_group(backend="nccl")
    ddp_local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(f"cuda:{ddp_local_rank}")
model = build()
if ddp:
    model = DDP(model, device_ids=[ddp_local_rank])
raw_model = model.module if ddp else model
for epoch in range(10):
    train_loader.sampler.set_epoch(epoch)
    train_epoch(epoch, model, train_loader, optimizer, "out", 100)
    if ddp and torch.distributed.get_rank() == 0:
        torch.save(raw_model.state_dict(), '{}/epoch_{}.pth'.format("out", epoch))
    else:
        torch.save(raw_model.state_dict(), '{}/epoch_{}.pth'.format("out", epoch))
if ddp:
    destroy_process_group()
"""

BABY_FIXED = BABY_LLAMA2.replace(
    "            if ddp and torch.distributed.get_rank() == 0:\n"
    "                torch.save(model.module",
    "            if ddp:\n"
    "                if torch.distributed.get_rank() == 0:\n"
    "                    torch.save(model.module",
).replace(
    "    if ddp and torch.distributed.get_rank() == 0:\n        torch.save(raw",
    "    if ddp:\n        if torch.distributed.get_rank() == 0:\n            torch.save(raw",
)


def test_else_of_ddp_and_rank0_runs_on_the_other_ranks(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "bad", {"train.py": BABY_LLAMA2})
    assert [(n, ln) for n, ln, _ in _sev(found, "DDP-SAVE-WRAPPER")] == [("train.py", 17)]
    io = [(n, ln) for n, ln, _ in _sev(found, "DDP-ALL-RANKS-IO")]
    assert ("train.py", 14) in io and ("train.py", 32) in io
    found = lint_project(tmp_path / "ok", {"train.py": BABY_FIXED})
    assert _sev(found, "DDP-SAVE-WRAPPER") == []
    assert not [f for f in found if f.id == "DDP-ALL-RANKS-IO" and "`else` of" in f.summary]


# openvla/openvla @ c5069ff4895f8e6294292cb9c3b140ce8838e6ad, vla-scripts/finetune.py
# (fixed in 339e601): the main process saves the LoRA adapter folder, every rank reads
# it back at once to merge it; the fix waits with dist.barrier() in between.
OPENVLA = """\
import os

import torch
import torch.distributed as dist
from accelerate import PartialState
from peft import PeftModel
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import AutoModelForVision2Seq


def finetune(cfg, dataloader, optimizer) -> None:
    distributed_state = PartialState()
    torch.cuda.set_device(device_id := distributed_state.local_process_index)
    exp_id = f"{cfg.vla_path.split('/')[-1]}+{cfg.dataset_name}"
    run_dir, adapter_dir = cfg.run_root_dir / exp_id, cfg.adapter_tmp_dir / exp_id
    vla = AutoModelForVision2Seq.from_pretrained(cfg.vla_path, torch_dtype=torch.bfloat16)
    vla = DDP(vla, device_ids=[device_id], gradient_as_bucket_view=True)
    for step_idx, batch in enumerate(dataloader):
        loss = vla(input_ids=batch["input_ids"].to(device_id)).loss
        loss.backward()
        optimizer.step()
        if step_idx > 0 and step_idx % cfg.save_steps == 0:
            if distributed_state.is_main_process:
                save_dir = adapter_dir if cfg.use_lora else run_dir
                vla.module.save_pretrained(save_dir)
            if cfg.use_lora:
                base_vla = AutoModelForVision2Seq.from_pretrained(cfg.vla_path)
                merged_vla = PeftModel.from_pretrained(base_vla, adapter_dir)
                merged_vla = merged_vla.merge_and_unload()
                if distributed_state.is_main_process:
                    merged_vla.save_pretrained(run_dir)
            dist.barrier()


if __name__ == "__main__":
    finetune()
"""


def test_adapter_folder_read_back_before_the_barrier(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "bad", {"train.py": OPENVLA})
    assert _sev(found, "DDP-CKPT-BARRIER") == [("train.py", 28, "error")]
    fixed = OPENVLA.replace(
        "            if cfg.use_lora:\n",
        "            dist.barrier()\n            if cfg.use_lora:\n",
    )
    assert _sev(lint_project(tmp_path / "ok", {"train.py": fixed}), "DDP-CKPT-BARRIER") == []


# MDIL-SNU/SevenNet @ 770585d747b535e7e382873a32dc764abd13642e, sevenn/sevenn_logger.py
# and sevenn/main/sevenn.py (fixed in 9849bb0): the rank check sits in `__init__` only;
# `__enter__`, which `with Logger(...)` runs on every rank, reopens the shared log file.
SEVENN_LOGGER = """\
from typing import Optional


class Logger:
    def __init__(self, filename: Optional[str] = None, screen: bool = False, rank: int = 0):
        self.rank = rank
        self._filename = filename
        self.logfile = None

    def __enter__(self):
        if self.logfile is None and self._filename is not None:
            self.logfile = open(self._filename, 'a', buffering=1, encoding='utf-8')
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        if self.logfile is not None:
            self.logfile.close()
            self.logfile = None
"""

SEVENN = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from sevenn_logger import Logger


def main(args, model, loader, optimizer):
    local_rank = int(os.environ['LOCAL_RANK'])
    rank = int(os.environ['RANK'])
    dist.init_process_group(backend='nccl')
    torch.cuda.set_device(local_rank)
    model = DDP(model.cuda(), device_ids=[local_rank])
    with Logger(filename='log.sevenn', screen=args.screen, rank=rank) as logger:
        for epoch in range(10):
            loader.sampler.set_epoch(epoch)
            for batch in loader:
                loss = model(batch).mean()
                loss.backward()
                optimizer.step()
"""


def test_enter_of_a_logger_class_runs_on_every_rank(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "bad", {"train.py": SEVENN, "sevenn_logger.py": SEVENN_LOGGER})
    assert ("sevenn_logger.py", 12) in [(n, ln) for n, ln, _ in _sev(found, "DDP-ALL-RANKS-IO")]
    fixed = SEVENN_LOGGER.replace(
        "    def __enter__(self):\n",
        "    def __enter__(self):\n        if self.rank != 0:\n            return self\n",
    )
    found = lint_project(tmp_path / "ok", {"train.py": SEVENN, "sevenn_logger.py": fixed})
    assert _sev(found, "DDP-ALL-RANKS-IO") == []


# Physical-Intelligence/openpi @ c23745b5ad24e98f66967ea795a07b2588ed6c79,
# scripts/train_pytorch.py (fixed in 5f7958d, PR #908): `--overwrite` deletes the shared
# checkpoint folder on every rank, then each re-creates it.
OPENPI = """\
import os
import shutil

import torch
import torch.distributed as dist


def train_loop(config, model):
    dist.init_process_group(backend="nccl", init_method="env://")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    is_main = dist.get_rank() == 0
    if config.overwrite and config.checkpoint_dir.exists():
        shutil.rmtree(config.checkpoint_dir)
    exp_checkpoint_dir = config.checkpoint_dir
    exp_checkpoint_dir.mkdir(parents=True, exist_ok=True)
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])


def main():
    train_loop(_config.cli(), build())


if __name__ == "__main__":
    main()
"""


def test_rmtree_of_the_shared_folder_on_every_rank(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "bad", {"train.py": OPENPI})
    assert [(n, ln) for n, ln, _ in _sev(found, "DDP-ALL-RANKS-IO")] == [("train.py", 14)]
    assert "deletes" in next(f.summary for f in found if f.id == "DDP-ALL-RANKS-IO")
    fixed = OPENPI.replace(
        "    if config.overwrite and",
        "    if is_main and config.overwrite and",
    )
    assert _sev(lint_project(tmp_path / "ok", {"train.py": fixed}), "DDP-ALL-RANKS-IO") == []
    tolerant = OPENPI.replace(
        "shutil.rmtree(config.checkpoint_dir)",
        "shutil.rmtree(config.checkpoint_dir, ignore_errors=True)",
    )
    assert _sev(lint_project(tmp_path / "t", {"train.py": tolerant}), "DDP-ALL-RANKS-IO") == []


# vllm-project/speculators @ d673cb9d8f81cc6bddd24ad742daa03861543a00,
# src/speculators/train/trainer.py and checkpointer.py (fixed in 322f8c0): the checkpointer
# class is chosen at run time and held in a name; only rank 0 calls its
# load_model_state_dict, whose body ends in dist.barrier(); load_optimizer_state_dict,
# run after the DDP wrap, reads `model.dtype` from the wrapper.
SPEC_CKPT = """\
import torch
import torch.distributed as dist


class BaseCheckpointer:
    def __init__(self, path):
        self.path = path

    def load_model_state_dict(self, model, float_dtype=None):
        raise NotImplementedError


class SingleGPUCheckpointer(BaseCheckpointer):
    def load_model_state_dict(self, model, float_dtype=None):
        model.load_state_dict(torch.load(self.path, map_location="cpu"))


class DistributedCheckpointer(BaseCheckpointer):
    def load_model_state_dict(self, model, float_dtype=None):
        model.load_state_dict(torch.load(self.path, map_location="cpu"))
        dist.barrier()

    def load_optimizer_state_dict(self, model, optimizer, float_dtype=None):
        full_state_dict = torch.load(self.path, map_location="cpu")
        dtype = float_dtype or model.dtype
        optimizer.load_state_dict(full_state_dict)
"""

SPEC = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from checkpointer import DistributedCheckpointer, SingleGPUCheckpointer


class Trainer:
    def __init__(self, model, config, local_rank):
        self.model = model
        self.local_rank = local_rank
        checkpointer_class = (
            DistributedCheckpointer if config.distributed else SingleGPUCheckpointer
        )
        self.checkpointer = checkpointer_class(config.save_path)

    def setup_model_ddp(self, load_checkpoint):
        self.model.to(self.local_rank)
        if load_checkpoint:
            if dist.get_rank() == 0:
                self.checkpointer.load_model_state_dict(self.model)
        self.model = DistributedDataParallel(self.model)

    def setup_optimizer(self):
        self.optimizer = torch.optim.AdamW(self.model.parameters())
        self.checkpointer.load_optimizer_state_dict(self.model, self.optimizer)


def main(model, config):
    dist.init_process_group("nccl")
    trainer = Trainer(model, config, dist.get_rank() % torch.cuda.device_count())
    trainer.setup_model_ddp(True)
    trainer.setup_optimizer()
"""


def test_class_chosen_at_run_time_resolves_its_methods(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "bad", {"train.py": SPEC, "checkpointer.py": SPEC_CKPT})
    assert _sev(found, "DDP-RANK-DIVERGENCE") == [("train.py", 21, "error")]
    assert ("checkpointer.py", 25) in [(n, ln) for n, ln, _ in _sev(found, "DDP-WRAPPER-ATTR")]
    fixed = SPEC.replace(
        "            if dist.get_rank() == 0:\n                self.checkpointer",
        "            if True:\n                self.checkpointer",
    )
    found = lint_project(tmp_path / "ok", {"train.py": fixed, "checkpointer.py": SPEC_CKPT})
    assert _sev(found, "DDP-RANK-DIVERGENCE") == []


# OpenTSLM/OpenTSLM @ 104013b90b89fb39c1537c9190b3d047c3072fb5, curriculum_learning.py (PR
# #49): the loss comes from `self._get_model().compute_loss(batch)`, and `_get_model()`
# returns `self.model.module`: DDP's reducer never runs. The optimizer's parameter groups
# read the unwrapped model's parameters: no forward there.
OPENTSLM = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.optim import AdamW


class CurriculumTrainer:
    def __init__(self, model, local_rank):
        dist.init_process_group("nccl")
        torch.cuda.set_device(local_rank)
        self.model = DDP(model.cuda(), device_ids=[local_rank])

    def _get_optimizer(self):
        model = self._get_model()
        params_to_optimize = model.named_parameters()
        params_to_optimize = list(filter(lambda p: p[1].requires_grad, params_to_optimize))
        return AdamW([p for _, p in params_to_optimize])

    def train(self, loader):
        optimizer = self._get_optimizer()
        for epoch in range(3):
            loader.sampler.set_epoch(epoch)
            for batch in loader:
                optimizer.zero_grad()
                loss = self._get_model().compute_loss(batch)
                loss.backward()
                optimizer.step()

    def _get_model(self):
        if hasattr(self.model, "module"):
            return self.model.module
        return self.model
"""


def test_loss_through_a_method_returning_the_module(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "bad", {"train.py": OPENTSLM})
    assert [(n, ln) for n, ln, _ in _sev(found, "DDP-FORWARD-BYPASS")] == [("train.py", 25)]
    fixed = OPENTSLM.replace("self._get_model().compute_loss(batch)", "self.model(batch)")
    assert _sev(lint_project(tmp_path / "ok", {"train.py": fixed}), "DDP-FORWARD-BYPASS") == []


# LTH14/mar @ fe470ac24afbee924668d8c5c83e9fec60af3a73 (a correct project), main_mar.py
# and engine_mar.py: the writer exists on rank 0 only (`log_writer = None` elsewhere), and
# evaluate() removes its sample folder under `if log_writer is not None:`.
MAR_ENGINE = """\
import os
import shutil

import torch


def evaluate(model_without_ddp, args, epoch, log_writer=None):
    save_folder = os.path.join(args.output_dir, "samples")
    if torch.distributed.get_rank() == 0:
        os.makedirs(save_folder, exist_ok=True)
    torch.distributed.barrier()
    if log_writer is not None:
        log_writer.add_scalar('fid', 0.0, epoch)
        shutil.rmtree(save_folder)
    torch.distributed.barrier()
"""

MAR = """\
import os

import torch
from torch.utils.tensorboard import SummaryWriter

from engine_mar import evaluate


def main(args, model):
    torch.distributed.init_process_group(backend="nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    global_rank = torch.distributed.get_rank()
    if global_rank == 0 and args.log_dir is not None:
        log_writer = SummaryWriter(log_dir=args.log_dir)
    else:
        log_writer = None
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
    evaluate(model.module, args, 0, log_writer=log_writer)
"""


def test_writer_made_on_rank0_only_guards_what_runs_under_it(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "ok", {"train.py": MAR, "engine_mar.py": MAR_ENGINE})
    assert _sev(found, "DDP-ALL-RANKS-IO") == []
    # a writer every rank makes guards nothing
    bad = MAR.replace(
        "if global_rank == 0 and args.log_dir is not None:", "if args.log_dir is not None:"
    )
    found = lint_project(tmp_path / "bad", {"train.py": bad, "engine_mar.py": MAR_ENGINE})
    assert "shutil.rmtree" in " ".join(f.summary for f in found if f.id == "DDP-ALL-RANKS-IO")
