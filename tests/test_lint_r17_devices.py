"""Round 17 (blind batches AI-AK, tuned after their scores): where a process's GPU and
its model are, each on the real lines (cited with repository and commit) beside twins that
must stay silent: `torch.cuda.device(i)` as a statement; `cuda:0` beside CUDA_VISIBLE_DEVICES
set to every GPU; device defaults for a missing index (warnings); a model built on the meta
device wrapped before it has storage; a scaler object called with the loss; a model that
moves itself in its constructor."""

from __future__ import annotations

from ddptui.lint import lint_source

# theolepage/sslsv @ 7336e157e504032a9a1a6f1ed91cc80b65947ed2 (as handed in blind batch AI2),
# train_distributed.py 1-8 and 11-37; fixed in 793bc69 (`torch.cuda.set_device(rank)`).
SSLSV = """\
import os

import torch
from torch.nn.parallel import DistributedDataParallel


def train(args):
    world_size = int(os.environ['WORLD_SIZE'])
    rank = int(os.environ["LOCAL_RANK"])

    torch.distributed.init_process_group(
        'nccl',
        rank=rank,
        world_size=world_size
    )
    torch.cuda.device(rank)

    model = load_model(config).to(rank)
    model = DistributedDataParallel(model, device_ids=[rank])
    for batch in loader:
        model(batch).sum().backward()
"""
CTX = next(i + 1 for i, line in enumerate(SSLSV.splitlines()) if "torch.cuda.device(rank)" in line)


def _picks(text: str) -> list[tuple[int, str]]:
    return [
        (f.line, f.severity)
        for f in lint_source(text, "train.py")
        if f.id == "DDP-INIT-BEFORE-SET-DEVICE"
    ]


def test_the_device_context_called_as_a_statement_picks_no_gpu() -> None:
    assert _picks(SSLSV) == [(CTX, "warning")]


def test_set_device_or_the_context_in_a_with_stays_silent() -> None:
    fixed = SSLSV.replace("torch.cuda.device(rank)", "torch.cuda.set_device(rank)")
    assert _picks(fixed) == []
    with_ = SSLSV.replace(
        "    torch.cuda.device(rank)\n\n    model = load_model(config).to(rank)\n",
        "    with torch.cuda.device(rank):\n        model = load_model(config).to(rank)\n",
    )
    assert _picks(with_) == []


# WenmuZhou/DBNet.pytorch @ dc21fd8a219b0592aaced71c284c3726d12f643d (as handed in blind
# batch AI2), tools/train.py 22-32 and 55-63, base/base_trainer.py 44-52 and 85-91 (cut);
# fixed in 5247f1b (the rank's device, device_ids=[local_rank]).
DBNET = """\
import os

import torch


class BaseTrainer:
    def __init__(self, config, model):
        self.config = config
        if len(self.config['trainer']['gpus']) > 0 and torch.cuda.is_available():
            self.with_cuda = True
            self.device = torch.device("cuda:0")
        else:
            self.device = torch.device("cpu")
        self.model = model.to(self.device)
        if self.config['distributed']:
            self.model = torch.nn.parallel.DistributedDataParallel(self.model)


def main(config, args):
    if torch.cuda.device_count() > 1:
        import torch.distributed as dist
        torch.cuda.set_device(args.local_rank)
        dist.init_process_group(backend='nccl', init_method='env://')
    trainer = BaseTrainer(config, build(config))
    for batch in loader:
        trainer.model(batch).sum().backward()


if __name__ == '__main__':
    args = init_args()
    config = load(args.config_path)
    os.environ['CUDA_VISIBLE_DEVICES'] = ','.join([str(i) for i in config['trainer']['gpus']])
    main(config, args)
"""
CUDA0 = next(i + 1 for i, line in enumerate(DBNET.splitlines()) if '"cuda:0"' in line)


def _hard(text: str) -> list[tuple[int, str]]:
    return [
        (f.line, f.severity)
        for f in lint_source(text, "train.py")
        if f.id == "DDP-HARDCODED-DEVICE" and "cuda:0" in f.summary
    ]


def test_visible_devices_set_to_every_gpu_does_not_excuse_cuda_0() -> None:
    assert _hard(DBNET) == [(CUDA0, "error")]


def test_one_visible_gpu_per_process_excuses_cuda_0() -> None:
    one = DBNET.replace(
        "','.join([str(i) for i in config['trainer']['gpus']])", "str(args.local_rank)"
    )
    assert _hard(one) == []


# NVIDIA/physicsnemo @ 94b355108c (as handed in blind batch AI4, a correct project):
# physicsnemo/datapipes/cae/mesh_datapipe.py 120-126 and physicsnemo/distributed/
# manager.py 95-104 (cut): defaults filled in where no device (or no index) was given.
PNEMO = """\
import torch
import torch.distributed as dist


class MeshDatapipe:
    def __init__(self, data_dir, device="cuda"):
        if isinstance(device, str):
            device = torch.device(device)
        # Need a index id if cuda
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda:0")
        self.device = device


class DistributedManager:
    def __init__(self):
        obj = self
        if not hasattr(obj, "_device"):
            obj._device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")

    def initialize(self):
        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        self._device = torch.device(f"cuda:{local_rank}")
        torch.cuda.set_device(self._device)


def main():
    dm = DistributedManager()
    dm.initialize()
    pipe = MeshDatapipe("data", device=dm._device)
    model = torch.nn.parallel.DistributedDataParallel(build().to(dm._device), device_ids=[dm._device])
    for batch in pipe:
        model(batch).sum().backward()
"""


