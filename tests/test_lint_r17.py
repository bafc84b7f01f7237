"""Round 17 (misses of blind batches AH1 and AH2, tuned after their scores), each on the
real lines (cited with repository and commit) beside twins that must stay silent: a
closure that reads the model after the wrap (DDP-WRAPPER-ATTR); a device "cuda" with no
index in a project that never sets the current GPU but places the rest by rank
(DDP-HARDCODED-DEVICE); a module imported by bare name from the entry's folder, and
both arms of `if ...: from a import f` / `else: from b import f` followed."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

from ddptui.lint import lint_source

# neulab/awesome-align @ 19f002f4dada0cb6cd1a4ff81920c57f2b9f965e (as handed in blind
# batch AH2), awesome_align/run_train.py 161-165, 234, 238-241, 271-279, 300-305; fixed by
# PR #12 (`model.module.get_aligned_word` when wrapped).
ALIGN = """\
import torch
from torch.utils.data import DataLoader, RandomSampler
from torch.utils.data.distributed import DistributedSampler


class BertForMaskedLM(torch.nn.Module):  # modeling.py: the project's model defines it
    def get_aligned_word(self, inputs_src, inputs_tgt, device, align_layer=8):
        return []


def train(args, train_dataset, model, tokenizer):
    def collate(examples):
        model.eval()
        examples_src, examples_tgt = [], []
        guides = model.get_aligned_word(examples_src, examples_tgt, args.device, align_layer=args.align_layer)
        return examples_src, examples_tgt, guides

    train_sampler = RandomSampler(train_dataset) if args.local_rank == -1 else DistributedSampler(train_dataset)
    train_dataloader = DataLoader(
        train_dataset, sampler=train_sampler, batch_size=args.train_batch_size, collate_fn=collate
    )
    if args.local_rank != -1:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[args.local_rank], output_device=args.local_rank, find_unused_parameters=True
        )
    for _ in range(int(args.num_train_epochs)):
        train_sampler.set_epoch(_)
        for step, batch in enumerate(train_dataloader):
            model.train()
            loss = model(batch[0], batch[1], guides=batch[2])
            loss.backward()
"""
READ = next(i + 1 for i, line in enumerate(ALIGN.splitlines()) if "model.get_aligned_word" in line)


def _attr(text: str) -> list[tuple[int, str]]:
    return [(f.line, f.severity) for f in lint_source(text, "train.py") if f.id == "DDP-WRAPPER-ATTR"]


def test_a_closure_called_by_the_loader_after_the_wrap_reads_the_wrapper() -> None:
    assert _attr(ALIGN) == [(READ, "error")]


def test_the_fix_and_a_closure_with_its_own_model_stay_silent() -> None:
    fixed = ALIGN.replace("guides = model.get_aligned_word(", "guides = model.module.get_aligned_word(")
    assert _attr(fixed) == []
    own = ALIGN.replace("def collate(examples):", "def collate(examples, model=model):")
    assert _attr(own) == []


def test_a_closure_called_only_before_the_wrap_stays_silent() -> None:
    # the closure runs at once, while `model` is still the plain model
    early = ALIGN.replace(
        "    train_sampler = RandomSampler",
        "    first = collate([])\n    train_sampler = RandomSampler",
    ).replace("collate_fn=collate", "collate_fn=None")
    assert _attr(early) == []


def test_a_name_rebound_after_the_wrap_stays_silent() -> None:
    # `model = model.module` before the loop: what the closure sees is not the wrapper
    rebound = ALIGN.replace(
        "    for _ in range(int(args.num_train_epochs)):",
        "    model = model.module\n    for _ in range(int(args.num_train_epochs)):",
    )
    assert _attr(rebound) == []


# yeyupiaoling/VoiceprintRecognition-Pytorch @ 532f8bd5e73790a5ace4de11fd9d11736ae456cb (as
# handed in blind batch AH2), mvector/trainer.py 33-58, 223-236, 290-313; fixed in 074281c
# (the featurizer moved to the rank's device).
VOICE = """\
import os

import torch
import torch.distributed as dist

from mvector.data_utils.featurizer import AudioFeaturizer


