"""Round 27: blind batch T's five false errors on correct projects, each on the real lines
(cited with repository and commit) beside a twin where the plain pitfall stays an error."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

# autonomousvision/transfuser @ 22b3ccdb7e806b42c9be2aa476b71546e8ec3620,
# team_code_transfuser/train.py:127-136 (the model built with its device, wrapped, then
# model.cuda(device) again).
TRANSFUSER = """\
import os
import torch
import torch.distributed as dist
from model import LidarCenterNet


def main(args, config):
    local_rank = int(os.environ['LOCAL_RANK'])
    device = torch.device('cuda:{}'.format(local_rank))
    torch.cuda.set_device(device)
    dist.init_process_group(backend='nccl')
    model = LidarCenterNet({ARGS})
    if(bool(args.sync_batch_norm) == True):
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank],
        output_device=local_rank, broadcast_buffers=False, find_unused_parameters=False)

    model.cuda(device=device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    for x in range(10):
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
"""
TF_MODEL = """\
import torch.nn as nn


class LidarCenterNet(nn.Module):
    def __init__(self, config, device=None, backbone=None):
        super().__init__()
        self.device = device
        self.net = nn.Linear(4, 4)
        if device is not None:
            self.net = self.net.to(device)

    def forward(self, x):
        return self.net(x)
"""


def test_transfuser_model_built_with_its_device(tmp_path: Path) -> None:
    files = {"model.py": TF_MODEL}
    ok = lint_project(
        tmp_path / "ok",
        {**files, "train.py": TRANSFUSER.replace("{ARGS}", "config, device, args.backbone")},
    )
    assert severities(ok, "DDP-WRAP-BEFORE-TO") == [("train.py", 15, "warning")], ok
    assert any("built with `device`" in f.summary for f in ok)
    # twin: the model built without a device, moved only after the wrap: the error stands
    bad = lint_project(
        tmp_path / "bad", {**files, "train.py": TRANSFUSER.replace("{ARGS}", "config")}
    )
    assert severities(bad, "DDP-WRAP-BEFORE-TO") == [("train.py", 15, "error")], bad


# yoxu515/aot-benchmark @ 601c138435a1764eb01404f3495b914e6e2e8eca,
# networks/managers/trainer.py:46-73 (DDP wraps the engine built around a model already
# moved to the GPU, given gpu_id).
AOT = """\
import torch
import torch.distributed as dist
import torch.nn as nn
from engines import build_engine
from models import build_vos_model


class Trainer(object):
    def __init__(self, rank, cfg):
        self.gpu = rank
        torch.cuda.set_device(self.gpu)
        self.model = build_vos_model(cfg).cuda(self.gpu)
        self.engine = build_engine({ENGINE})
        dist.init_process_group(backend='nccl', world_size=cfg.TRAIN_GPUS, rank=rank)
        self.dist_engine = torch.nn.parallel.DistributedDataParallel(
            self.engine,
            device_ids=[self.gpu],
            output_device=self.gpu,
            find_unused_parameters=True,
            broadcast_buffers=False)

    def train(self, loader):
        opt = torch.optim.SGD(self.dist_engine.parameters(), lr=0.1)
        for x in loader:
            opt.zero_grad()
            self.dist_engine(x).sum().backward()
            opt.step()
"""
AOT_ENGINES = """\
import torch.nn as nn


class AOTEngine(nn.Module):
    def __init__(self, aot_model, gpu_id=0):
        super().__init__()
        self.AOT = aot_model
        self.gpu_id = gpu_id
        self.head = nn.Linear(4, 4)

    def forward(self, x):
        return self.head(self.AOT(x))


def build_engine(aot_model=None, gpu_id=0):
    return AOTEngine(aot_model, gpu_id=gpu_id)
"""
AOT_MODELS = """\
import torch.nn as nn


class VOS(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(4, 4)

    def forward(self, x):
        return self.encoder(x)


def build_vos_model(cfg):
    return VOS()
"""


def test_aot_engine_built_with_gpu_id(tmp_path: Path) -> None:
    files = {"engines.py": AOT_ENGINES, "models.py": AOT_MODELS}
    # trimmed: the engine given a model built here and the GPU index (the real one's
    # model was moved first; the device argument alone leaves the reading uncertain)
    engine = "aot_model=build_vos_model(None), gpu_id=self.gpu"
    ok = lint_project(tmp_path / "ok", {**files, "train.py": AOT.replace("{ENGINE}", engine)})
    assert severities(ok, "DDP-WRAP-BEFORE-TO") == [("train.py", 15, "warning")], ok
    assert any("gpu_id=self.gpu" in f.summary for f in ok)
    # twin: the engine built from a model never moved, with no device: the error stands
    bad_text = AOT.replace("{ENGINE}", "aot_model=build_vos_model(None)")
    plain = {"engines.py": AOT_ENGINES.replace(", gpu_id=gpu_id)", ")"), "models.py": AOT_MODELS}
    bad = lint_project(tmp_path / "bad", {**plain, "train.py": bad_text})
    assert severities(bad, "DDP-WRAP-BEFORE-TO") == [("train.py", 15, "error")], bad


# wenet-e2e/wekws @ 1a8ee651620f49a8a7779be4d30668157fc23350, wekws/bin/train.py:99-127
# (the dataset from the external wenet package yields its own batches and shards by rank).
WEKWS = """\
import os
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from wenet.dataset.init_dataset import init_dataset


def main(args, train_conf):
    rank = int(os.environ['LOCAL_RANK'])
    torch.cuda.set_device(rank)
    dist.init_process_group(backend='nccl')
    train_dataset = init_dataset(data_list_file=args.train_data, conf=train_conf)
    train_data_loader = DataLoader(train_dataset,
                                   {BATCH},
                                   pin_memory=args.pin_memory,
                                   num_workers=args.num_workers)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4).cuda())
    opt = torch.optim.Adam(model.parameters())
    for epoch in range(10):
        for x in train_data_loader:
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
"""


def test_wekws_loader_without_batching(tmp_path: Path) -> None:
    ok = lint_project(tmp_path / "ok", {"train.py": WEKWS.replace("{BATCH}", "batch_size=None")})
    assert severities(ok, "DDP-SAMPLER") == [("train.py", 13, "warning")], ok
    assert any("batch_size=None" in f.summary for f in ok)
    # twin: a loader that batches a dataset itself: the error stands
    bad = lint_project(tmp_path / "bad", {"train.py": WEKWS.replace("{BATCH}", "batch_size=32")})
    assert severities(bad, "DDP-SAMPLER") == [("train.py", 13, "error")], bad


# soda-inria/tabicl @ 8f1aa2098c894ab91dba15209cf2002ba4be6c6c: src/tabicl/_model/
# encoders.py:76-145 (Encoder.blocks, a ModuleList) and interaction.py:89-152 (the owner
# runs `self.tf_row.blocks[:-1]` and `self.tf_row.blocks[-1]` directly).
TABICL = """\
import os
import torch
import torch.distributed as dist
from model import TabICL


