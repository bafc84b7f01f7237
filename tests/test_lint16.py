"""Round 16: the false errors blind batch L found on correct real projects, each read in
general. The code is the real projects' (only the lines needed, each cited with its
repository and commit); each correct shape is beside a wrong twin that keeps its finding."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project
from lintproject import severities as _sev

# LikeLy-Journey/SegmenTron @ 4bc605eedde7d680314f63d329277b73f83b1c5f: a loss class
# holding `nn.BCELoss(weight)` is returned by the factory `get_segmentation_loss`, whose
# result tools/train.py moves with `.to(self.device)` (segmentron/solver/loss.py:129).
SEG_LOSS = """\
import torch.nn as nn


class EncNetLoss(nn.CrossEntropyLoss):
    def __init__(self, aux=False, aux_weight=0.4, weight=None, ignore_index=-1, **kwargs):
        super(EncNetLoss, self).__init__(weight, None, ignore_index)
        self.aux = aux
        self.bceloss = nn.BCELoss(weight)


def get_segmentation_loss(model, use_ohem=False, **kwargs):
    model = model.lower()
    if model == 'encnet':
        return EncNetLoss(**kwargs)
"""
SEG_TRAIN = """\
import torch
import torch.distributed as dist
from torch import nn
from loss import get_segmentation_loss


class Trainer(object):
    def __init__(self, args):
        self.device = torch.device(args.device)
        dist.init_process_group(backend="nccl", init_method="env://")
        self.model = nn.Linear(4, 4).to(self.device)
        self.criterion = get_segmentation_loss(args.model, use_ohem=False,
                                               aux=True, aux_weight=0.4,
                                               ignore_index=-1){MOVE}
        self.model = nn.parallel.DistributedDataParallel(self.model,
            device_ids=[args.local_rank], output_device=args.local_rank)

    def train(self, loader):
        for images, targets in loader:
            loss = self.criterion(self.model(images.cuda()), targets)
            loss.backward()
"""


def test_loss_from_a_factory_moved_where_it_is_called(tmp_path: Path) -> None:
    moved = SEG_TRAIN.replace("{MOVE}", ".to(self.device)")
    found = lint_project(tmp_path / "ok", {"train.py": moved, "loss.py": SEG_LOSS})
    assert [f for f in found if f.id == "DDP-LOSS-DEVICE" and f.severity == "error"] == []
    left = SEG_TRAIN.replace("{MOVE}", "")
    found = lint_project(tmp_path / "bad", {"train.py": left, "loss.py": SEG_LOSS})
    assert ("loss.py", 8, "warning") in _sev(found, "DDP-LOSS-DEVICE")


# hustvl/YOLOP @ 8d8f68df318c71f01d6f813c024df646c7d1978f, tools/train.py:309-311 and
# lib/utils/utils.py:141: `model.model[...]` read in the else arm of `is_parallel(model)`,
# a project helper that tests the wrapper's type.
YOLOP_UTILS = """\
import torch.nn as nn


def is_parallel(model):
    return type(model) in (nn.parallel.DataParallel, nn.parallel.DistributedDataParallel)
"""
YOLOP_TRAIN = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from utils import is_parallel


def main(args, model, logger):
    dist.init_process_group(backend="nccl")
    model = model.cuda(args.local_rank)
    model = DDP(model, device_ids=[args.local_rank], output_device=args.local_rank)
    {READ}
    logger.info(str(det.anchors))
"""


def test_wrapper_read_under_a_project_helper_that_tests_the_wrapper(tmp_path: Path) -> None:
    guarded = YOLOP_TRAIN.replace(
        "{READ}",
        "det = model.module.model[model.module.detector_index] if is_parallel(model) "
        "else model.model[model.detector_index]",
    )
    found = lint_project(tmp_path / "ok", {"train.py": guarded, "utils.py": YOLOP_UTILS})
    assert _sev(found, "DDP-WRAPPER-ATTR") == []
    bare = YOLOP_TRAIN.replace("{READ}", "det = model.model[model.detector_index]")
    found = lint_project(tmp_path / "bad", {"train.py": bare, "utils.py": YOLOP_UTILS})
    assert ("train.py", 11, "error") in _sev(found, "DDP-WRAPPER-ATTR")