class MVectorTrainer(object):
    def __init__(self, configs, use_gpu=True):
        if use_gpu:
            assert (torch.cuda.is_available()), 'GPU unavailable'
            self.device = torch.device("cuda")
        else:
            os.environ['CUDA_VISIBLE_DEVICES'] = '-1'
            self.device = torch.device("cpu")
        self.configs = configs
        self.model = None
        self.audio_featurizer = AudioFeaturizer(feature_conf=self.configs.feature_conf)
        self.audio_featurizer.to(self.device)

    def __train_epoch(self, epoch_id, local_rank, nranks=0):
        for batch_id, (audio, label, input_lens_ratio) in enumerate(self.train_loader):
            if nranks > 1:
                audio = audio.to(local_rank)
                input_lens_ratio = input_lens_ratio.to(local_rank)
                label = label.to(local_rank).long()
            else:
                audio = audio.to(self.device)
                input_lens_ratio = input_lens_ratio.to(self.device)
                label = label.to(self.device).long()
            features, _ = self.audio_featurizer(audio, input_lens_ratio)
            output = self.model(features)
            los = self.loss(output, label)
            los.backward()
            self.optimizer.step()

    def train(self, epochs):
        nranks = torch.cuda.device_count()
        local_rank = 0
        if nranks > 1:
            dist.init_process_group(backend='nccl')
            local_rank = int(os.environ["LOCAL_RANK"])
        self.model = build(self.configs)
        if nranks > 1:
            self.model.to(local_rank)
            self.model = torch.nn.parallel.DistributedDataParallel(self.model, device_ids=[local_rank])
        for epoch_id in range(epochs):
            self.__train_epoch(epoch_id, local_rank, nranks)


if __name__ == "__main__":
    MVectorTrainer({}).train(10)
"""
MOVE = next(
    i + 1 for i, line in enumerate(VOICE.splitlines()) if "audio_featurizer.to(self.device)" in line
)


def _device(text: str) -> list[tuple[int, str]]:
    return [
        (f.line, f.severity)
        for f in lint_source(text, "train.py")
        if f.id == "DDP-HARDCODED-DEVICE" and "current GPU" in f.summary
    ]


def test_a_plain_cuda_device_beside_the_ranks_gpu_is_said_where_it_is_used() -> None:
    assert _device(VOICE) == [(MOVE, "warning")]


def test_set_device_or_an_indexed_device_stays_silent() -> None:
    picked = VOICE.replace(
        "            local_rank = int(os.environ[\"LOCAL_RANK\"])\n",
        "            local_rank = int(os.environ[\"LOCAL_RANK\"])\n"
        "            torch.cuda.set_device(local_rank)\n",
    )
    assert _device(picked) == []
    indexed = VOICE.replace(
        'self.device = torch.device("cuda")',
        'self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))',
    )
    assert _device(indexed) == []


def test_a_project_that_names_no_gpu_per_rank_stays_silent() -> None:
    # every process on the current GPU, and nothing placed by rank: another rule's case
    plain = VOICE.replace("self.model.to(local_rank)", "self.model.to(self.device)").replace(
        ", device_ids=[local_rank]", ""
    ).replace(".to(local_rank)", ".to(self.device)")
    assert _device(plain) == []


# caizhongang/SMPLer-X @ 07d9834450f78241e243bdd1d3f28bbd39749899 (as handed in blind batch
# AH1), main/train.py, common/base.py 9-14, main/OSX.py 436-441, main/OSX_WoDecoder.py
# 373-377 (cut down; fixed in cad7deb: map_location on both loads). common/base.py imports
# `OSX` by bare name: it is found because main/train.py, its sibling, is the script run.
SMPLER_TRAIN = """\
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from base import Trainer


def main():
    trainer = Trainer()
    trainer._make_model()
    for epoch in range(10):
        for itr, batch in enumerate(trainer.batch_generator):
            loss = trainer.model(batch)
            loss.backward()


if __name__ == "__main__":
    main()
"""
SMPLER_BASE = """\
import os

import torch
import torch.distributed as dist
from config import cfg
if not cfg.agora_benchmark:
    from OSX import get_model
else:
    from OSX_WoDecoder import get_model


