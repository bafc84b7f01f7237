"""Round 38: where the fix goes. A finding stays at the line where the rule sees the
pitfall and may name second places (`also`) where the user edits: the rank-only branch
around a collective, the callers that hand a save helper the DDP wrapper, the reads of a
`--local_rank` flag that pick the GPU, the seeding call inside a seed helper, the `.to()`
to move before the wrap, the start of the statements that only prepare a write on every
rank (the rank guard wraps them), the writes through a file every rank appends to."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from lintproject import lint_project

from ddptui.lint.model import LintFinding


def _also(found: list[LintFinding], fid: str) -> dict[int, list[tuple[str, int, str]]]:
    """{finding line: [(file name, line, label) of each second place]} for `fid`."""
    return {
        f.line: [(Path(p.file).name, p.line, p.label) for p in f.also] for f in found if f.id == fid
    }


# FoundationVision/VAR @ ff9f756657d0cd763cba9c0644f6f1f6642a6ce1: dist.py 86-87 and
# 101-108, train.py 132-133 and trainer.py 140-143 (VARTrainer.train_step); the fix
# "[fix] allreduce will hang" moves the rank check inside, after the all-reduce.
VAR_DIST = """\
import torch
import torch.distributed as tdist

__rank = 0


def initialize():
    global __rank
    tdist.init_process_group("nccl")
    __rank = tdist.get_rank()


def is_visualizer():
    return __rank == 0


def allreduce(t):
    return tdist.all_reduce(t)
"""

VAR_TRAINER = """\
import dist


class VARTrainer:
    def __init__(self, is_visualizer, var):
        self.is_visualizer = is_visualizer
        self.var = var

    def train_step(self, g_it, gt_BL, V):
        if (g_it == 0 or (g_it + 1) % 500 == 0) and self.is_visualizer:
            prob_per_class_is_chosen = gt_BL.view(-1).bincount(minlength=V).float()
            dist.allreduce(prob_per_class_is_chosen)
            return prob_per_class_is_chosen
"""

VAR_TRAIN = """\
import torch

import dist
from trainer import VARTrainer


def main():
    dist.initialize()
    var = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).cuda())
    trainer = VARTrainer(is_visualizer=dist.is_visualizer(), var=var)
    for g_it in range(10):
        trainer.train_step(g_it, torch.zeros(4, dtype=torch.long), 8)


if __name__ == "__main__":
    main()
"""


def test_collective_in_a_rank_only_branch_names_the_branch(tmp_path: Path) -> None:
    files = {"train.py": VAR_TRAIN, "dist.py": VAR_DIST, "trainer.py": VAR_TRAINER}
    found = _also(lint_project(tmp_path, files), "DDP-RANK-DIVERGENCE")
    assert found == {12: [("trainer.py", 10, "rank-only branch at")]}


# yeyupiaoling/MASR @ eeb915450089312d309977a80bfcfe83794bd724, masr/trainer.py 263,
# 338-340, 362-365 and 409-414: `save_model` (a static helper) saves `model.state_dict()`
# of the model its callers pass, the DDP wrapper; the fix ("修复多卡训练保存模型bug")
# passes `model.module` at the calls.
MASR_TRAINER = """\
import os

import torch
import torch.distributed as dist


class PPASRTrainer:
    def train(self, local_rank, save_model_path, epochs):
        dist.init_process_group(backend="nccl")
        model = torch.nn.Linear(2, 2).cuda(local_rank)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
        for epoch in range(epochs):
            if epoch % 10 == 0 and local_rank == 0:
                self.save_model(save_model_path=save_model_path, epoch=epoch, model=model)
            if local_rank == 0:
                self.save_model(save_model_path=save_model_path, model=model, epoch=epoch,
                                best_model=True)

    @staticmethod
    def save_model(save_model_path, epoch, model, best_model=False):
        model_path = os.path.join(save_model_path, "epoch_{}".format(epoch))
        torch.save(model.state_dict(), os.path.join(model_path, "model.pt"))
"""

MASR_TRAIN = """\
from trainer import PPASRTrainer

PPASRTrainer().train(0, "models/", 65)
"""


def test_save_helper_names_the_callers_that_pass_the_wrapper(tmp_path: Path) -> None:
    files = {"train.py": MASR_TRAIN, "trainer.py": MASR_TRAINER}
    found = _also(lint_project(tmp_path, files), "DDP-SAVE-WRAPPER")
    assert found == {22: [("trainer.py", 14, "called from"), ("trainer.py", 16, "called from")]}


# deepinsight/insightface @ b974acc10422946cdef9e944c9d20a4389c5eec8,
# recognition/arcface_torch/train.py 46, 95-97 and 255-259: `--local_rank` defaults to 0
# and torchrun never passes it; the fix ("Resolved torchrun Bug") reads LOCAL_RANK at the
# two uses.
ARCFACE = """\
import argparse

