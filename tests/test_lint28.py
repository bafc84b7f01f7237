"""Round 28: misses of blind batch V, each on the real lines (cited with repository and
commit) beside a twin that stays as it was."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

# Jingkang50/OpenOOD @ 3de61c4ea68da2084a74883fce68e39c3493815c: the pipeline's epoch loop
# (openood/pipelines/train_pipeline.py:42) calls a trainer from a registry; the sampler is
# built in openood/datasets/utils.py:37; a postprocessor's per-layer pass holds loader
# loops (openood/postprocessors/mds_ensemble_postprocessor.py:49, 249).
OOD_ENTRY = """\
from datasets import get_dataloader
from networks import get_network
from postprocessor import setup
from trainers import get_trainer


def run(config):
    loader_dict = get_dataloader(config)
    train_loader, val_loader = loader_dict['train'], loader_dict['val']
    net = get_network(config.network)
    trainer = get_trainer(net, train_loader, config)
    setup(net, loader_dict)
    for epoch_idx in range(1, config.optimizer.num_epochs + 1):
        net, train_metrics = trainer.train_epoch(epoch_idx)
"""
OOD_DATA = """\
import torch
from torch.utils.data import DataLoader


def get_dataloader(config):
    dataloader_dict = {}
    for split in config.split_names:
        dataset = config.dataset_class(split)
        sampler = None
        if config.num_gpus * config.num_machines > 1:
            sampler = torch.utils.data.distributed.DistributedSampler(
                dataset)
        dataloader = DataLoader(dataset, batch_size=config.batch_size, sampler=sampler)
        dataloader_dict[split] = dataloader
    return dataloader_dict
"""
OOD_NET = """\
import torch


def get_network(network_config):
    net = network_config.build()
    net.cuda()
    net = torch.nn.parallel.DistributedDataParallel(
        net, device_ids=[torch.cuda.current_device()])
    return net
"""
OOD_TRAINERS = """\
import torch
import torch.nn.functional as F


class BaseTrainer:
    def __init__(self, net, train_loader, config):
        self.net = net
        self.train_loader = train_loader
        self.optimizer = torch.optim.SGD(net.parameters(), config.lr)

    def train_epoch(self, epoch_idx):
        for batch in self.train_loader:
            loss = F.cross_entropy(self.net(batch['data']), batch['label'])
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
        return self.net, {}


def get_trainer(net, train_loader, config):
    trainers = {'base': BaseTrainer}
    return trainers[config.trainer.name](net, train_loader, config)
"""
OOD_POST = """\
import torch
from torch.autograd import Variable


def setup(net, id_loader_dict):
    for layer_index in range(4):
        get_Mahalanobis_scores(net, id_loader_dict['val'], layer_index)


def get_Mahalanobis_scores(model, test_loader, layer_index):
    Mahalanobis = []
    for batch in test_loader:
        data = batch['data'].cuda()
        data = Variable(data, requires_grad=True)
        score = compute_Mahalanobis_score(model, data, layer_index)
        Mahalanobis.extend(score.cpu().numpy())
    return Mahalanobis


def compute_Mahalanobis_score(model, data, layer_index):
    out_features = model(data)
    loss = torch.mean(-out_features)
    loss.backward()
    return data.grad.data
