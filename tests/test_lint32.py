"""Round 32: what blind batch Y missed, each on the real lines (cited with repository and
commit) beside a twin that must stay silent."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

# yeyupiaoling/MASR @ eeb915450089312d309977a80bfcfe83794bd724, masr/trainer.py
# 135-158 (`evaluate` loads `model.pt` into a fresh DeepSpeech2Model), 254-290 (train:
# DDP wrap, resume into the wrapper), 336-365 (the saves hand the wrapper to
# `save_model`), 409-428 (`save_model` writes `model.state_dict()` to `model.pt`). The
# fix, 1bbcdd5, passes `model.module`.
MASR_SAVE = """\
import os

import torch
import torch.distributed as dist
from torch import nn


class Trainer:
    def evaluate(self, resume_model):
        model = nn.Linear(8, 8)
        model.load_state_dict(torch.load(os.path.join(resume_model, 'model.pt')))
        return model

    def train(self, save_model_path, resume_model, num_epoch):
        nranks = torch.cuda.device_count()
        local_rank = 0
        if nranks > 1:
            dist.init_process_group(backend='nccl')
            local_rank = int(os.environ['LOCAL_RANK'])
        model = nn.Linear(8, 8)
        optimizer = torch.optim.AdamW(params=model.parameters(), lr=1e-3)
        torch.cuda.set_device(local_rank)
        model.cuda(local_rank)
        if nranks > 1:
            model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
        if resume_model is not None:
            model.load_state_dict(torch.load(os.path.join(resume_model, 'model.pt')))
        for epoch in range(num_epoch):
            if local_rank == 0:
                self.save_model(save_model_path=save_model_path, epoch=epoch,
                                model=model, optimizer=optimizer)

    @staticmethod
    def save_model(save_model_path, epoch, model, optimizer):
        model_path = os.path.join(save_model_path, 'epoch_{}'.format(epoch))
        os.makedirs(model_path, exist_ok=True)
        torch.save(optimizer.state_dict(), os.path.join(model_path, 'optimizer.pt'))
        torch.save(model.state_dict(), os.path.join(model_path, 'model.pt'))


if __name__ == '__main__':
    Trainer().train('models/', 'models/last_model', 10)
"""


def test_wrapper_saved_by_a_helper_and_read_back_into_a_plain_model(tmp_path: Path) -> None:
    bad = lint_project(tmp_path / "bad", {"train.py": MASR_SAVE})
    # said at the helper's save, as for every helper given the wrapper (the fix, 1bbcdd5,
    # passed `model.module` at the calls instead)
    assert severities(bad, "DDP-SAVE-WRAPPER") == [("train.py", 38, "warning")], bad
    # twin: evaluation reads another file, so saving and resuming the wrapper agree
    alone = MASR_SAVE.replace(
        "(resume_model, 'model.pt')))\n        return",
        "(resume_model, 'export.pt')))\n        return",
    )
    assert alone != MASR_SAVE
    ok = lint_project(tmp_path / "alone", {"train.py": alone})
    assert severities(ok, "DDP-SAVE-WRAPPER") == [], ok


# yeyupiaoling/MASR @ 390056f5e7cfb4f1ae5d946f22b052d6e86663e5, masr/trainer.py
# 254-284 (resume: `model.load_state_dict(torch.load(.../model.pt))` after the DDP wrap)
# and 332-373 (the saves pass `model.module` when nranks > 1). The fix, a05cd51, loads
# into `model.module` when nranks > 1.
MASR_RESUME = """\
import os

import torch
import torch.distributed as dist
from torch import nn


class Trainer:
    def train(self, save_model_path, resume_model, num_epoch):
        nranks = torch.cuda.device_count()
        local_rank = 0
        if nranks > 1:
            dist.init_process_group(backend='nccl')
            local_rank = int(os.environ['LOCAL_RANK'])
        model = nn.Linear(8, 8)
        optimizer = torch.optim.AdamW(params=model.parameters(), lr=1e-3)
        torch.cuda.set_device(local_rank)
        model.cuda(local_rank)
        if nranks > 1:
            model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
        if resume_model is not None:
            model.load_state_dict(torch.load(os.path.join(resume_model, 'model.pt')))
        for epoch in range(num_epoch):
            if local_rank == 0:
                if nranks > 1:
                    self.save_model(save_model_path=save_model_path, epoch=epoch,
                                    model=model.module, optimizer=optimizer)
                else:
                    self.save_model(save_model_path=save_model_path, epoch=epoch,
                                    model=model, optimizer=optimizer)

    @staticmethod
    def save_model(save_model_path, epoch, model, optimizer):
        model_path = os.path.join(save_model_path, 'epoch_{}'.format(epoch))
        os.makedirs(model_path, exist_ok=True)
        torch.save(optimizer.state_dict(), os.path.join(model_path, 'optimizer.pt'))
        torch.save(model.state_dict(), os.path.join(model_path, 'model.pt'))


