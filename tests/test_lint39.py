"""Round 39: DDP-SAMPLER misses of blind batch AD2, each on the real lines (cited with
repository and commit) beside a twin that must stay silent."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

# pykt-team/pykt-toolkit @ c636acb848d4954bde9700c3eacfa2065f913559: examples/wandb_train.py
# 10-12 and 159 (`from pykt.models import train_model, init_model`), pykt/models/__init__.py
# (`from .init_model import init_model`: the package's attribute is the function, not the
# submodule of the same name), pykt/models/init_model.py 119-129 (gpt4kt: DDP), and
# pykt/datasets/init_dataset.py 114-221 (the train DataLoader has no sampler). The fix,
# 4c4741a "revise multi-gpu", adds a DistributedSampler.
PYKT_TRAIN = """\
import torch
from torch.optim import Adam

from pykt.models import train_model, init_model
from pykt.datasets import init_dataset4train


def main(params, args):
    train_loader, valid_loader, curtrain = init_dataset4train(
        params["dataset_name"], "gpt4kt", "qid", params["data_config"], 0, 64, args
    )
    model = init_model("gpt4kt", {}, params["data_config"], "qid", args)
    opt = Adam(model.parameters(), 1e-4)
    train_model(model, train_loader, valid_loader, 10, opt)


if __name__ == "__main__":
    main({}, None)
"""

PYKT_MODELS_INIT = """\
from .train_model import train_model
from .init_model import init_model
"""

PYKT_INIT_MODEL = """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP


def init_model(model_name, model_config, data_config, emb_type, args=None, mode="train"):
    if model_name == "gpt4kt":
        if mode == "train":
            torch.distributed.init_process_group(backend='nccl')
            torch.cuda.set_device(args.local_rank)
        model = torch.nn.Linear(8, 1).to(args.local_rank)
        if mode == "train":
            model = DDP(model)
    return model
"""

PYKT_TRAIN_MODEL = """\
def train_model(model, train_loader, valid_loader, num_epochs, opt):
    for i in range(1, num_epochs + 1):
        for j, data in enumerate(train_loader):
            model.module.train()
            loss = model(data).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
"""

PYKT_INIT_DATASET = """\
from torch.utils.data import DataLoader, Dataset


class KTDataset(Dataset):
    def __init__(self, path, folds):
        self.path = path


def init_dataset4train(dataset_name, model_name, emb_type, data_config, i, batch_size, args=None):
    data_config = data_config[dataset_name]
    all_folds = set(data_config["folds"])
    curvalid = KTDataset(data_config["train_valid_file"], {i})
    curtrain = KTDataset(data_config["train_valid_file"], all_folds - {i})
    train_loader = DataLoader(curtrain, batch_size=batch_size)
    valid_loader = DataLoader(curvalid, batch_size=batch_size)
    return train_loader, valid_loader, curtrain
"""


def _pykt(root: Path, dataset: str, models_init: str = PYKT_MODELS_INIT) -> list:
    files = {
        "pykt/__init__.py": "",
        "pykt/models/__init__.py": models_init,
        "pykt/models/init_model.py": PYKT_INIT_MODEL,
        "pykt/models/train_model.py": PYKT_TRAIN_MODEL,
        "pykt/datasets/__init__.py": "from .init_dataset import init_dataset4train\n",
        "pykt/datasets/init_dataset.py": dataset,
        "train.py": PYKT_TRAIN,
    }
    return lint_project(root, files)


def test_package_reexport_shadows_its_submodule(tmp_path: Path) -> None:
    bad = _pykt(tmp_path / "bad", PYKT_INIT_DATASET)
    assert severities(bad, "DDP-SAMPLER") == [("init_dataset.py", 14, "error")], bad
    # twin: the fix hands the train loader a DistributedSampler
    fixed = PYKT_INIT_DATASET.replace(
        "    train_loader = DataLoader(curtrain, batch_size=batch_size)\n",
        "    train_sampler = DistributedSampler(curtrain)\n"
        "    train_loader = DataLoader(curtrain, batch_size=batch_size, sampler=train_sampler)\n",
    ).replace("import DataLoader, Dataset", "import DataLoader, Dataset, DistributedSampler")
    assert fixed != PYKT_INIT_DATASET
    assert severities(_pykt(tmp_path / "fixed", fixed), "DDP-SAMPLER") == []


def test_package_without_its_own_binding_hands_out_the_submodule(tmp_path: Path) -> None:
    # twin: an `__init__` that binds no `init_model` of its own: `from pykt.models import
    # init_model` is the submodule, so calling it runs none of its code (and no DDP)
    bare = _pykt(tmp_path / "bare", PYKT_INIT_DATASET, "from .train_model import train_model\n")
    assert severities(bare, "DDP-SAMPLER") == []


# s3prl/s3prl @ 0fa0f782e3d79ac767d1bc9beeaf2c4a0290ba90: downstream/runner.py 56-68,
# 107-122 and 184-194 (the expert module is imported by a name built at run time,
# `f'downstream.{self.args.downstream}.expert'`; the training loop calls
# `dataloader.sampler.set_epoch(epoch)` on what the expert's `get_dataloader('train')`
# returns), downstream/emotion/expert.py 66-77 (`shuffle=True`, no sampler) and
# downstream/speech_commands/expert.py 51-60 (a plain WeightedRandomSampler). The fix,
# PR #146 "support ddp on SUPERB tasks", gives each train loader
# `DistributedSampler(dataset) if is_initialized() else None` and `shuffle=(sampler is None)`.
S3PRL_MAIN = """\
import argparse