"""


def test_set_epoch_said_at_the_loop_named_epoch(tmp_path: Path) -> None:
    files = {
        "datasets.py": OOD_DATA,
        "networks.py": OOD_NET,
        "trainers.py": OOD_TRAINERS,
        "postprocessor.py": OOD_POST,
    }
    found = lint_project(tmp_path / "bad", {**files, "main.py": OOD_ENTRY}, entry="main.py")
    assert severities(found, "DDP-SET-EPOCH") == [("main.py", 13, "warning")], found
    # twin: the fix (PR #223) re-seeds the sampler at the top of the epoch loop
    fixed = OOD_ENTRY.replace(
        "        net, train_metrics",
        "        train_loader.sampler.set_epoch(epoch_idx - 1)\n        net, train_metrics",
    )
    ok = lint_project(tmp_path / "ok", {**files, "main.py": fixed}, entry="main.py")
    assert severities(ok, "DDP-SET-EPOCH") == [], ok


# cszn/KAIR @ 41b782c2d7d9a32a73b43ac66c17226bc9e61cb6, models/model_base.py:157-174 (the
# optimizer's state loaded without map_location on every rank; 1142daf maps it to
# `storage.cuda(torch.cuda.current_device())`); the entry cut from
# main_train_msrresnet_psnr.py and models/model_plain.py.
KAIR_ENTRY = """\
import torch
import torch.distributed as dist
from model_base import ModelBase


def main(opt):
    dist.init_process_group(backend='nccl')
    model = ModelBase(opt)
    model.load_optimizers()
    model.net = torch.nn.parallel.DistributedDataParallel(
        model.net, device_ids=[torch.cuda.current_device()])
"""
KAIR_MODEL = """\
import torch


class ModelBase():
    def __init__(self, opt):
        self.opt = opt
        self.net = opt.net.cuda()
        self.G_optimizer = torch.optim.Adam(self.net.parameters(), lr=1e-4)

    def load_optimizers(self):
        load_path_optimizerG = self.opt['path']['pretrained_optimizerG']
        if load_path_optimizerG is not None and self.opt_train['G_optimizer_reuse']:
            self.load_optimizer(load_path_optimizerG, self.G_optimizer)

    def load_network(self, load_path, network, strict=True):
        network.load_state_dict(torch.load(load_path), strict=strict)

    def load_optimizer(self, load_path, optimizer):
        optimizer.load_state_dict(torch.load(load_path))
"""


def test_optimizer_state_loaded_without_map_location(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "bad", {"train.py": KAIR_ENTRY, "model_base.py": KAIR_MODEL})
    assert severities(found, "DDP-LOAD-MAP-LOCATION") == [("model_base.py", 19, "warning")], found
    # twin (1142daf): mapped to the current device; weights handed to one module stay quiet
    fixed = KAIR_MODEL.replace(
        "torch.load(load_path))",
        "torch.load(load_path, map_location=lambda storage, loc: storage.cuda("
        "torch.cuda.current_device())))",
    )
    ok = lint_project(tmp_path / "ok", {"train.py": KAIR_ENTRY, "model_base.py": fixed})
    assert severities(ok, "DDP-LOAD-MAP-LOCATION") == [], ok


# Metta-AI/metta @ 1565d67b099e0c8d5603b753d1dd33c6d490de06: tools/train.py:56-59 calls
# `setup_mettagrid_environment(cfg)`, which seeds with `cfg.seed` on every rank
# (metta/util/runtime_configuration.py:15-23, 59); the fix (1a7bc97) offsets the seed by
# the rank there. metta/agent/util/weights_analysis.py:46 draws noise.
METTA_ENTRY = """\
import os

import torch.distributed as dist
from runtime_configuration import setup_mettagrid_environment
from weights_analysis import perturb


def main(cfg):
    setup_mettagrid_environment(cfg)
    if "LOCAL_RANK" in os.environ and cfg.device.startswith("cuda"):
        dist.init_process_group(backend="nccl")
    perturb(cfg.weights)
"""
METTA_RUNTIME = """\
import random

import numpy as np
import torch


def seed_everything(seed, torch_deterministic):
    random.seed(seed)
    np.random.seed(seed)
    if seed is not None:
        torch.manual_seed(seed)
        torch.cuda.manual_seed_all(seed)


def setup_mettagrid_environment(cfg):
    seed_everything(cfg.seed, cfg.torch_deterministic)
"""
METTA_DRAWS = """\
import torch


def perturb(weights):
    noise = torch.randn_like(weights) * 1e-7
    return weights + noise