class Trainer:
    def _make_model(self):
        dist.init_process_group(backend="nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = get_model("train")
        model = torch.nn.parallel.DistributedDataParallel(model.cuda(), device_ids=[local_rank])
        self.model = model
"""
SMPLER_CONFIG = "class Config:\n    agora_benchmark = False\n\n\ncfg = Config()\n"
SMPLER_OSX = """\
import torch


def get_model(mode):
    vit = build_vit()
    if mode == 'train':
        encoder_pretrained_model_path = torch.load(cfg.encoder_pretrained_model_path)['state_dict']
        vit.load_state_dict(encoder_pretrained_model_path, strict=False)
    return vit
"""


def test_both_arms_of_a_rebound_import_and_the_entrys_siblings_are_followed(
    tmp_path: Path,
) -> None:
    files = {
        "main/train.py": SMPLER_TRAIN,
        "main/config.py": SMPLER_CONFIG,
        "common/base.py": SMPLER_BASE,
        "main/OSX.py": SMPLER_OSX,
        "main/OSX_WoDecoder.py": SMPLER_OSX.replace("encoder_pretrained_model_path =", "enc ="),
    }
    found = severities(lint_project(tmp_path, files, "main/train.py"), "DDP-LOAD-MAP-LOCATION")
    assert sorted(found) == [("OSX.py", 7, "warning"), ("OSX_WoDecoder.py", 7, "warning")]


def test_the_fixed_loads_stay_silent(tmp_path: Path) -> None:
    fixed = SMPLER_OSX.replace(
        "torch.load(cfg.encoder_pretrained_model_path)",
        "torch.load(cfg.encoder_pretrained_model_path, map_location='cpu')",
    )
    files = {
        "main/train.py": SMPLER_TRAIN,
        "main/config.py": SMPLER_CONFIG,
        "common/base.py": SMPLER_BASE,
        "main/OSX.py": fixed,
        "main/OSX_WoDecoder.py": fixed,
    }
    found = severities(lint_project(tmp_path, files, "main/train.py"), "DDP-LOAD-MAP-LOCATION")
    assert found == []


# RUCAIBox/TextBox @ 040b65c0767eab860bc02393b0b58ebe74012648 (as handed in blind batch
# AH2): run_textbox.py 7-23, textbox/quick_start/quick_start.py 19-25 and 28-64 (cut),
# textbox/utils/logger.py 14-31 and 55-58 (cut); fixed in 2453775 (`init_logger` on rank 0
# only). The entry is a thin launcher: a guard around its `run_textbox(...)` would skip the
# training too, so the finding names the call inside the run.
TB_ENTRY = """\
import argparse

from textbox.quick_start import run_textbox

if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--model', '-m', type=str, default='RNN', help='name of models')
    args, _ = parser.parse_known_args()
    run_textbox(model=args.model, config_dict={})
"""
TB_QUICK = """\
import torch
from logging import getLogger
from textbox.utils.logger import init_logger


def run_textbox(model=None, config_dict=None):
    config = dict(config_dict)
    if (config['DDP'] == True):
        local_rank = torch.distributed.get_rank()
        torch.cuda.set_device(local_rank)
        config['device'] = torch.device("cuda", local_rank)
    # logger initialization
    init_logger(config)
    logger = getLogger()
    logger.info(config)
    sig_model = build(config).to(config['device'])
    if (config['DDP'] == True):
        model = torch.nn.parallel.DistributedDataParallel(sig_model, device_ids=[local_rank], output_device=local_rank)
    else:
        model = sig_model
    for batch in loader:
        model(batch).sum().backward()
"""
TB_LOGGER = """\
import logging
import os


def init_logger(config):
    LOGROOT = './log/'
    os.makedirs(LOGROOT, exist_ok=True)
    logfilepath = os.path.join(LOGROOT, config['filename'] + '.log')
    fh = logging.FileHandler(logfilepath)
    sh = logging.StreamHandler()
    logging.basicConfig(level=logging.INFO, handlers=[fh, sh])
"""
TB_CALL = next(i + 1 for i, line in enumerate(TB_QUICK.splitlines()) if "init_logger(config)" in line)


def _tb(tmp_path: Path, quick: str) -> list[tuple[str, int, str]]:
    files = {
        "run_textbox.py": TB_ENTRY,
        "textbox/__init__.py": "",
        "textbox/quick_start/__init__.py": "from textbox.quick_start.quick_start import run_textbox\n",
        "textbox/quick_start/quick_start.py": quick,
        "textbox/utils/__init__.py": "",
        "textbox/utils/logger.py": TB_LOGGER,
    }
    return severities(lint_project(tmp_path, files, "run_textbox.py"), "DDP-ALL-RANKS-IO")


def test_a_write_reached_through_a_launcher_is_said_inside_the_run(tmp_path: Path) -> None:
    assert _tb(tmp_path / "a", TB_QUICK) == [("quick_start.py", TB_CALL, "warning")]


def test_the_fix_on_rank_zero_stays_silent(tmp_path: Path) -> None:
    fixed = TB_QUICK.replace(
        "    init_logger(config)\n",
        "    if not config['DDP'] or torch.distributed.get_rank() == 0:\n        init_logger(config)\n",
    )
    assert _tb(tmp_path / "b", fixed) == []


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


# NVIDIA/physicsnemo @ 94b355108c (blind batch AI4, correct): examples/cfd/
# vortex_shedding_mgn/train.py 206-212 and physicsnemo/utils/checkpoint.py 724-733 and
# 816-845 (cut): rank 0 alone calls save_checkpoint, whose barrier runs only for FSDP models.
VORTEX = """\
import torch
import torch.distributed


def save_checkpoint(path, models=None, optimizer=None, epoch=None):
    is_distributed = False
    if models:
        if not isinstance(models, list):
            models = [models]
        is_distributed = any(_is_distributed_model(m) for m in models)
    if is_distributed:
        torch.distributed.barrier()
    torch.save({"epoch": epoch}, path)


def main(dist, trainer, cfg):
    model = torch.nn.parallel.DistributedDataParallel(trainer.model, device_ids=[dist.local_rank])
    for epoch in range(cfg.epochs):
        for graph in trainer.dataloader:
            model(graph).sum().backward()
        if dist.world_size > 1:
            torch.distributed.barrier()
        if dist.rank == 0:
            save_checkpoint(cfg.ckpt_path, models=model, epoch=epoch)
"""


def test_a_barrier_the_callees_arguments_gate_is_a_warning() -> None:
    found = [
        (f.severity, "which the arguments decide" in f.summary)
        for f in lint_source(VORTEX, "train.py")
        if f.id == "DDP-RANK-DIVERGENCE"
    ]
    assert found == [("warning", True)]
    ungated = VORTEX.replace("    if is_distributed:\n        torch.distributed.barrier()\n",
                             "    torch.distributed.barrier()\n")
    assert [
        f.severity for f in lint_source(ungated, "train.py") if f.id == "DDP-RANK-DIVERGENCE"
    ] == ["error"]


# WenmuZhou/DBNet.pytorch @ bd4ce4888b7f9be08b12c5d75c2a3995cf57510c (as handed in blind
# batch AI2), base/base_trainer.py 16-17, 71-73 and 96-109 (cut); fixed in 0c8ec35 (the
# close under the rank test too).
DBLOG = """\
import torch
import torch.distributed as dist


class BaseTrainer:
    def __init__(self, config, model):
        self.config = config
        self.tensorboard_enable = config['trainer']['tensorboard']
        self.model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[config['local_rank']])
        if self.tensorboard_enable and config['local_rank'] == 0:
            from torch.utils.tensorboard import SummaryWriter
            self.writer = SummaryWriter(config['save_dir'])

    def train(self):
        for epoch in range(1, 10):
            for batch in self.loader:
                loss = self.model(batch).sum()
                loss.backward()
                if self.tensorboard_enable and self.config['local_rank'] == 0:
                    self.writer.add_scalar('TRAIN/LOSS', loss.item(), epoch)
        if self.tensorboard_enable:
            self.writer.close()


