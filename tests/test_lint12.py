"""Round 12 (blind batch I). The code is the real projects' (only the lines needed, each
cited with its repository and commit); each pitfall has its corrected twin beside it,
which must stay silent."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project

from ddptui.lint.model import LintFinding


def _at(found: list[LintFinding], fid: str) -> list[tuple[str, int]]:
    return [(Path(f.file).name, f.line) for f in found if f.id == fid]


# CoinCheung/BiSeNet @ 6b4b67a8e3eb0cc23b3d7a94843a7c3c11dedca8 (a correct project):
# tools/train_amp.py and lib/data/get_dataloader.py. The loader without a sampler is the
# `else` of `if dist.is_initialized():`, whose other arm has the batch sampler.
BISENET_TRAIN = """\
import os
import torch
import torch.nn as nn
import torch.distributed as dist

from lib.data import get_data_loader


def set_model_dist(net):
    local_rank = int(os.environ['LOCAL_RANK'])
    net = nn.parallel.DistributedDataParallel(
        net,
        device_ids=[local_rank, ],
        output_device=local_rank
        )
    return net


def train(net, optim, scaler, criteria_pre):
    dl = get_data_loader(cfg, mode='train')
    net = set_model_dist(net)
    for it, (im, lb) in enumerate(dl):
        im = im.cuda()
        lb = lb.cuda()
        optim.zero_grad()
        logits = net(im)
        loss = criteria_pre(logits, lb)
        scaler.scale(loss).backward()
        scaler.step(optim)


def main():
    local_rank = int(os.environ['LOCAL_RANK'])
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend='nccl')
    train()
"""

BISENET_LOADER = """\
import torch
from torch.utils.data import Dataset, DataLoader
import torch.distributed as dist

from lib.data.sampler import RepeatedDistSampler


def get_data_loader(cfg, mode='train'):
    if mode == 'train':
        batchsize = cfg.ims_per_gpu
        shuffle = True
        drop_last = True
    else:
        batchsize = cfg.eval_ims_per_gpu
        shuffle = False
        drop_last = False

    ds = eval(cfg.dataset)(cfg.im_root, cfg.annpath, mode=mode)

    if dist.is_initialized():
        if mode == 'train':
            n_train_imgs = cfg.ims_per_gpu * dist.get_world_size() * cfg.max_iter
            sampler = RepeatedDistSampler(ds, n_train_imgs, shuffle=shuffle)
        else:
            sampler = torch.utils.data.distributed.DistributedSampler(
                ds, shuffle=shuffle)
        batchsampler = torch.utils.data.sampler.BatchSampler(
            sampler, batchsize, drop_last=drop_last
        )
        dl = DataLoader(
            ds,
            batch_sampler=batchsampler,
            num_workers=4,
            pin_memory=True,
        )
    else:
        dl = DataLoader(
            ds,
            batch_size=batchsize,
            shuffle=shuffle,
            drop_last=drop_last,
            num_workers=4,
            pin_memory=True,
        )
    return dl
"""

BISENET_FILES = {
    "train.py": BISENET_TRAIN,
    "lib/__init__.py": "",
    "lib/data/__init__.py": "from .get_dataloader import get_data_loader\n",
    "lib/data/get_dataloader.py": BISENET_LOADER,
}


def test_bisenet_single_process_arm_is_no_sampler_error(tmp_path: Path) -> None:
    found = lint_project(tmp_path, BISENET_FILES)
    assert not _at(found, "DDP-SAMPLER"), found
    assert not [f for f in found if f.severity == "error"], found


def test_bisenet_without_the_distributed_arm_is_a_sampler_error(tmp_path: Path) -> None:
    start = BISENET_LOADER.index("    if dist.is_initialized():")
    end = BISENET_LOADER.index("    else:\n        dl = DataLoader(")
    loader = BISENET_LOADER[:start] + "    if True:\n        pass\n" + BISENET_LOADER[end:]
    found = lint_project(tmp_path, {**BISENET_FILES, "lib/data/get_dataloader.py": loader})
    assert _at(found, "DDP-SAMPLER") == [("get_dataloader.py", 23)], found


# meta-pytorch/torchft @ 8c8e4e340800d9e08547a98fcdbcc074613dee8b, train_ddp.py; fixed by
# c4e58bb "use sampler in train_ddp.py" (PR #74): a torchdata StatefulDataLoader.
TORCHFT = """\
import os