def test_device_defaults_for_a_missing_index_or_attribute_are_warnings() -> None:
    found = [
        (f.severity, "not certain: a default" in f.summary)
        for f in lint_source(PNEMO, "train.py")
        if f.id == "DDP-HARDCODED-DEVICE"
    ]
    assert found == [("warning", True), ("warning", True)]


# ecmwf/WeatherGenerator @ 1582dc63ea82a5a2894269b627652b25bffd865c (as handed in blind
# batch AI1), src/weathergen/train/trainer.py 160-183 and 297-301 (cut); fixed in 0e154a1
# (PR #1227: the model materialised on its GPU before the DDP-only wrap).
WGEN = """\
import torch


class Trainer:
    def init_model_and_shard(self, cf, devices):
        with torch.device("meta"):
            model = Model(cf).create()

        if cf.with_ddp and not cf.with_fsdp:
            model = torch.nn.parallel.DistributedDataParallel(
                model,
                broadcast_buffers=True,
                find_unused_parameters=True,
            )
        return model

    def run(self, cf, devices):
        torch.distributed.init_process_group("nccl")
        self.model = self.init_model_and_shard(cf, devices)
        self.model.to_empty(device="cuda")
        self.model.reset_parameters()
"""
WRAP = next(i + 1 for i, line in enumerate(WGEN.splitlines()) if "DistributedDataParallel(" in line)


def _wrap(text: str) -> list[tuple[int, str]]:
    return [(f.line, f.severity) for f in lint_source(text, "train.py") if f.id == "DDP-WRAP-BEFORE-TO"]


def test_a_model_built_on_the_meta_device_and_wrapped_before_it_has_storage() -> None:
    assert _wrap(WGEN) == [(WRAP, "error")]


def test_materialised_first_or_built_on_a_gpu_stays_silent() -> None:
    fixed = WGEN.replace(
        "        if cf.with_ddp and not cf.with_fsdp:\n",
        "        model = model.to_empty(device=\"cuda\")\n        if cf.with_ddp and not cf.with_fsdp:\n",
    )
    assert _wrap(fixed) == []
    on_gpu = WGEN.replace('torch.device("meta")', 'torch.device("cuda")')
    assert _wrap(on_gpu) == []


# microsoft/Cream @ 4a13c4091e78f9abd2160e7e01c02e48c1cf8fb9 (as handed in blind batch AJ2,
# a correct project), AutoFormer/supernet_engine.py 26-31 and 64-100 (cut): timm's
# NativeScaler, handed in as `loss_scaler`, scales the float16 loss (it holds a GradScaler).
CREAM = """\
import torch


def train_one_epoch(model, criterion, data_loader, optimizer, device, loss_scaler, amp=True):
    model.train()
    for samples, targets in data_loader:
        if amp:
            with torch.cuda.amp.autocast():
                outputs = model(samples)
                loss = criterion(outputs, targets)
        else:
            outputs = model(samples)
            loss = criterion(outputs, targets)
        optimizer.zero_grad()
        if amp:
            loss_scaler(loss, optimizer, parameters=model.parameters())
        else:
            loss.backward()
            optimizer.step()
"""


def _amp(text: str) -> list[str]:
    return [f.severity for f in lint_source(text, "train.py") if f.id == "DDP-AUTOCAST-SCALER"]


def test_a_scaler_object_called_with_the_loss_is_a_scaler() -> None:
    assert _amp(CREAM) == []
    unscaled = CREAM.replace(
        "            loss_scaler(loss, optimizer, parameters=model.parameters())\n",
        "            loss.backward()\n            optimizer.step()\n",
    )
    assert _amp(unscaled) == ["error"]


# flairNLP/flair @ 0becfed167bcdd4a7104671ead854821529f1c24 (as handed in blind batch AK2, a
# correct project), flair/models/sequence_tagger_model.py 201-210 and flair/trainers/
# trainer.py 514-521 (cut): the model moves itself to its device in its constructor.
FLAIR = """\
import torch
from torch.nn.parallel import DistributedDataParallel

import flair


class SequenceTagger(torch.nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.linear = torch.nn.Linear(hidden_size, 2)
        self.to(flair.device)


def train(corpus):
    torch.distributed.init_process_group("nccl")
    model = SequenceTagger(256)
    ddp_model = DistributedDataParallel(model, device_ids=[flair.device.index], find_unused_parameters=True)
    for batch in corpus:
        ddp_model(batch).sum().backward()
"""


def test_a_model_that_moves_itself_in_its_constructor_is_on_its_device() -> None:
    assert _wrap(FLAIR) == []
    stays = FLAIR.replace("        self.to(flair.device)\n", "")
    assert [sev for _, sev in _wrap(stays)] == ["error"]
