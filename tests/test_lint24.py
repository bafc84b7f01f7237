"""Round 24: blind batch Q. The false error on Stark's trainer (a GPU fixed only as the
default when no device was given) is a warning; each new reading is shown on real code
of batch Q (only the lines needed, cited with repository and commit) beside a silent or
error-keeping twin."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

# researchmm/Stark @ 162e1d37a38f92251cb380e90ccdb59608f2df3c,
# lib/train/trainers/base_trainer.py:32-35 (the trainer's default device) and
# lib/train/train_script.py:65-67 (distributed runs pass `cuda:local_rank` in settings).
STARK = """\
import argparse
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class BaseTrainer:
    def __init__(self, actor, settings):
        self.actor = actor
        self.device = getattr(settings, 'device', None)
{DEFAULT}
        self.actor.to(self.device)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--local_rank', default=-1, type=int)
    args = parser.parse_args()
    torch.cuda.set_device(args.local_rank)
    dist.init_process_group(backend="nccl")
    settings = argparse.Namespace(use_gpu=True)
    net = build()
    if args.local_rank != -1:
        net = DDP(net, device_ids=[args.local_rank], find_unused_parameters=True)
        settings.device = torch.device("cuda:%d" % args.local_rank)
    BaseTrainer(net, settings)
"""
_FALLBACK = """\
        if self.device is None:
            self.device = torch.device("cuda:0" if torch.cuda.is_available() and settings.use_gpu else "cpu")"""
_PLAIN = """\
        self.device = torch.device("cuda:0" if torch.cuda.is_available() and settings.use_gpu else "cpu")"""


def test_default_device_when_none_given_is_a_warning_a_fixed_one_stays_an_error(
    tmp_path: Path,
) -> None:
    found = lint_project(tmp_path / "ok", {"train.py": STARK.replace("{DEFAULT}", _FALLBACK)})
    sev = severities(found, "DDP-HARDCODED-DEVICE")
    assert sev and all(s == "warning" for _, _, s in sev), sev
    assert any("no device was given" in f.summary for f in found)
    # twin: the trainer fixes GPU 0 whatever it is given: every rank on one GPU
    bad = lint_project(tmp_path / "bad", {"train.py": STARK.replace("{DEFAULT}", _PLAIN)})
    assert ("train.py", 11, "error") in severities(bad, "DDP-HARDCODED-DEVICE"), bad


# IrvingMeng/MagFace @ ba12981eaafcbbfe1a0eb855a1198d2ef4cf2e75: models/iresnet.py:32 (plain
# BatchNorm2d), models/magface_dist.py:19-27 (builder() wraps the features in DDP; the fix
# 1647d2b converts to SyncBatchNorm right before that wrap), run/trainer_dist.py:125.
MAGFACE = {
    "models/__init__.py": "",
    "models/iresnet.py": """\
import torch.nn as nn


class IBasicBlock(nn.Module):
    def __init__(self, inplanes, planes):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(inplanes, eps=2e-05, momentum=0.9)
        self.conv1 = nn.Conv2d(inplanes, planes, 3)
""",
    "models/magface_dist.py": """\
import torch
import torch.nn.parallel as parallel
from models import iresnet


class MagFaceBuilder(torch.nn.Module):
    def __init__(self, args):
        super().__init__()
        self.features = iresnet.IBasicBlock(3, 64)


def builder(args):
    model = MagFaceBuilder(args)
{CONVERT}    model.features = parallel.DistributedDataParallel(
                    model.features.to(args.gpu),
                    device_ids=[args.gpu],
                    output_device=args.gpu
                )
    return model
""",
    "train.py": """\
import torch
import torch.distributed as dist
from models import magface_dist


def main_worker(gpu, args):
    args.gpu = gpu
    torch.cuda.set_device(args.gpu)
    dist.init_process_group(backend="nccl", rank=args.rank, world_size=args.world_size)
    model = magface_dist.builder(args)
    return model
""",
}
_SYNC = "    model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model).to(args.gpu)\n"


def test_batchnorm_wrapped_in_a_helper_module_is_said_at_that_wrap_too(tmp_path: Path) -> None:
    plain = {k: v.replace("{CONVERT}", "") for k, v in MAGFACE.items()}
    sev = severities(lint_project(tmp_path / "bad", plain), "DDP-BATCHNORM")
    # the entry's call that builds it, and the wrap in builder(), where the fix converts
    assert [(n, line) for n, line, _ in sev] == [("train.py", 10), ("magface_dist.py", 14)], sev
    # twin: the fix of 1647d2b, the conversion right before the wrap: silent
    fixed = {k: v.replace("{CONVERT}", _SYNC) for k, v in MAGFACE.items()}
    assert not severities(lint_project(tmp_path / "ok", fixed), "DDP-BATCHNORM")


# j-marple-dev/AYolov2 @ 5431a7527bfb3d848c437123ba251d176c9d99b7,
# scripts/train/train_model_builder.py:57-72: the builder guards its makedirs by RANK, then
# every rank copies the config files and writes full_cfg.yaml into the same log_dir.
AYOLO = {
    "scripts/__init__.py": "",
    "scripts/builder.py": """\