# hustvl/YOLOP @ 8d8f68df318c71f01d6f813c024df646c7d1978f, tools/train.py:318-333 and
# lib/core/function.py: `validate()` on rank 0 only, its DDP forward under no_grad, in the
# epoch loop that trains on every rank; the model has BatchNorm (buffers).
YOLOP_LOOP = """\
import torch
import torch.nn as nn
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def train(loader, model, criterion, optimizer):
    model.train()
    for inputs, target in loader:
        loss = criterion(model(inputs), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def validate(loader, model):
    model.eval()
    for img, target in loader:
        with torch.no_grad():
            out = model(img)
    return out


def main(args, train_loader, valid_loader, criterion, optimizer, rank):
    dist.init_process_group(backend="nccl")
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)).cuda(args.local_rank)
    model = DDP(model, device_ids=[args.local_rank], find_unused_parameters=True)
{BODY}
"""
IN_LOOP = """\
    for epoch in range(args.begin_epoch + 1, args.end_epoch + 1):
        train_loader.sampler.set_epoch(epoch)
        train(train_loader, model, criterion, optimizer)
        if (epoch % args.val_freq == 0 or epoch == args.end_epoch) and rank in [-1, 0]:
            validate(valid_loader, model)
"""
AFTER_LOOP = """\
    for epoch in range(args.begin_epoch + 1, args.end_epoch + 1):
        train_loader.sampler.set_epoch(epoch)
        train(train_loader, model, criterion, optimizer)
    if rank in [-1, 0]:
        validate(valid_loader, model)
"""


def test_rank_only_no_grad_validation_inside_the_training_loop(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "ok", {"train.py": YOLOP_LOOP.replace("{BODY}", IN_LOOP)})
    assert [x for x in _sev(found, "DDP-RANK-DIVERGENCE") if x[2] == "error"] == []
    assert ("train.py", 32, "warning") in _sev(found, "DDP-RANK-DIVERGENCE")
    found = lint_project(tmp_path / "bad", {"train.py": YOLOP_LOOP.replace("{BODY}", AFTER_LOOP)})
    assert ("train.py", 32, "error") in _sev(found, "DDP-RANK-DIVERGENCE")


# deepinsight/insightface @ 7fadd420c2351d0ffa8cac403421c1a3ed733365,
# recognition/arcface_torch/train_v2.py:145-176 and 214-225: each rank resumes from its
# own `checkpoint_gpu_{rank}.pt`, which every rank saved at the same epoch.
ARCFACE = """\
import os
import torch
import torch.distributed as dist


def main(cfg, backbone, train_loader, opt):
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl")
    torch.cuda.set_device(local_rank)
    backbone = torch.nn.parallel.DistributedDataParallel(
        module=backbone, broadcast_buffers=False, device_ids=[local_rank])
    start_epoch = 0
    if cfg.resume:
        dict_checkpoint = torch.load(os.path.join(cfg.output, f"checkpoint_gpu_{rank}.pt"))
        start_epoch = dict_checkpoint["epoch"]
    for epoch in range(start_epoch, cfg.num_epoch):
        train_loader.sampler.set_epoch(epoch)
        for _, (img, local_labels) in enumerate(train_loader):
            loss = backbone(img).sum()
            loss.backward()
            opt.step()
        if cfg.save_all_states:
            checkpoint = {"epoch": epoch + 1}
            {SAVE}torch.save(checkpoint, os.path.join(cfg.output, f"checkpoint_gpu_{rank}.pt"))
"""


def test_per_rank_checkpoint_every_rank_saved(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "ok", {"train.py": ARCFACE.replace("{SAVE}", "")})
    assert _sev(found, "DDP-RANK-DIVERGENCE") == []
    one = ARCFACE.replace("{SAVE}", "if rank == 0:\n                ")
    found = lint_project(tmp_path / "bad", {"train.py": one})
    # found, as a warning since lint22: the loop head names no rank, the rank reaches the
    # bound only through where `start_epoch` comes from (on blind A-O that shape was never a
    # labelled pitfall, and four times a false error)
    assert ("train.py", 17, "warning") in _sev(found, "DDP-RANK-DIVERGENCE")