import torch
import torchvision
from torch import nn, optim
from torchdata.stateful_dataloader import StatefulDataLoader

from torchft import (
    DistributedDataParallel,
    DistributedSampler,
    Manager,
    Optimizer,
)


def main() -> None:
    REPLICA_GROUP_ID = int(os.environ.get("REPLICA_GROUP_ID", 0))
    NUM_REPLICA_GROUPS = int(os.environ.get("NUM_REPLICA_GROUPS", 2))
    trainset = torchvision.datasets.CIFAR10(root="./cifar", train=True, download=True)
    sampler = DistributedSampler(
        trainset,
        replica_group=REPLICA_GROUP_ID,
        num_replica_groups=NUM_REPLICA_GROUPS,
        rank=0,
        num_replicas=1,
    )
    trainloader = StatefulDataLoader(
        trainset, batch_size=64, shuffle=True, num_workers=2
    )
    manager = Manager(pg=None, min_replica_size=1)
    m = Net().to("cuda")
    m = DistributedDataParallel(manager, m)
    optimizer = Optimizer(manager, optim.AdamW(m.parameters()))
    criterion = nn.CrossEntropyLoss()
    while True:
        for i, (inputs, labels) in enumerate(trainloader):
            optimizer.zero_grad()
            out = m(inputs)
            loss = criterion(out, labels)
            loss.backward()
            optimizer.step()
"""

# same commit: torchft/__init__.py and torchft/ddp.py (the wrapper subclasses torch's)
TORCHFT_FILES = {
    "train.py": TORCHFT,
    "torchft/__init__.py": "from torchft.ddp import DistributedDataParallel\n",
    "torchft/ddp.py": (
        "from torch.nn import parallel\n\n\n"
        "class DistributedDataParallel(parallel.DistributedDataParallel):\n"
        "    def __init__(self, manager, module, **kwargs):\n"
        "        super().__init__(module, **kwargs)\n"
    ),
}


def test_torchft_stateful_loader_without_its_sampler(tmp_path: Path) -> None:
    found = lint_project(tmp_path, TORCHFT_FILES)
    assert _at(found, "DDP-SAMPLER") == [("train.py", 27)], found
    fixed = TORCHFT.replace(
        "trainset, batch_size=64, shuffle=True, num_workers=2",
        "trainset, batch_size=64, num_workers=2, sampler=sampler",
    )
    assert not _at(lint_project(tmp_path, {**TORCHFT_FILES, "train.py": fixed}), "DDP-SAMPLER")


# RVC-Project/Retrieval-based-Voice-Conversion-WebUI @
# 47c665384fdf3189454fd2549d95a1cb1241b391, train_nsf_sim_cache_sid_load_pretrain.py and
# train/utils.py; fixed by 70c6865 (`... and rank == 0`). `utils` is found through
# `sys.path.append(os.path.join(now_dir, "train"))`, and train_and_evaluate is called in
# both arms of `if rank == 0:`: every rank runs it.
RVC_TRAIN = """\
import sys,os
now_dir=os.getcwd()
sys.path.append(os.path.join(now_dir,"train"))
import utils
import torch
import torch.multiprocessing as mp
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def run(rank, n_gpus, hps):
    dist.init_process_group(
        backend="gloo", init_method="env://", world_size=n_gpus, rank=rank
    )
    torch.cuda.set_device(rank)
    net_g = DDP(build(hps).cuda(rank), device_ids=[rank])
    for epoch in range(1, hps.train.epochs + 1):
        if rank == 0:
            train_and_evaluate(rank, epoch, hps, net_g, logger)
        else:
            train_and_evaluate(rank, epoch, hps, net_g, None)