import torch

from downstream.runner import Runner


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('-d', '--downstream')
    parser.add_argument('--local_rank', type=int)
    args = parser.parse_args()
    torch.cuda.set_device(args.local_rank)
    torch.distributed.init_process_group('nccl')
    runner = Runner(args, {})
    runner.train()


if __name__ == '__main__':
    main()
"""

S3PRL_RUNNER = """\
import importlib

import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed import is_initialized


class Runner():
    def __init__(self, args, config):
        self.args = args
        self.config = config
        self.downstream = self._get_downstream()

    def _init_model(self, model, interfaces=None):
        if is_initialized():
            model = DDP(model, device_ids=[self.args.local_rank], find_unused_parameters=True)
            for interface in interfaces or []:
                setattr(model, interface, getattr(model.module, interface))
        return model

    def _get_downstream(self):
        module_path = f'downstream.{self.args.downstream}.expert'
        Downstream = getattr(importlib.import_module(module_path), 'DownstreamExpert')
        model = Downstream(**self.config).to(self.args.local_rank)
        return self._init_model(model, interfaces=['get_dataloader'])

    def train(self):
        optimizer = torch.optim.Adam(self.downstream.parameters())
        dataloader = self.downstream.get_dataloader('train')
        epoch = 0
        while epoch < 10:
            if is_initialized():
                dataloader.sampler.set_epoch(epoch)
            for batch_id, (wavs, *others) in enumerate(dataloader):
                loss = self.downstream(wavs, *others)
                loss.backward()
                optimizer.step()
            epoch += 1
"""

S3PRL_EMOTION = """\
import torch.nn as nn
from torch.utils.data import DataLoader


class DownstreamExpert(nn.Module):
    def __init__(self, **kwargs):
        super().__init__()
        self.datarc = kwargs
        self.model = nn.Linear(8, 4)

    def _get_train_dataloader(self, dataset):
        return DataLoader(
            dataset, batch_size=self.datarc['train_batch_size'],
            shuffle=True, num_workers=self.datarc['num_workers'],
        )

    def _get_eval_dataloader(self, dataset):
        return DataLoader(
            dataset, batch_size=self.datarc['eval_batch_size'],
            shuffle=False, num_workers=self.datarc['num_workers'],
        )

    def get_dataloader(self, mode):
        return eval(f'self.get_{mode}_dataloader')()

    def get_train_dataloader(self):
        return self._get_train_dataloader(self.train_dataset)

    def get_dev_dataloader(self):
        return self._get_eval_dataloader(self.dev_dataset)

    def forward(self, features, labels):
        return self.model(features).sum()
"""

S3PRL_SPEECH_COMMANDS = """\
import torch.nn as nn
from torch.utils.data import DataLoader, WeightedRandomSampler