def main(config):
    dist.init_process_group("nccl")
    BaseTrainer(config, build()).train()
"""
CLOSE = next(i + 1 for i, line in enumerate(DBLOG.splitlines()) if "self.writer.close()" in line)


def _only(text: str) -> list[tuple[int, str]]:
    return [
        (f.line, f.severity) for f in lint_source(text, "train.py") if f.id == "DDP-RANK-ONLY-NAME"
    ]


def test_an_attribute_set_on_rank_zero_only_and_read_on_every_rank_is_an_error() -> None:
    assert _only(DBLOG) == [(CLOSE, "error")]


def test_the_fix_a_default_or_a_test_of_the_attribute_stays_silent() -> None:
    fixed = DBLOG.replace(
        "        if self.tensorboard_enable:\n            self.writer.close()",
        "        if self.tensorboard_enable and self.config['local_rank'] == 0:\n"
        "            self.writer.close()",
    )
    assert _only(fixed) == []
    default = DBLOG.replace(
        "        if self.tensorboard_enable and config['local_rank'] == 0:\n",
        "        self.writer = None\n        if self.tensorboard_enable and config['local_rank'] == 0:\n",
    )
    assert _only(default) == []
    tested = DBLOG.replace(
        "        if self.tensorboard_enable:\n", '        if hasattr(self, "writer"):\n'
    )
    assert _only(tested) == []
    # `if self.writer:` reads it too: the test itself raises on the other ranks
    bare = DBLOG.replace("        if self.tensorboard_enable:\n", "        if self.writer:\n")
    assert _only(bare) == [(CLOSE - 1, "error")]
    outside = DBLOG + "\n\ndef attach(trainer, writer):\n    trainer.writer = writer\n"
    assert _only(outside) == []


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


# usnistgov/alignn @ 12f664f1a93a16b8fa6e7a5a10234652daef56cd (as handed in blind batch AI1),
# alignn/data.py 118-126, 167-184, 355-366 and 441-497 (cut): the loaders come from a saved
# file when one exists, else they are built on rank 0 only, and are read on every rank;
# fixed in 575216b (built on every rank).
ALIGNN = """\
import os