def train_and_evaluate(rank, epoch, hps, net_g, logger):
    for batch_idx, info in enumerate(train_loader):
        loss = net_g(info)
        loss.backward()
    if epoch % hps.save_every_epoch == 0:
        utils.save_checkpoint(
            net_g,
            hps.train.learning_rate,
            epoch,
            os.path.join(hps.model_dir, "G_{}.pth".format(global_step)),
        )
"""

RVC_UTILS = """\
import torch


def save_checkpoint(model, learning_rate, iteration, checkpoint_path):
  if hasattr(model, 'module'):
    state_dict = model.module.state_dict()
  else:
    state_dict = model.state_dict()
  torch.save({'model': state_dict,
              'iteration': iteration,
              'learning_rate': learning_rate}, checkpoint_path)
"""


def test_rvc_checkpoint_through_sys_path_on_every_rank(tmp_path: Path) -> None:
    found = lint_project(tmp_path, {"train.py": RVC_TRAIN, "train/utils.py": RVC_UTILS})
    assert ("train.py", 29) in _at(found, "DDP-ALL-RANKS-IO"), found
    fixed = RVC_TRAIN.replace(
        "if epoch % hps.save_every_epoch == 0:", "if epoch % hps.save_every_epoch == 0 and rank == 0:"
    )
    found = lint_project(tmp_path, {"train.py": fixed})
    assert not _at(found, "DDP-ALL-RANKS-IO"), found


# Azure-Samples/azure-ml-federated-learning @ 1071a4958821db028acc083d0c9978d2df5fd004,
# examples/components/PNEUMONIA/traininsilo/run.py; fixed by 94009ce "fix cuda ddp",
# which adds `self.model_ = DDP(self.model_, device_ids=[self._rank], ...)`.
PNEUMONIA = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.optim import SGD
from torch.utils.data.dataloader import DataLoader
from torch.utils.data.distributed import DistributedSampler

from pneumonia_network import PneumoniaNetwork


class PTLearner:
    def __init__(self, lr=0.01, epochs=5, device_id=None, distributed=False):
        self._distributed = distributed
        self.device_ = torch.device("cuda", device_id)
        self.model_ = PneumoniaNetwork()
        self.model_.to(self.device_)
        self.loss_ = torch.nn.CrossEntropyLoss()
        if self._distributed:
            self.train_sampler_ = DistributedSampler(self.train_dataset_)
        else:
            self.train_sampler_ = None
        self.train_loader_ = DataLoader(
            dataset=self.train_dataset_, batch_size=32, sampler=self.train_sampler_
        )
        self.optimizer_ = SGD(self.model_.parameters(), lr=lr, momentum=0.9)

    def local_train(self):
        for epoch in range(self._epochs):
            if self._distributed:
                self.train_sampler_.set_epoch(epoch)
            for i, batch in enumerate(self.train_loader_):
                images, labels = batch[0].to(self.device_), batch[1].to(self.device_)
                self.optimizer_.zero_grad()
                predictions = self.model_(images)
                cost = self.loss_(predictions, labels)
                cost.backward()
                self.optimizer_.step()


def run(args):
    dist.init_process_group("nccl")
    trainer = PTLearner(device_id=int(args.local_rank), distributed=True)
    trainer.local_train()
"""


def test_pneumonia_ddp_imported_never_applied(tmp_path: Path) -> None:
    found = lint_project(tmp_path, {"train.py": PNEUMONIA})
    assert _at(found, "DDP-NOT-APPLIED") == [("train.py", 16)], found
    fixed = PNEUMONIA.replace(
        "        self.loss_ = torch.nn.CrossEntropyLoss()\n",
        "        self.model_ = DDP(self.model_, device_ids=[device_id])\n"
        "        self.loss_ = torch.nn.CrossEntropyLoss()\n",
    )
    assert not _at(lint_project(tmp_path, {"train.py": fixed}), "DDP-NOT-APPLIED")