import torch
from torch import distributed


def main(args):
    distributed.init_process_group("nccl")
    torch.cuda.set_device(args.local_rank)
    backbone = torch.nn.Linear(2, 2).cuda()
    backbone = torch.nn.parallel.DistributedDataParallel(
        module=backbone, broadcast_buffers=False, device_ids=[args.local_rank])
    print("local rank", args.local_rank)
    return backbone


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Distributed Arcface Training in Pytorch")
    parser.add_argument("--local_rank", type=int, default=0, help="local_rank")
    main(parser.parse_args())
"""


def test_local_rank_flag_names_the_reads_that_pick_the_gpu(tmp_path: Path) -> None:
    found = _also(lint_project(tmp_path, {"train.py": ARCFACE}), "DDP-HARDCODED-DEVICE")
    assert found == {
        19: [
            ("train.py", 9, "used as the device at"),
            ("train.py", 12, "used as the device at"),
        ]
    }


# narumiruna/pytorch-distributed-example @ 21d415fe046766e40884a297b9fa8f82d1d4cf5d,
# mnist-pytorch-v1.0.1/main.py 146-151: wrapped on the CPU, then `.to(device)` on the
# wrapper; the fix d34d9d9 moves the `.to` before the wrap.
NARUMIRUNA = """\
import torch
import torch.distributed as dist
from torch import nn


def run(device):
    dist.init_process_group("nccl")
    net = nn.Linear(2, 2)
    net = nn.parallel.DistributedDataParallel(net)
    net.to(device)
    return net


if __name__ == "__main__":
    run(torch.device("cuda"))
"""


def test_wrap_before_to_names_the_move(tmp_path: Path) -> None:
    found = _also(lint_project(tmp_path, {"train.py": NARUMIRUNA}), "DDP-WRAP-BEFORE-TO")
    assert found == {9: [("train.py", 10, "moved to its device at")]}


# OpenNMT/OpenNMT-py @ 97ad4c66997d6d4d80290f66ddc3f5dab6557ab5, onmt/utils/
# report_manager.py 11-22: every GPU process builds a SummaryWriter in the same log dir;
# the fix #1557 gates the whole `if opt.tensorboard:` on gpu_rank == 0. The trainer that
# calls it is cut to the lines that make it distributed.
ONMT = """\
from datetime import datetime

import torch


def build_report_manager(opt):
    if opt.tensorboard:
        from torch.utils.tensorboard import SummaryWriter
        tensorboard_log_dir = opt.tensorboard_log_dir

        if not opt.train_from:
            tensorboard_log_dir += datetime.now().strftime("/%b-%d_%H-%M-%S")

        writer = SummaryWriter(tensorboard_log_dir, comment="Unmt")
    else:
        writer = None
    return writer


def main(opt):
    torch.distributed.init_process_group("nccl")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).cuda())
    build_report_manager(opt)
    return model


if __name__ == "__main__":
    main(None)
"""


def test_write_prepared_by_a_branch_names_the_branch(tmp_path: Path) -> None:
    found = _also(lint_project(tmp_path, {"train.py": ONMT}), "DDP-ALL-RANKS-IO")
    assert found == {14: [("train.py", 7, "guard from"), ("train.py", 23, "called from")]}


# clovaai/voxceleb_trainer @ 3883cd497e1629a2931e0bfb6da3d85eb1496940, trainSpeakerNet.py
# 131, 196-205 and 210: every rank appends its training line to the same scores.txt (the
# evaluation line is rank 0's already); the fix guards the write with args.gpu == 0.
VOXCELEB = """\
import torch
import torch.distributed as dist


def main_worker(gpu, args):
    dist.init_process_group(backend="nccl", world_size=2, rank=gpu)
    s = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).cuda(gpu))
    scorefile = open(args.result_save_path + "/scores.txt", "a+")
    for it in range(10):
        loss = s(torch.zeros(1, 2)).sum()
        if it % 5 == 0 and args.gpu == 0:
            scorefile.write("IT %d, VEER %2.4f\\n" % (it, loss))
        scorefile.write("IT %d, TLOSS %f\\n" % (it, loss))
        scorefile.flush()
    scorefile.close()


if __name__ == "__main__":
    torch.multiprocessing.spawn(main_worker, nprocs=2, args=(None,))