import torch
from torch.utils.data.distributed import DistributedSampler


def get_train_val_loaders(dataset, output_dir, world_size=0, rank=0, save_dataloader=False):
    train_sample = os.path.join(output_dir, "train_data.pt")
    if os.path.exists(train_sample):
        train_loader = torch.load(train_sample)
    else:
        train_sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
        if rank == 0:
            train_data = get_torch_dataset(dataset)
            train_loader = GraphDataLoader(train_data, sampler=train_sampler)
            if save_dataloader:
                torch.save(train_loader, train_sample)
    print("n_train:", len(train_loader.dataset))
    return train_loader
"""
AL_BIND = next(i + 1 for i, line in enumerate(ALIGNN.splitlines()) if "GraphDataLoader(" in line)
AL_TEST = next(i + 1 for i, line in enumerate(ALIGNN.splitlines()) if "if rank == 0:" in line)
AL_READ = next(i + 1 for i, line in enumerate(ALIGNN.splitlines()) if '"n_train:"' in line)


def test_a_name_bound_on_rank_zero_on_one_path_is_said_with_its_test_and_read() -> None:
    found = [f for f in lint_source(ALIGNN, "data.py") if f.id == "DDP-RANK-ONLY-NAME"]
    assert [(f.line, f.severity) for f in found] == [(AL_BIND, "error")]
    assert [line for _, line in found[0].lines()] == [AL_BIND, AL_TEST, AL_READ]


def test_bound_on_every_rank_on_each_path_stays_silent() -> None:
    other = ALIGNN.replace(
        "            if save_dataloader:\n",
        "        else:\n            train_loader = None\n        if save_dataloader and rank == 0:\n",
    )
    assert _only(other) == []
    leaves = ALIGNN.replace(
        "        if rank == 0:\n",
        "        if rank != 0:\n            return None\n        if rank == 0:\n",
    )
    assert _only(leaves) == []
    everywhere = ALIGNN.replace("        if rank == 0:\n", "        if True:\n")
    assert _only(everywhere) == []


def _not_applied(text: str) -> list[tuple[int, str]]:
    return [(f.line, f.severity) for f in lint_source(text, "train.py") if f.id == "DDP-NOT-APPLIED"]


# NCAR/miles-credit @ 92e7454b6366867b873e6cf09d206261bf8d3bbb (as handed in blind batch
# AI1), credit/trainers/base_trainer.py 46-54, credit/trainers/trainer.py (a subclass's train step, cut),
# credit/distributed.py 138-164 (cut) and applications/train.py 560-583 (cut); fixed by
# PR #153, c820b44 (the trainer keeps the wrapper).
CREDIT = """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP


class BaseTrainer:
    def __init__(self, model: torch.nn.Module, rank: int, module: bool = False):
        super(BaseTrainer, self).__init__()
        self.model = model.module if module else model
        self.rank = rank