# yangxy/GPEN @ c9cc29009b633788a77d782ba102cee913e3a349, train_simple.py; fixed by
# 47f01e1 "fix using more memory when loading model" (map_location=torch.device("cpu")).
GPEN = """\
import os
import torch
from torch import nn, optim


if __name__ == '__main__':
    n_gpu = int(os.environ['WORLD_SIZE']) if 'WORLD_SIZE' in os.environ else 1
    args.distributed = n_gpu > 1
    if args.distributed:
        torch.cuda.set_device(args.local_rank)
        torch.distributed.init_process_group(backend='nccl', init_method='env://')
    generator = FullGenerator(args.size, args.latent, args.n_mlp).to('cuda')
    if args.pretrain is not None:
        print('load model:', args.pretrain)
        ckpt = torch.load(args.pretrain)
        generator.load_state_dict(ckpt['g'])
    if args.distributed:
        generator = nn.parallel.DistributedDataParallel(
            generator,
            device_ids=[args.local_rank],
            output_device=args.local_rank,
            broadcast_buffers=False,
        )
"""


def test_gpen_load_without_map_location_on_every_rank(tmp_path: Path) -> None:
    found = lint_project(tmp_path, {"train.py": GPEN})
    hits = [f for f in found if f.id == "DDP-LOAD-MAP-LOCATION"]
    assert [(h.line, h.severity) for h in hits] == [(15, "warning")], found
    assert "args.pretrain" in hits[0].fix
    fixed = GPEN.replace(
        "torch.load(args.pretrain)", 'torch.load(args.pretrain, map_location=torch.device("cpu"))'
    )
    assert not _at(lint_project(tmp_path, {"train.py": fixed}), "DDP-LOAD-MAP-LOCATION")


# baidu-baige/LoongForge @ 647a3c582fd34d330ee70fb002522bfda0e609f2,
# loongforge/embodied/train/trainers/supervised/finetune_trainer.py; fixed by PR #163
# (6b3845b): "no_sync() around backward() alone was a no-op".
LOONGFORGE = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class FinetuneTrainer:
    def __init__(self, model, ctx):
        self.ctx = ctx
        self.model = DDP(model, device_ids=[ctx.local_rank])

    def _forward_backward(self, grad_accum):
        for micro in range(grad_accum):
            batch = self._fetch_batch("vla")
            loss = self.model(**batch)
            sync_grads = micro == grad_accum - 1
            self._backward_loss(loss, grad_accum, sync_grads)

    def _backward_loss(self, loss, grad_accum, sync_grads):
        loss = loss / grad_accum
        if self.ctx.is_distributed and not sync_grads:
            if hasattr(self.model, "no_sync"):
                with self.model.no_sync():
                    loss.backward()
            else:
                loss.backward()
        else:
            loss.backward()


def main(ctx, model):
    dist.init_process_group("nccl")
    FinetuneTrainer(model, ctx)._forward_backward(4)
"""


def test_loongforge_no_sync_around_backward_only(tmp_path: Path) -> None:
    found = lint_project(tmp_path, {"train.py": LOONGFORGE})
    assert ("train.py", 22) in _at(found, "DDP-NO-SYNC"), found
    fixed = LOONGFORGE.replace(
        "                with self.model.no_sync():\n                    loss.backward()",
        "                with self.model.no_sync():\n"
        "                    loss = self.model(**batch) / grad_accum\n"
        "                    loss.backward()",
    )
    assert ("train.py", 22) not in _at(lint_project(tmp_path, {"train.py": fixed}), "DDP-NO-SYNC")


# pytorch/examples imagenet/main.py (in the 168 public correct scripts): the unmapped load
# is the single-process arm; the other arm maps to this process's GPU.
IMAGENET_RESUME = GPEN.replace(
    "        ckpt = torch.load(args.pretrain)\n",
    "        if args.gpu is None:\n"
    "            ckpt = torch.load(args.pretrain)\n"
    "        else:\n"
    "            loc = f'cuda:{args.gpu}'\n"
    "            ckpt = torch.load(args.pretrain, map_location=loc)\n",
)


def test_unmapped_load_in_the_single_process_arm_is_silent(tmp_path: Path) -> None:
    assert not _at(lint_project(tmp_path, {"train.py": IMAGENET_RESUME}), "DDP-LOAD-MAP-LOCATION")