if __name__ == '__main__':
    Trainer().train('models/', 'models/last_model', 10)
"""


def test_plain_checkpoint_resumed_into_the_wrapper(tmp_path: Path) -> None:
    bad = lint_project(tmp_path / "bad", {"train.py": MASR_RESUME})
    assert severities(bad, "DDP-LOAD-INTO-WRAPPER") == [("train.py", 22, "warning")], bad
    assert severities(bad, "DDP-SAVE-WRAPPER") == [], bad
    # twin: the fix loads into the wrapped model when distributed
    fixed = MASR_RESUME.replace(
        "            model.load_state_dict(torch.load(os.path.join(resume_model, 'model.pt')))\n",
        "            state = torch.load(os.path.join(resume_model, 'model.pt'))\n"
        "            if nranks > 1:\n"
        "                model.module.load_state_dict(state)\n"
        "            else:\n"
        "                model.load_state_dict(state)\n",
    )
    assert fixed != MASR_RESUME
    ok = lint_project(tmp_path / "ok", {"train.py": fixed})
    assert severities(ok, "DDP-LOAD-INTO-WRAPPER") == [], ok


# yeyupiaoling/MASR @ e9438ee9fdb1e1590a2decd9d7a72660be5a9a96, masr/trainer.py
# 139-159 (`__load_pretrained`: the pretrained dict filtered by the wrapper's own keys,
# then `self.model.load_state_dict(..., strict=False)`), 162-206 (resume and save split
# on isinstance(DDP): `self.model.module.state_dict()` saved), 413-426 (train wraps
# `self.model`, then loads the pretrained weights). The fix, 9a5802e, loads into
# `self.model.module` when wrapped.
MASR_PRETRAINED = """\
import os

import torch
import torch.distributed as dist
from torch import nn


class Trainer:
    def __init__(self):
        self.model = None

    def __load_pretrained(self, pretrained_model):
        if pretrained_model is not None:
            model_dict = self.model.state_dict()
            model_state_dict = torch.load(pretrained_model, map_location='cpu')
            for name, weight in model_dict.items():
                if name in model_state_dict.keys():
                    if list(weight.shape) != list(model_state_dict[name].shape):
                        model_state_dict.pop(name, None)
            self.model.load_state_dict(model_state_dict, strict=False)

    def __save_checkpoint(self, save_model_path):
        if isinstance(self.model, torch.nn.parallel.DistributedDataParallel):
            state_dict = self.model.module.state_dict()
        else:
            state_dict = self.model.state_dict()
        torch.save(state_dict, os.path.join(save_model_path, 'model.pt'))

    def train(self, save_model_path, pretrained_model):
        nranks = torch.cuda.device_count()
        local_rank = 0
        if nranks > 1:
            dist.init_process_group(backend='nccl')
            local_rank = int(os.environ['LOCAL_RANK'])
        self.model = nn.Linear(8, 8)
        self.model.to(local_rank)
        if nranks > 1:
            self.model = torch.nn.parallel.DistributedDataParallel(self.model, device_ids=[local_rank])
        self.__load_pretrained(pretrained_model=pretrained_model)
        if local_rank == 0:
            self.__save_checkpoint(save_model_path)


if __name__ == '__main__':
    Trainer().train('models/', 'pretrained.pt')
"""


def test_pretrained_weights_loaded_loosely_into_the_wrapper(tmp_path: Path) -> None:
    bad = lint_project(tmp_path / "bad", {"train.py": MASR_PRETRAINED})
    assert severities(bad, "DDP-LOAD-INTO-WRAPPER") == [("train.py", 20, "warning")], bad
    assert "strict=False" in next(f.summary for f in bad if f.id == "DDP-LOAD-INTO-WRAPPER")
    # twin: the pretrained weights loaded before the wrap
    before = MASR_PRETRAINED.replace(
        "        if nranks > 1:\n            self.model = torch.nn.parallel",
        "        self.__load_pretrained(pretrained_model=pretrained_model)\n"
        "        if nranks > 1:\n            self.model = torch.nn.parallel",
    ).replace(
        "device_ids=[local_rank])\n        self.__load_pretrained(pretrained_model=pretrained_model)\n",
        "device_ids=[local_rank])\n",
    )
    assert before.count("self.__load_pretrained(pretrained_model") == 1
    ok = lint_project(tmp_path / "ok", {"train.py": before})
    assert severities(ok, "DDP-LOAD-INTO-WRAPPER") == [], ok


# RUCAIBox/RecBole @ 45d726581fc2161210de118c274d24b1b93c4e55: run_recbole.py,
# recbole/quick_start/quick_start.py:86-96 (the trainer class is picked by name from the
# module `importlib.import_module("recbole.trainer")` returns, recbole/utils/utils.py:88-110),
# recbole/trainer/__init__.py (star import), recbole/trainer/trainer.py:58-66 (DDP),
# 288-307 (`_save_checkpoint` returns early unless `self.config["local_rank"] == 0`),
# 561-583 (`evaluate(load_best_model=True)` loads `self.saved_model_file` on every rank).
# The fix, 96e2930, adds `dist.barrier()` before the load.
RB_RUN = """\
import importlib