class Trainer(BaseTrainer):
    def train_one_epoch(self, loader, optimizer):
        for batch in loader:
            loss = self.model(batch).mean()
            loss.backward()
            optimizer.step()


def distributed_model_wrapper(conf, neural_network, device):
    if conf["trainer"]["mode"] == "ddp":
        model = DDP(neural_network, device_ids=[device])
    else:
        model = neural_network
    return model


trainer_types = {"standard": Trainer}


def main(conf, m, device, rank, loader, optimizer):
    torch.distributed.init_process_group("nccl")
    model = distributed_model_wrapper(conf, m, device)
    trainer_cls = trainer_types[conf["trainer"]["type"]]
    trainer = trainer_cls(model, rank, module=(conf["trainer"]["mode"] == "ddp"))
    trainer.train_one_epoch(loader, optimizer)
"""
KEEP = next(i + 1 for i, line in enumerate(CREDIT.splitlines()) if "model.module if module" in line)


def test_a_trainer_that_keeps_the_model_inside_the_wrapper_trains_it_bare() -> None:
    assert _not_applied(CREDIT) == [(KEEP, "error")]


def test_the_fix_or_an_unwrapped_copy_not_trained_stays_silent() -> None:
    fixed = CREDIT.replace("model.module if module else model", "model")
    assert _not_applied(fixed) == []
    # the usual correct shape: the bare model kept beside the wrapper, for saving
    kept = CREDIT.replace(
        "        self.model = model.module if module else model\n",
        "        self.model = model\n        self.model_without_ddp = model.module if module else model\n",
    )
    assert _not_applied(kept) == []
    off = CREDIT.replace('module=(conf["trainer"]["mode"] == "ddp")', "module=False")
    assert _not_applied(off) == []


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


# neuralmagic/sparseml @ cdca9b94ccdf885eb113e9469d7831ec31d67aa1 (as handed in blind batch
# AJ2), src/sparseml/pytorch/utils/helpers.py 789-800 and scripts/pytorch_vision.py 895-912
# (cut): the val dataset is built only on the main process, inside the zero-first helper,
# whose closing barrier rank 0 then waits in alone; fixed in b0fc815.
ZERO_FIRST = """\
from contextlib import contextmanager

import torch


@contextmanager
def torch_distributed_zero_first(local_rank: int):
    if local_rank not in [-1, 0]:
        torch.distributed.barrier()
    yield
    if local_rank == 0:
        torch.distributed.barrier()
"""
SPARSEML = ZERO_FIRST + """

def _create_val_dataset_and_loader(args, image_size):
    if not (args.is_main_process and args.dataset != "imagefolder"):
        return None, None  # val dataset not needed
    with torch_distributed_zero_first(args.local_rank):  # only download once locally
        val_dataset = DatasetRegistry.create(args.dataset, root=args.dataset_path, train=False)
    return val_dataset, None


def main(args, model):
    torch.distributed.init_process_group("nccl")
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.local_rank])
    val_dataset, _ = _create_val_dataset_and_loader(args, 224)
    for batch in loader:
        model(batch).sum().backward()
"""
ZF = next(i + 1 for i, line in enumerate(SPARSEML.splitlines()) if "with torch_distributed_zero_first(args" in line)


def _div(text: str) -> list[tuple[int, str]]:
    return [(f.line, f.severity) for f in lint_source(text, "train.py") if f.id == "DDP-RANK-DIVERGENCE"]


def test_a_zero_first_helper_entered_by_rank_zero_alone_hangs() -> None:
    assert _div(SPARSEML) == [(ZF, "error")]


def test_every_rank_entering_it_or_the_single_process_rank_stays_silent() -> None:
    every = SPARSEML.replace(
        '    if not (args.is_main_process and args.dataset != "imagefolder"):\n'
        "        return None, None  # val dataset not needed\n",
        "",
    )
    assert _div(every) == []
    # ultralytics/yolov5's val loader: built on rank 0 with rank=-1, so no barrier runs
    yolo = ZERO_FIRST + """

def create_dataloader(path, imgsz, batch_size, rank=-1):
    with torch_distributed_zero_first(rank):
        dataset = LoadImagesAndLabels(path, imgsz, batch_size)
    return dataset