"""


def test_file_every_rank_appends_to_names_the_write(tmp_path: Path) -> None:
    found = _also(lint_project(tmp_path, {"train.py": VOXCELEB}), "DDP-ALL-RANKS-IO")
    assert found == {8: [("train.py", 13, "written at")]}  # 12 is rank 0's already


def test_json_and_cli_show_second_places_only_when_there_are(tmp_path: Path) -> None:
    from ddptui.cli.lint import lint as lint_cmd

    (tmp_path / ".git").mkdir()
    (tmp_path / "train.py").write_text(NARUMIRUNA, encoding="utf-8")
    out = CliRunner().invoke(lint_cmd, [str(tmp_path / "train.py"), "--json", "-"])
    doc = json.loads(out.stdout)
    wrap = [f for f in doc["findings"] if f["id"] == "DDP-WRAP-BEFORE-TO"]
    assert wrap[0]["also"] == [
        {"file": str(tmp_path / "train.py"), "line": 10, "label": "moved to its device at"}
    ]
    assert all("also" not in f for f in doc["findings"] if f["id"] != "DDP-WRAP-BEFORE-TO")
    text = CliRunner().invoke(lint_cmd, [str(tmp_path / "train.py")]).output
    assert f"    moved to its device at {tmp_path / 'train.py'}:10\n" in text


# Metta-AI/metta @ 1565d67b099e0c8d5603b753d1dd33c6d490de06, metta/util/
# runtime_configuration.py 15-22 and 59: `seed_everything(cfg.seed, ...)` seeds every rank
# alike; the fix adds the rank to the seed inside the helper.
METTA_RUNTIME = """\
import random

import numpy as np
import torch


def seed_everything(seed, torch_deterministic):
    random.seed(seed)
    np.random.seed(seed)
    if seed is not None:
        torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = torch_deterministic


def setup_mettagrid_environment(cfg):
    seed_everything(cfg.seed, cfg.torch_deterministic)
"""

METTA_TRAIN = """\
import torch

from runtime_configuration import setup_mettagrid_environment


def main(cfg):
    torch.distributed.init_process_group("nccl")
    setup_mettagrid_environment(cfg)
    net = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).cuda())
    noise = torch.randn(4, 2).cuda()
    return net(noise)


if __name__ == "__main__":
    main(None)
"""


def test_seed_helper_call_names_the_seeding_inside(tmp_path: Path) -> None:
    files = {"train.py": METTA_TRAIN, "runtime_configuration.py": METTA_RUNTIME}
    found = _also(lint_project(tmp_path, files), "DDP-RANK-SEED")
    # and where the per-rank seed goes: after the wrap, which broadcast rank 0's weights
    assert found == {
        16: [
            ("runtime_configuration.py", 8, "seeds at"),
            ("train.py", 9, "seed per rank after the wrap at"),
        ]
    }


# LambdaLabsML/distributed-training-guide @ c25b7c7f259ce2520a7f50fa542e45f42a7f9d03,
# 02-multi-gpu/train_llm.py 134-145: the epoch loop logs and resumes its progress bar
# before `batches = iter(dataloader)`; the fix (issue #40) calls set_epoch just before it.
LAMBDA = """\
import torch
from torch.utils.data import DataLoader, DistributedSampler


def main(model, train_data, optimizer, state, num_epochs):
    torch.distributed.init_process_group("nccl")
    model = torch.nn.parallel.DistributedDataParallel(model)
    dataloader = DataLoader(train_data, sampler=DistributedSampler(train_data, shuffle=True))
    for state["epoch"] in range(state["epoch"], num_epochs):
        print(f"Begin epoch {state['epoch']} at step {state['epoch_step']}")
        if state["epoch_step"] > 0:
            print("resuming")

        batches = iter(dataloader)

        for i_step in range(len(dataloader)):
            batch = next(batches)
            model(**batch).loss.backward()
            optimizer.step()
"""


def test_epoch_loop_names_where_the_pass_over_the_loader_starts(tmp_path: Path) -> None:
    found = _also(lint_project(tmp_path, {"train.py": LAMBDA}), "DDP-SET-EPOCH")
    assert found == {9: [("train.py", 14, "loader iterated at")]}


# karpathy/llama2.c @ 65b0846637fbcf3a2eaaf08820314945e247610b, train.py 201, 205-215 and
# 297-299: `model.last_loss` read through the DDP wrapper in the loop and in
# `estimate_loss()`, which uses the global `model`; the fix 623894f reads it from
# `raw_model` at both.
LLAMA2C = """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

torch.distributed.init_process_group(backend="nccl")
model = torch.nn.Linear(2, 2).cuda()
model = DDP(model, device_ids=[0])


def estimate_loss(X, Y):
    model.eval()
    logits = model(X, Y)
    loss = model.last_loss
    return loss.item()


X, Y = torch.zeros(2), torch.zeros(2)
for it in range(10):
    logits = model(X, Y)
    loss = model.last_loss
    loss.backward()
    if it % 5 == 0:
        print(estimate_loss(X, Y))
"""


def test_attribute_read_through_a_global_wrapper_names_its_other_reads(
    tmp_path: Path,
) -> None:
    found = _also(lint_project(tmp_path, {"train.py": LLAMA2C}), "DDP-WRAPPER-ATTR")
    assert found == {19: [("train.py", 12, "read too at")]}