import torch.distributed as dist


def get_trainer(model_name):
    try:
        return getattr(importlib.import_module("pkg.trainer"), model_name + "Trainer")
    except AttributeError:
        return getattr(importlib.import_module("pkg.trainer"), "Trainer")


def run(config, model, train_data, test_data):
    dist.init_process_group(backend="nccl")
    trainer = get_trainer(config["model"])(config, model)
    trainer.fit(train_data)
    trainer.evaluate(test_data, load_best_model=True)


if __name__ == "__main__":
    run({"model": "BPR", "local_rank": 0}, None, [], [])
"""
RB_TRAINER = """\
import torch
from torch.nn.parallel import DistributedDataParallel


class Trainer:
    def __init__(self, config, model):
        self.config = config
        self.model = model
        self.saved_model_file = "model.pth"
        self.distributed_model = DistributedDataParallel(
            self.model, device_ids=[config["local_rank"]]
        )

    def _save_checkpoint(self, epoch, **kwargs):
        if not self.config["single_spec"] and self.config["local_rank"] != 0:
            return
        saved_model_file = kwargs.pop("saved_model_file", self.saved_model_file)
        state = {"epoch": epoch, "state_dict": self.model.state_dict()}
        torch.save(state, saved_model_file, pickle_protocol=4)

    def fit(self, train_data):
        for epoch_idx in range(3):
            self._save_checkpoint(epoch_idx)

    def evaluate(self, eval_data, load_best_model=True, model_file=None):
        if load_best_model:
            checkpoint_file = model_file or self.saved_model_file
            checkpoint = torch.load(checkpoint_file, map_location="cpu")
            self.model.load_state_dict(checkpoint["state_dict"])
        self.model.eval()
"""


def test_best_model_read_back_without_a_barrier_by_a_trainer_picked_by_name(
    tmp_path: Path,
) -> None:
    files = {
        "train.py": RB_RUN,
        "pkg/__init__.py": "",
        "pkg/trainer/__init__.py": "from pkg.trainer.trainer import *\n",
        "pkg/trainer/trainer.py": RB_TRAINER,
    }
    bad = lint_project(tmp_path / "bad", files)
    assert severities(bad, "DDP-CKPT-BARRIER") == [("trainer.py", 28, "warning")], bad
    # twin: the fix waits for rank 0 before the load
    fixed = RB_TRAINER.replace(
        "        if load_best_model:\n",
        "        if load_best_model:\n            torch.distributed.barrier()\n",
    )
    assert fixed != RB_TRAINER
    ok = lint_project(tmp_path / "ok", {**files, "pkg/trainer/trainer.py": fixed})
    assert severities(ok, "DDP-CKPT-BARRIER") == [], ok


# yeyupiaoling/MASR @ eeb915450089312d309977a80bfcfe83794bd724, masr/trainer.py:199-205
# and 336-339: `local_rank = dist.get_rank()` (the global rank under a local name, which
# DDP-HARDCODED-DEVICE reports) gates the saves: rank 0 alone writes them, so the
# local-rank reading of DDP-ALL-RANKS-IO ("local rank 0 of every node") must not speak.
MASR_GATE = """\
import torch
import torch.distributed as dist
from torch import nn


def train(save_path):
    nranks = torch.cuda.device_count()
    local_rank = 0
    if nranks > 1:
        dist.init_process_group(backend='nccl')
        local_rank = dist.get_rank()
    model = nn.Linear(8, 8).cuda()
    if nranks > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    for epoch in range(3):
        if local_rank == 0:
            torch.save(model.module.state_dict(), save_path)


if __name__ == '__main__':
    train('model.pt')
"""


def test_a_global_rank_under_a_local_name_gates_one_writer(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "global", {"train.py": MASR_GATE})
    assert not [f for f in found if "rank on this node" in f.summary], found
    # twin: the local rank from the launcher's environment does pick one writer per node
    local = MASR_GATE.replace(
        "local_rank = dist.get_rank()", "local_rank = int(os.environ['LOCAL_RANK'])"
    ).replace("import torch\n", "import os\n\nimport torch\n", 1)
    hits = [
        f
        for f in lint_project(tmp_path / "local", {"train.py": local})
        if "rank on this node" in f.summary
    ]
    assert [(h.id, h.line) for h in hits] == [("DDP-ALL-RANKS-IO", 18)], hits