def train(opt, model, RANK, LOCAL_RANK):
    torch.distributed.init_process_group("nccl")
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[LOCAL_RANK])
    train_loader = create_dataloader(opt.train, 640, 16, rank=LOCAL_RANK)
    if RANK in {-1, 0}:
        val_loader = create_dataloader(opt.val, 640, 32, rank=-1)
    for batch in train_loader:
        model(batch).sum().backward()
"""
    assert _div(yolo) == []


# yzhangcs/parser @ 612316962a2fffac633b64dc7ae90dc4392e0253 (as handed in blind batch AK2),
# run.py 5-27, supar/parsers/biaffine_parser.py (cut), supar/parsers/parser.py 13, 40-48 and
# 161-168, supar/utils/parallel.py (whole); fixed in 647dac8 (the plain model's state). The
# entry picks its parser module from a dict and calls its `run`: the project is read through
# it; the project's DDP subclass forwards attributes to the model, so `self.model.loss`
# raises nothing.
SUPAR = {
    "run.py": """\
import argparse

from supar.parsers import biaffine_parser, crf_dependency

PARSERS = {'biaffine-parser': biaffine_parser, 'crf-dependency': crf_dependency}

if __name__ == '__main__':
    parser = argparse.ArgumentParser(description='Create syntactic parsing models.')
    parser.add_argument('--model', default='biaffine-parser', choices=PARSERS.keys())
    args, _ = parser.parse_known_args()
    PARSERS[args.model].run(args)
""",
    "supar/__init__.py": "",
    "supar/parsers/__init__.py": "",
    "supar/parsers/biaffine_parser.py": """\
import torch.distributed as dist

from supar.parsers.parser import Parser


class BiaffineParser(Parser):
    def _train(self, loader):
        for words, arcs in loader:
            loss = self.model.loss(self.model(words), arcs)
            loss.backward()
            self.optimizer.step()


def run(args):
    dist.init_process_group("nccl")
    parser = BiaffineParser(args, build_model(args))
    parser.train(args.train)
    parser.save(args.path)
""",
    "supar/parsers/crf_dependency.py": "def run(args):\n    return None\n",
    "supar/parsers/parser.py": """\
import torch
import torch.distributed as dist

from supar.utils.parallel import DistributedDataParallel as DDP


class Parser(object):
    def __init__(self, args, model):
        self.args = args
        self.model = model
        if dist.is_initialized():
            self.model = self.model.to(args.device)
            self.model = DDP(self.model, device_ids=[args.local_rank])

    def train(self, path):
        self._train(load(path))

    def save(self, path):
        state_dict = {k: v.cpu() for k, v in self.model.state_dict().items()}
        state = {'args': self.args, 'state_dict': state_dict}
        torch.save(state, path)
""",
    "supar/utils/__init__.py": "",
    "supar/utils/parallel.py": """\
import torch.nn as nn


class DistributedDataParallel(nn.parallel.DistributedDataParallel):

    def __init__(self, module, **kwargs):
        super(DistributedDataParallel, self).__init__(module, **kwargs)

    def __getattr__(self, name):
        wrapped = super().__getattr__('module')
        if hasattr(wrapped, name):
            return getattr(wrapped, name)
        return super().__getattr__(name)
""",
}
SAVE = next(i + 1 for i, line in enumerate(SUPAR["supar/parsers/parser.py"].splitlines()) if "state_dict()" in line)


def test_a_parser_module_picked_from_a_dict_is_read_and_its_wrapper_save_said(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "a", SUPAR, "run.py")
    assert severities(found, "DDP-SAVE-WRAPPER") == [("parser.py", SAVE, "warning")]
    # the project's DDP forwards attributes: `self.model.loss` is no AttributeError
    assert severities(found, "DDP-WRAPPER-ATTR") == []


def test_a_plain_ddp_makes_the_attribute_read_an_error_again(tmp_path: Path) -> None:
    plain = dict(SUPAR)
    plain["supar/parsers/parser.py"] = SUPAR["supar/parsers/parser.py"].replace(
        "from supar.utils.parallel import DistributedDataParallel as DDP",
        "from torch.nn.parallel import DistributedDataParallel as DDP",
    )
    found = lint_project(tmp_path / "b", plain, "run.py")
    assert [sev for _, _, sev in severities(found, "DDP-WRAPPER-ATTR")] == ["error"]


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
