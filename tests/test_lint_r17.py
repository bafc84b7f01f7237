"""Round 17 (misses of blind batches AH-AK, tuned after their scores): what the project
reading follows, each on the real lines (cited with repository and commit) beside twins
that must stay silent: a closure that reads the model after the wrap (DDP-WRAPPER-ATTR); a
device "cuda" with no index beside the rank's GPU (DDP-HARDCODED-DEVICE); a module imported
by bare name from the entry's folder and both arms of a rebound import; a write reached
through a thin launcher; a registry dict of modules and a DDP subclass that forwards
attributes."""

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