import os
import shutil
from pathlib import Path

import yaml
from torch.nn.parallel import DistributedDataParallel as DDP

LOCAL_RANK = int(os.getenv("LOCAL_RANK", -1))
RANK = int(os.getenv("RANK", -1))


class TrainModelBuilder:
    def __init__(self, model, log_dir, full_cfg=None):
        self.model = model
        self.log_dir = Path(log_dir)
        if RANK in [-1, 0]:
            os.makedirs(self.log_dir, exist_ok=True)
{GUARD}        for k, v in full_cfg["args"].items():
{IND}            dst = self.log_dir / f"{k}.yaml"
{IND}            shutil.copyfile(v, dst)
{IND}        with open(self.log_dir / "full_cfg.yaml", "w") as f:
{IND}            yaml.dump(full_cfg, f)

    def to_ddp(self):
        self.model = DDP(self.model, device_ids=[LOCAL_RANK], output_device=LOCAL_RANK)
        return self.model
""",
    "train.py": """\
import torch
import torch.distributed as dist
from scripts.builder import LOCAL_RANK, TrainModelBuilder


def main(model, cfg):
    torch.cuda.set_device(LOCAL_RANK)
    dist.init_process_group(backend="nccl")
    builder = TrainModelBuilder(model, "runs/exp", full_cfg=cfg)
    return builder.to_ddp()
""",
}


def test_write_beside_a_rank_guard_in_a_helper_is_said_in_place(tmp_path: Path) -> None:
    plain = {k: v.replace("{GUARD}", "").replace("{IND}", "") for k, v in AYOLO.items()}
    sev = severities(lint_project(tmp_path / "bad", plain), "DDP-ALL-RANKS-IO")
    assert ("builder.py", 20, "warning") in sev and ("builder.py", 21, "warning") in sev, sev
    # twin: the fix, the writes under the builder's own rank test: silent
    guarded = {
        k: v.replace("{GUARD}", "        if RANK in [-1, 0]:\n").replace("{IND}", "    ")
        for k, v in AYOLO.items()
    }
    assert not severities(lint_project(tmp_path / "ok", guarded), "DDP-ALL-RANKS-IO")


# quic/efficient-transformers @ 2ba491d713a65e6090d4ce603c907dc5c33a994a,
# QEfficient/finetune/utils/train_utils.py:270-283: the backward runs on both sides of
# `if train_config.grad_scaler:`, every micro-batch, while the optimizer steps every few;
# the fix 3aaa2d8 wraps the micro-batches in `model.no_sync()`.
QEFF = """\
import contextlib
import torch
import torch.distributed as dist
from torch import nn


def train(model, train_dataloader, optimizer, scaler, train_config):
    for step, batch in enumerate(train_dataloader):
        last = (step + 1) % train_config.gradient_accumulation_steps == 0
        with {CTX}:
            loss = model(**batch).loss
            loss = loss / train_config.gradient_accumulation_steps
            if train_config.grad_scaler:
                scaler.scale(loss).backward()  # backward pass
            else:
                loss.backward()  # backward pass
        if last or step == len(train_dataloader) - 1:
            if train_config.grad_scaler:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad()


def main(model, loader, optimizer, scaler, cfg, local_rank):
    dist.init_process_group("nccl")
    torch.cuda.set_device(local_rank)
    model = nn.parallel.DistributedDataParallel(model.cuda(), device_ids=[local_rank])
    train(model, loader, optimizer, scaler, cfg)
"""


def test_backward_on_both_sides_of_a_scaler_test_still_needs_no_sync(tmp_path: Path) -> None:
    bad = lint_project(
        tmp_path / "bad", {"train.py": QEFF.replace("{CTX}", "contextlib.nullcontext()")}
    )
    assert [line for _, line, _ in severities(bad, "DDP-NO-SYNC")] == [16], bad
    # twin: the fix, no_sync on the micro-batches that only accumulate: silent
    ctx = "contextlib.nullcontext() if last else model.no_sync()"
    ok = lint_project(tmp_path / "ok", {"train.py": QEFF.replace("{CTX}", ctx)})
    assert not severities(ok, "DDP-NO-SYNC")


# lyuwenyu/RT-DETR (rtdetr_pytorch) @ 5b628eaa0a2fc25bdafec7e6148d5296b144af85:
# tools/train.py:4-17 puts rtdetr_pytorch/ on sys.path and calls dist.init_distributed();
# src/solver/solver.py:11,28 `from src.misc import dist` (a submodule the package's
# __init__ does not import) and `dist.warp_model(...)`, the DDP wrap in src/misc/dist.py:96-101.
# The sys.path the entry sets holds for the solver too: the wrap is reached, and the missing
# common seed is said in the entry, after its init_distributed(). The evaluator's
# `open(os.devnull, "w")` (src/data/coco/coco_eval.py:47) writes no shared file: silent.
RTDETR = {
    "rtdetr_pytorch/tools/train.py": """\
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
import argparse