"""


def test_rank_seed_said_where_the_seed_is_handed_on(tmp_path: Path) -> None:
    files = {"runtime_configuration.py": METTA_RUNTIME, "weights_analysis.py": METTA_DRAWS}
    found = lint_project(tmp_path / "bad", {**files, "train.py": METTA_ENTRY})
    assert severities(found, "DDP-RANK-SEED") == [("runtime_configuration.py", 16, "info")], found
    # twin: the entry hands the seed itself: said at the entry's call, as before
    direct = METTA_ENTRY.replace(
        "setup_mettagrid_environment(cfg)\n    if", "seed_everything(cfg.seed, False)\n    if"
    ).replace("import setup_mettagrid_environment", "import seed_everything")
    at_entry = lint_project(tmp_path / "entry", {**files, "train.py": direct})
    assert severities(at_entry, "DDP-RANK-SEED") == [("train.py", 9, "info")], at_entry


# p0p4k/vits2_pytorch @ cf513a71e07aed48448e582eaecfaef2a2b8d6b6, train_ms.py:124-168: the
# duration discriminator has its own optimizer and is never wrapped, unlike net_g and
# net_d; hotfix b19b775 wraps it after net_d.
VITS2 = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from models import DurationDiscriminator, MultiPeriodDiscriminator, SynthesizerTrn


def run(rank, n_gpus, hps):
  dist.init_process_group(backend='nccl', init_method='env://', world_size=n_gpus, rank=rank)
  torch.cuda.set_device(rank)
  if hps.model.use_duration_discriminator == True:
    net_dur_disc = DurationDiscriminator(
      hps.model.hidden_channels,
      ).cuda(rank)
  else:
    net_dur_disc = None

  net_g = SynthesizerTrn(hps.segment_size).cuda(rank)
  net_d = MultiPeriodDiscriminator(hps.model.use_spectral_norm).cuda(rank)
  optim_g = torch.optim.AdamW(net_g.parameters(), hps.train.learning_rate)
  optim_d = torch.optim.AdamW(net_d.parameters(), hps.train.learning_rate)
  if net_dur_disc is not None:
    optim_dur_disc = torch.optim.AdamW(
      net_dur_disc.parameters(),
      hps.train.learning_rate)
  else:
    optim_dur_disc = None

  net_g = DDP(net_g, device_ids=[rank], find_unused_parameters=True)
  net_d = DDP(net_d, device_ids=[rank], find_unused_parameters=True){FIX}
  train_and_evaluate([net_g, net_d, net_dur_disc], [optim_g, optim_d, optim_dur_disc])


def train_and_evaluate(nets, optims):
  net_g, net_d, net_dur_disc = nets
  optim_g, optim_d, optim_dur_disc = optims
  loss = net_g(1) + net_d(1) + net_dur_disc(1)
  loss.backward()
"""
VITS2_MODELS = """\
import torch.nn as nn


class DurationDiscriminator(nn.Module):
  pass


class MultiPeriodDiscriminator(nn.Module):
  pass


class SynthesizerTrn(nn.Module):
  pass
"""
VITS2_FIX = """
  if net_dur_disc is not None:
    net_dur_disc = DDP(net_dur_disc, device_ids=[rank], find_unused_parameters=True)"""


def test_trained_model_left_out_of_ddp_beside_wrapped_ones(tmp_path: Path) -> None:
    bad = lint_project(
        tmp_path / "bad", {"models.py": VITS2_MODELS, "train.py": VITS2.replace("{FIX}", "")}
    )
    assert severities(bad, "DDP-NOT-APPLIED") == [("train.py", 29, "error")], bad
    assert any("`net_dur_disc` is trained (its parameters go to the optimizer" in f.summary for f in bad)
    # twin: the hotfix wraps it after net_d
    ok = lint_project(
        tmp_path / "ok", {"models.py": VITS2_MODELS, "train.py": VITS2.replace("{FIX}", VITS2_FIX)}
    )
    assert severities(ok, "DDP-NOT-APPLIED") == [], ok