def main():
    local_rank = int(os.environ['LOCAL_RANK'])
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend='nccl')
    model = TabICL().cuda()
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank], broadcast_buffers=False)
    opt = torch.optim.Adam(model.parameters())
    for x in range(10):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
"""
TABICL_MODEL = """\
import torch.nn as nn


class Encoder(nn.Module):
    def __init__(self, num_blocks, d_model):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(d_model, d_model) for _ in range(num_blocks)])
        self.rope = None

    def forward(self, src):
        out = src
        for block in self.blocks:
            out = block(out)
        return out


class TabICL(nn.Module):
    def __init__(self):
        super().__init__()
        self.tf_row = Encoder(3, 8)

    def forward(self, x):
        rope = self.tf_row.rope
{USE}
"""
_DIRECT = """\
        for block in self.tf_row.blocks[:-1]:
            x = block(x)
        last_block = self.tf_row.blocks[-1]
        return last_block(x)
"""


def test_tabicl_child_layers_run_directly(tmp_path: Path) -> None:
    model = TABICL_MODEL.replace("{USE}", _DIRECT)
    ok = lint_project(tmp_path / "ok", {"train.py": TABICL, "model.py": model})
    assert not severities(ok, "DDP-FIND-UNUSED"), ok
    # twin: the owner reads only a plain attribute of the encoder and never runs its
    # blocks: they take no part in the loss, the error stands
    unused = TABICL_MODEL.replace("{USE}", "        return x * 2 if rope is None else x\n")
    bad = lint_project(tmp_path / "bad", {"train.py": TABICL, "model.py": unused})
    assert [s for _, _, s in severities(bad, "DDP-FIND-UNUSED")] == ["error"], bad


# Hzfinfdu/Diffusion-BERT @ 19d7f494f6eab7f104098873095871d172a879b6: sample.py:18-25
# (WholeWordMasking fixes cuda:0) and DDP_main.py:113-118 (built only for
# --sample_strategy wwm; the default is Categorical).
DBERT = """\
import os
import torch
import torch.distributed as dist
from sample import Categorical, WholeWordMasking


def main(args, tokenizer):
    local_rank = int(os.environ['LOCAL_RANK'])
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend='nccl')
{CHOOSE}
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4).cuda(), device_ids=[local_rank])
    return model, sample_cls
"""
DBERT_SAMPLE = """\
import torch


class Categorical:
    def sample(self, logits):
        return torch.distributions.categorical.Categorical(logits=logits).sample()


class WholeWordMasking:
    def __init__(self, tokenizer):
        self.dim = tokenizer.vocab_size
        self.post_tokens = torch.zeros(size=(tokenizer.vocab_size,), device='cuda:0', dtype=torch.long)

    def sample(self, logits, x_0):
        return (self.post_tokens * x_0).sum(-1)
"""
_CHOOSE = """\
    if args.sample_strategy == 'Categorical':
        sample_cls = Categorical()
    elif args.sample_strategy == 'wwm':
        sample_cls = WholeWordMasking(tokenizer)
    else:
        raise ValueError
"""


def test_diffusion_bert_fixed_gpu_in_an_optional_strategy(tmp_path: Path) -> None:
    files = {"sample.py": DBERT_SAMPLE}
    ok = lint_project(tmp_path / "ok", {**files, "train.py": DBERT.replace("{CHOOSE}", _CHOOSE)})
    assert severities(ok, "DDP-HARDCODED-DEVICE") == [("sample.py", 12, "warning")], ok
    assert any("sample_strategy == 'wwm'" in f.summary for f in ok)
    # twin: the class built on every run: the error stands
    always = "    sample_cls = WholeWordMasking(tokenizer)"
    bad = lint_project(tmp_path / "bad", {**files, "train.py": DBERT.replace("{CHOOSE}", always)})
    assert severities(bad, "DDP-HARDCODED-DEVICE") == [("sample.py", 12, "error")], bad