class DownstreamExpert(nn.Module):
    def __init__(self, **kwargs):
        super().__init__()
        self.datarc = kwargs
        self.model = nn.Linear(8, 4)

    def _get_balanced_dataloader(self, dataset, drop_last=False):
        return DataLoader(
            dataset,
            sampler=WeightedRandomSampler(
                dataset.sample_weights, len(dataset.sample_weights)
            ),
            batch_size=self.datarc["batch_size"],
            drop_last=drop_last,
        )

    def get_dataloader(self, mode):
        return self._get_balanced_dataloader(self.train_dataset, drop_last=True)

    def forward(self, features, labels):
        return self.model(features).sum()
"""

# downstream/asr/expert.py 10-11 and 130-137 at the same commit: the one task whose
# train loader already had the DistributedSampler
S3PRL_ASR = """\
import torch.nn as nn
from torch.utils.data import DataLoader, DistributedSampler
from torch.distributed import is_initialized


class DownstreamExpert(nn.Module):
    def __init__(self, **kwargs):
        super().__init__()
        self.datarc = kwargs
        self.model = nn.Linear(8, 4)

    def _get_train_dataloader(self, dataset):
        sampler = DistributedSampler(dataset) if is_initialized() else None
        return DataLoader(
            dataset, batch_size=1,
            shuffle=(sampler is None),
            sampler=sampler,
            num_workers=self.datarc['num_workers'],
        )

    def get_dataloader(self, mode):
        return self._get_train_dataloader(self.train_dataset)

    def forward(self, features, labels):
        return self.model(features).sum()
"""

# the fix's form (s3prl downstream/emotion/expert.py after PR #146)
S3PRL_EMOTION_FIXED = S3PRL_EMOTION.replace(
    "from torch.utils.data import DataLoader\n",
    "from torch.utils.data import DataLoader, DistributedSampler\n"
    "from torch.distributed import is_initialized\n",
).replace(
    "    def _get_train_dataloader(self, dataset):\n"
    "        return DataLoader(\n"
    "            dataset, batch_size=self.datarc['train_batch_size'],\n"
    "            shuffle=True, num_workers=self.datarc['num_workers'],\n",
    "    def _get_train_dataloader(self, dataset):\n"
    "        sampler = DistributedSampler(dataset) if is_initialized() else None\n"
    "        return DataLoader(\n"
    "            dataset, batch_size=self.datarc['train_batch_size'],\n"
    "            shuffle=(sampler is None), sampler=sampler,\n"
    "            num_workers=self.datarc['num_workers'],\n",
)


def _s3prl(root: Path, emotion: str, runner: str = S3PRL_RUNNER, speech: str | None = None) -> list:
    files = {
        "run_downstream.py": S3PRL_MAIN,
        "downstream/runner.py": runner,
        "downstream/emotion/expert.py": emotion,
        "downstream/asr/expert.py": S3PRL_ASR,
    }
    if speech is not None:
        files["downstream/speech_commands/expert.py"] = speech
    return lint_project(root, files, entry="run_downstream.py")


def test_plugin_loader_under_a_set_epoch_loop(tmp_path: Path) -> None:
    bad = _s3prl(tmp_path / "bad", S3PRL_EMOTION, speech=S3PRL_SPEECH_COMMANDS)
    assert sorted(severities(bad, "DDP-SAMPLER")) == [
        ("expert.py", 14, "error"),  # emotion: `shuffle=True`
        ("expert.py", 14, "error"),  # speech_commands: `sampler=WeightedRandomSampler(`
    ], bad
    files = {Path(f.file).parent.name for f in bad if f.id == "DDP-SAMPLER"}
    assert files == {"emotion", "speech_commands"}
    # twin: the fix's DistributedSampler (the eval loader, shuffle=False, stays silent)
    fixed = _s3prl(tmp_path / "fixed", S3PRL_EMOTION_FIXED)
    assert S3PRL_EMOTION_FIXED != S3PRL_EMOTION
    assert severities(fixed, "DDP-SAMPLER") == []


def test_loop_that_tests_the_sampler_accepts_local_ones(tmp_path: Path) -> None:
    # twin: `hasattr(dataloader.sampler, "set_epoch")`: the loop takes any sampler
    runner = S3PRL_RUNNER.replace(
        "            if is_initialized():\n",
        "            if hasattr(dataloader.sampler, 'set_epoch'):\n",
    )
    assert runner != S3PRL_RUNNER
    assert severities(_s3prl(tmp_path / "tested", S3PRL_EMOTION, runner), "DDP-SAMPLER") == []