import src.misc.dist as dist
from src.solver import TASKS


def main(args, ) -> None:
    dist.init_distributed()
{SEED}    solver = TASKS['detection'](args)
    solver.fit()
""",
    "rtdetr_pytorch/src/__init__.py": "",
    "rtdetr_pytorch/src/misc/__init__.py": "from .logger import *\n",
    "rtdetr_pytorch/src/misc/logger.py": "def log(msg):\n    print(msg)\n",
    "rtdetr_pytorch/src/misc/dist.py": """\
import torch
import torch.distributed as tdist
from torch.nn.parallel import DistributedDataParallel as DDP


def init_distributed():
    tdist.init_process_group(init_method='env://', )
    torch.cuda.set_device(int(__import__('os').environ['LOCAL_RANK']))


def warp_model(model, find_unused_parameters=False):
    local_rank = int(__import__('os').environ['LOCAL_RANK'])
    return DDP(model, device_ids=[local_rank], output_device=local_rank)
""",
    "rtdetr_pytorch/src/solver/__init__.py": "from .solver import BaseSolver\n\nTASKS = {'detection': BaseSolver}\n",
    "rtdetr_pytorch/src/solver/solver.py": """\
import os
import torch
from src.misc import dist


class BaseSolver:
    def __init__(self, cfg):
        self.cfg = cfg

    def fit(self):
        self.model = dist.warp_model(torch.nn.Linear(4, 4).cuda())
        with open(os.devnull, "w") as devnull:
            print("quiet", file=devnull)
""",
}


_ENTRY = "rtdetr_pytorch/tools/train.py"


def test_entry_sys_path_reaches_the_wrap_and_the_seed_is_said_in_the_entry(
    tmp_path: Path,
) -> None:
    plain = {k: v.replace("{SEED}", "") for k, v in RTDETR.items()}
    found = lint_project(tmp_path / "bad", plain, entry=_ENTRY)
    assert ("train.py", 11, "info") in severities(found, "DDP-SEED"), found
    assert not severities(found, "DDP-ALL-RANKS-IO")
    # twin: a common seed right after init_distributed(): silent
    seeded = {k: v.replace("{SEED}", "    torch.manual_seed(0)\n") for k, v in RTDETR.items()}
    seeded[_ENTRY] = "import torch\n" + seeded[_ENTRY]
    assert not severities(lint_project(tmp_path / "ok", seeded, entry=_ENTRY), "DDP-SEED")


# EleutherAI/sparsify @ 10162b513b1bcddebc453b78ce5103ed7a828599: sparsify/__main__.py:160-168
# shards the dataset by rank itself; the trainer of another file (sparsify/trainer.py:276,
# 431) loops over a DataLoader of it. Said at the split, in the script the user runs; the
# fix 0f662ad drops the examples indivisible across processes before sharding.
SPARSIFY = {
    "sparsify/__init__.py": "",
    "sparsify/trainer.py": """\
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader


class Trainer:
    def __init__(self, model, dataset):
        self.model = DDP(model, device_ids=[dist.get_rank()])
        self.dataset = dataset

    def fit(self, opt):
        dl = DataLoader(self.dataset, batch_size=8)
        for batch in dl:
            self.model(batch).sum().backward()
            opt.step()
""",
    "sparsify/__main__.py": """\
import os
import torch
import torch.distributed as dist
from sparsify.trainer import Trainer


def run(model, dataset, opt):
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
{TRIM}    dataset = dataset.shard(dist.get_world_size(), rank)
    Trainer(model, dataset).fit(opt)
""",
}
_TRIM = "    dataset = dataset.select(range(len(dataset) - len(dataset) % dist.get_world_size()))\n"


def test_split_made_in_the_entry_is_said_at_the_split(tmp_path: Path) -> None:
    plain = {k: v.replace("{TRIM}", "") for k, v in SPARSIFY.items()}
    found = lint_project(tmp_path / "bad", plain, entry="sparsify/__main__.py")
    assert [(n, line) for n, line, _ in severities(found, "DDP-UNEVEN-BATCH")] == [
        ("__main__.py", 11)
    ], found
    trimmed = {k: v.replace("{TRIM}", _TRIM) for k, v in SPARSIFY.items()}
    ok = lint_project(tmp_path / "ok", trimmed, entry="sparsify/__main__.py")
    assert not severities(ok, "DDP-UNEVEN-BATCH")
