"""Round 31: what blind batch X missed, each on the real lines (cited with repository and
commit) beside a twin that must stay silent."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

# jingyaogong/minimind @ d65ef2c00ebc6082f9df11541e1b191655eddb00,
# trainer/train_grpo.py:71-145, 312-318 (issue #853): the policy is wrapped in DDP at
# module level, and the GRPO step runs the loss-bearing forward through
# `model_unwrapped = model.module if isinstance(model, DistributedDataParallel) else model`.
MM_GRPO = """\
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel


def grpo_train_epoch(epoch, loader, ref_model):
    for step, batch in enumerate(loader):
        outputs = batch["input_ids"]
        full_mask = batch["attention_mask"]
        model_unwrapped = model.module if isinstance(model, DistributedDataParallel) else model
        with autocast_ctx:
            res = model_unwrapped(outputs, attention_mask=full_mask)
            per_token_logps = F.log_softmax(res.logits[:, :-1, :], dim=-1)

        with torch.no_grad():
            ref_per_token_logps = F.log_softmax(ref_model(outputs, attention_mask=full_mask).logits[:, :-1, :], dim=-1)

        kl_div = ref_per_token_logps - per_token_logps
        loss = kl_div.mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


if __name__ == "__main__":
    dist.init_process_group(backend="nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = torch.nn.Linear(8, 8).cuda()
    ref_model = torch.nn.Linear(8, 8).cuda()
    autocast_ctx = torch.autocast("cuda", dtype=torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    loader = []
    if dist.is_initialized():
        model = DistributedDataParallel(model, device_ids=[local_rank])
    for epoch in range(2):
        grpo_train_epoch(epoch, loader, ref_model)
"""


def test_rl_step_forward_through_the_unwrapped_policy(tmp_path: Path) -> None:
    bad = lint_project(tmp_path / "bad", {"train.py": MM_GRPO})
    assert severities(bad, "DDP-FORWARD-BYPASS") == [("train.py", 15, "error")], bad
    # twin: the forward through the wrapper (`res = model(outputs, ...)`)
    fixed = MM_GRPO.replace("res = model_unwrapped(", "res = model(")
    assert fixed != MM_GRPO
    ok = lint_project(tmp_path / "ok", {"train.py": fixed})
    assert severities(ok, "DDP-FORWARD-BYPASS") == [], ok


# clovaai/voxceleb_trainer @ 3883cd497e1629a2931e0bfb6da3d85eb1496940, DatasetLoader.py
# 187-249 (`voxceleb_sampler` returns every speaker's shuffled utterances on every rank;
# commit 9ae2041 slices them per rank), trainSpeakerNet.py:107-134, 189-195 and
# SpeakerNet.py:80-104 (mp.spawn workers wrap the model in DDP and train on the loader).
VC_LOADER = """\
import numpy
import torch


class voxceleb_sampler(torch.utils.data.Sampler):
    def __init__(self, data_source, nPerSpeaker, max_seg_per_spk, batch_size):
        self.label_dict = data_source.label_dict
        self.nPerSpeaker = nPerSpeaker
        self.max_seg_per_spk = max_seg_per_spk
        self.batch_size = batch_size

    def __iter__(self):
        dictkeys = list(self.label_dict.keys())
        dictkeys.sort()
        flattened_list = []
        flattened_label = []
        for findex, key in enumerate(dictkeys):
            data = self.label_dict[key]
            rp = numpy.random.permutation(len(data))
            flattened_label.extend([findex] * (len(rp)))
            flattened_list.extend(data[i] for i in rp)
        mixid = numpy.random.permutation(len(flattened_label))
        mixmap = list(mixid)
        return iter([flattened_list[i] for i in mixmap])

    def __len__(self):
        return len(self.data_source)


def get_data_loader(train_dataset, batch_size, nPerSpeaker, max_seg_per_spk, **kwargs):
    train_sampler = voxceleb_sampler(train_dataset, nPerSpeaker, max_seg_per_spk, batch_size)
    train_loader = torch.utils.data.DataLoader(
        train_dataset,
        batch_size=batch_size,
        sampler=train_sampler,
        drop_last=True,
    )
    return train_loader
"""
VC_TRAIN = """\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from DatasetLoader import get_data_loader


def main_worker(gpu, ngpus_per_node, args):
    s = torch.nn.Linear(40, 512)
    dist.init_process_group(backend="nccl", world_size=ngpus_per_node, rank=gpu)
    torch.cuda.set_device(gpu)
    s.cuda(gpu)
    s = torch.nn.parallel.DistributedDataParallel(s, device_ids=[gpu])
    optimizer = torch.optim.SGD(s.parameters(), lr=0.1)
    trainLoader = get_data_loader(args.train_dataset, args.batch_size, 2, 500)
    for it in range(1, args.max_epoch + 1):
        for data, data_label in trainLoader:
            optimizer.zero_grad()
            nloss = s(data.cuda()).sum()
            nloss.backward()
            optimizer.step()


def main(args):
    n_gpus = torch.cuda.device_count()
    mp.spawn(main_worker, nprocs=n_gpus, args=(n_gpus, args))
"""


def test_project_sampler_that_never_reads_the_rank(tmp_path: Path) -> None:
    files = {"train.py": VC_TRAIN, "DatasetLoader.py": VC_LOADER}
    bad = lint_project(tmp_path / "bad", files)
    assert severities(bad, "DDP-SAMPLER") == [("DatasetLoader.py", 24, "error")], bad
    # twin: commit 9ae2041 keeps this rank's part of the list
    fixed = VC_LOADER.replace(
        "        return iter([flattened_list[i] for i in mixmap])",
        "        mixed_list = [flattened_list[i] for i in mixmap]\n"
        "        total_size = len(mixed_list) - len(mixed_list) % (self.batch_size * "
        "torch.distributed.get_world_size())\n"
        "        start_index = int(torch.distributed.get_rank() * total_size / "
        "torch.distributed.get_world_size())\n"
        "        return iter(mixed_list[start_index:start_index + total_size])",
    )
    assert fixed != VC_LOADER
    ok = lint_project(tmp_path / "ok", {**files, "DatasetLoader.py": fixed})
    assert severities(ok, "DDP-SAMPLER") == [], ok
    # twin: a batch sampler over a DistributedSampler is split by that one
    wrapped = VC_LOADER.replace(
        "voxceleb_sampler(train_dataset, nPerSpeaker,",
        "voxceleb_sampler(torch.utils.data.DistributedSampler(train_dataset), nPerSpeaker,",
    )
    ok2 = lint_project(tmp_path / "ok2", {**files, "DatasetLoader.py": wrapped})
    assert severities(ok2, "DDP-SAMPLER") == [], ok2


# open-mmlab/mmagic (mmediting) @ f9abfb1e3e41cd900d4633769b4c0e114ecaa299,
# mmedit/models/restorers/basicvsr.py:36-95 (SPyNet frozen for `fix_iter` steps while
# `find_unused_parameters` is flipped on the generator: issue #273, PR #290 sets it in
# the config) and mmedit/apis/train.py:125-133 (the wrapper built from the config).
BV_MODEL = """\
import torch
from torch import nn


class BasicVSR(nn.Module):
    def __init__(self, generator, train_cfg=None):
        super().__init__()
        self.generator = generator
        self.fix_iter = train_cfg.get('fix_iter', 0) if train_cfg else 0
        self.generator.find_unused_parameters = False
        self.register_buffer('step_counter', torch.zeros(1))

    def train_step(self, data_batch, optimizer):
        # fix SPyNet and EDVR at the beginning
        if self.step_counter < self.fix_iter:
            if not self.generator.find_unused_parameters:
                self.generator.find_unused_parameters = True
                for k, v in self.generator.named_parameters():
                    if 'spynet' in k or 'edvr' in k:
                        v.requires_grad_(False)
        elif self.step_counter == self.fix_iter:
            # train all the parameters
            self.generator.find_unused_parameters = False
            self.generator.requires_grad_(True)

        loss = self.generator(data_batch['lq']).mean()
        optimizer['generator'].zero_grad()
        loss.backward()
        optimizer['generator'].step()
        self.step_counter += 1
        return {'loss': loss}
"""
BV_TRAIN = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from basicvsr import BasicVSR


def main(cfg, loader):
    dist.init_process_group(backend='nccl')
    local_rank = int(os.environ['LOCAL_RANK'])
    torch.cuda.set_device(local_rank)
    model = BasicVSR(torch.nn.Conv2d(3, 3, 3), cfg.train_cfg).cuda()
    find_unused_parameters = cfg.get('find_unused_parameters', False)
    model = DistributedDataParallel(model, device_ids=[local_rank], find_unused_parameters=find_unused_parameters)
    optimizer = {'generator': torch.optim.Adam(model.parameters())}
    for data_batch in loader:
        model.module.train_step(data_batch, optimizer)  # as mmcv's wrapper train_step does
"""


def test_find_unused_flipped_in_a_step_that_freezes_parameters(tmp_path: Path) -> None:
    files = {"train.py": BV_TRAIN, "basicvsr.py": BV_MODEL}
    bad = lint_project(tmp_path / "bad", files)
    assert ("basicvsr.py", 17, "warning") in severities(bad, "DDP-FIND-UNUSED"), bad
    # twin: PR #290 drops the flipping (the flag comes from the config, at the wrap)
    fixed = BV_MODEL.replace(
        "            if not self.generator.find_unused_parameters:\n"
        "                self.generator.find_unused_parameters = True\n",
        "            if True:\n",
    ).replace("            self.generator.find_unused_parameters = False\n", "")
    assert "find_unused_parameters = True" not in fixed
    ok = lint_project(tmp_path / "ok", {**files, "basicvsr.py": fixed})
    assert [x for x in severities(ok, "DDP-FIND-UNUSED") if x[0] == "basicvsr.py"] == [], ok


# POSTECH-CVLab/PyTorch-StudioGAN @ a2144aad0fea7e9c519b84662318926b2ed89a9b,
# src/utils/ckpt.py:29-30, 186-193 (two checkpoint loaders without map_location, each run
# by every DDP worker; commit 17e2ce2 maps both) and src/loader.py:37, 82 (the worker).
SG_CKPT = """\
from os.path import join

import torch


def load_ckpt(model, optimizer, ckpt_path, load_model=False, load_opt=False):
    ckpt = torch.load(ckpt_path)
    if load_model:
        model.load_state_dict(ckpt["state_dict"], strict=False)
    if load_opt:
        optimizer.load_state_dict(ckpt["optimizer"])


def load_GAN_train_test_model(model, mode, optimizer, RUN):
    ckpt_path = join(RUN.ckpt_dir, "model=C-{mode}-best-weights.pth".format(mode=mode))
    ckpt = torch.load(ckpt_path)

    model.load_state_dict(ckpt["state_dict"])
    optimizer.load_state_dict(ckpt["optimizer"])
    epoch_trained = ckpt["epoch"]
    return epoch_trained
"""
SG_WORKER = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import ckpt


def load_worker(local_rank, cfgs, gpus_per_node):
    dist.init_process_group("nccl", rank=local_rank, world_size=gpus_per_node)
    torch.cuda.set_device(local_rank)
    model = torch.nn.Linear(4, 4).cuda()
    optimizer = torch.optim.Adam(model.parameters())
    ckpt.load_ckpt(model, optimizer, cfgs.ckpt_path, load_model=True, load_opt=True)
    ckpt.load_GAN_train_test_model(model, "train", optimizer, cfgs.RUN)
    model = DDP(model, device_ids=[local_rank])
"""


def test_each_unmapped_checkpoint_loader_is_said(tmp_path: Path) -> None:
    files = {"train.py": SG_WORKER, "ckpt.py": SG_CKPT}
    bad = lint_project(tmp_path / "bad", files)
    lines = [(n, line) for n, line, _ in severities(bad, "DDP-LOAD-MAP-LOCATION")]
    assert lines == [("ckpt.py", 7), ("ckpt.py", 16)], bad
    # twin: commit 17e2ce2 maps both loads
    fixed = SG_CKPT.replace(
        "torch.load(ckpt_path)", "torch.load(ckpt_path, map_location=lambda storage, loc: storage)"
    )
    ok = lint_project(tmp_path / "ok", {**files, "ckpt.py": fixed})
    assert severities(ok, "DDP-LOAD-MAP-LOCATION") == [], ok