# hustvl/YOLOP @ 8d8f68df318c71f01d6f813c024df646c7d1978f, tools/train.py:145-179:
# rank 0 alone reads `begin_epoch` back from a checkpoint, only if the file exists (a
# resume): the ranks part then, so it stays a warning, and an error without the file test.
YOLOP_RESUME = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(cfg, args, model, train_loader, optimizer, rank):
    dist.init_process_group(backend="nccl")
    begin_epoch = cfg.TRAIN.BEGIN_EPOCH
    if rank in [-1, 0]:
        checkpoint_file = os.path.join(cfg.LOG_DIR, 'checkpoint.pth')
        {TEST}
            checkpoint = torch.load(checkpoint_file)
            begin_epoch = checkpoint['epoch']
    model = DDP(model.cuda(), device_ids=[args.local_rank])
    for epoch in range(begin_epoch + 1, cfg.TRAIN.END_EPOCH + 1):
        train_loader.sampler.set_epoch(epoch)
        for x, y in train_loader:
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
"""


def test_rank_only_resume_epoch_is_a_warning(tmp_path: Path) -> None:
    resumed = YOLOP_RESUME.replace(
        "{TEST}", "if cfg.AUTO_RESUME and os.path.exists(checkpoint_file):"
    )
    found = lint_project(tmp_path / "ok", {"train.py": resumed})
    assert _sev(found, "DDP-RANK-DIVERGENCE") == [("train.py", 14, "warning")]
    always = YOLOP_RESUME.replace("{TEST}", "if True:")
    found = lint_project(tmp_path / "bad", {"train.py": always})
    assert ("train.py", 14, "error") in _sev(found, "DDP-RANK-DIVERGENCE")


# facebookresearch/vissl @ 8e0476b12674089ecea5b85c246a2df19f9402e4,
# vissl/engines/train.py:79 and vissl/utils/misc.py:140-153: the seed comes from the
# node's index (PR #299 then passes dist_rank).
VISSL_MISC = """\
import random
import numpy as np
import torch


def set_seeds(cfg, node_id=0):
    node_seed = cfg.SEED_VALUE
    if cfg.DISTRIBUTED.NUM_NODES > 1:
        node_seed = node_seed * 2 * node_id
    random.seed(node_seed)
    np.random.seed(node_seed)
    torch.manual_seed(node_seed)
"""
VISSL_TRAIN = """\
import torch
import torch.distributed as dist
from misc import set_seeds


def train_main(cfg, dist_run_id, local_rank=0, node_id=0, dist_rank=0):
    dist.init_process_group(backend="nccl", init_method=dist_run_id)
    set_seeds(cfg, {WHO})
    torch.cuda.set_device(local_rank)
    model = torch.nn.parallel.DistributedDataParallel(cfg.model.cuda(), device_ids=[local_rank])
    return model
"""


def test_seed_from_the_node_index(tmp_path: Path) -> None:
    files = {"misc.py": VISSL_MISC, "train.py": VISSL_TRAIN.replace("{WHO}", "node_id")}
    found = lint_project(tmp_path / "bad", files)
    assert ("train.py", 8, "info") in _sev(found, "DDP-RANK-SEED")
    files["train.py"] = VISSL_TRAIN.replace("{WHO}", "dist_rank")
    found = lint_project(tmp_path / "ok", files)
    assert ("train.py", 8, "info") not in _sev(found, "DDP-RANK-SEED")


# metatensor/metatrain @ the commit before PR #391 (manifest of blind batch L),
# src/metatrain/cli/train.py:370: every rank writes options_restart.yaml; the fix puts
# it under `if is_main_process():`.
METATRAIN = """\
from pathlib import Path

import torch
import torch.distributed as dist
from omegaconf import OmegaConf


def is_main_process():
    return not dist.is_initialized() or dist.get_rank() == 0


def train_model(options, checkpoint_dir, model, local_rank):
    dist.init_process_group(backend="nccl")
    torch.cuda.set_device(local_rank)
{SAVE}
    model = torch.nn.parallel.DistributedDataParallel(model.cuda(), device_ids=[local_rank])
    return model


if __name__ == "__main__":
    train_model({}, "ckpt", torch.nn.Linear(2, 2), 0)
"""
SAVE = """\
    OmegaConf.save(
        config=options, f=Path(checkpoint_dir) / "options_restart.yaml", resolve=True
    )"""


def test_omegaconf_save_on_every_rank(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "bad", {"train.py": METATRAIN.replace("{SAVE}", SAVE)})
    assert ("train.py", 15, "warning") in _sev(found, "DDP-ALL-RANKS-IO")
    guarded = "    if is_main_process():\n" + "\n".join("    " + line for line in SAVE.splitlines())
    found = lint_project(tmp_path / "ok", {"train.py": METATRAIN.replace("{SAVE}", guarded)})
    assert _sev(found, "DDP-ALL-RANKS-IO") == []
