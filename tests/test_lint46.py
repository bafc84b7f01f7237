"""Round 46: a dataset class a decorator registry builds, which deals its files to the
ranks itself (DDP-UNEVEN-BATCH said where it sets its length), and the callers of a
save helper named as the places the rank guard goes, past the callers that guard it
already (DDP-ALL-RANKS-IO). Real lines cited with repository and commit, each beside a
twin that must stay silent."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

# Open-Catalyst-Project/ocp @ d23774524ed92283114d4d33347e89d002da2609: main.py builds the
# trainer from the registry; ocpmodels/common/registry.py (register_dataset,
# get_dataset_class), ocpmodels/datasets/trajectory_lmdb.py 22-68 (the files dealt by
# rank, `self.num_samples` summed from this rank's share; fixed in e6fdfb0d, which pads
# every replica to one size), ocpmodels/trainers/forces_trainer.py load_task 105-117.
MAIN = """\
import torch.distributed as dist

from registry import registry
import trainers  # noqa: F401 - registers the trainers


def main(config):
    dist.init_process_group(backend="nccl", init_method=config["init_method"])
    trainer = registry.get_trainer_class(config["trainer"])(config)
    trainer.train()
"""

REGISTRY = """\
class Registry:
    mapping = {"dataset_name_mapping": {}, "trainer_name_mapping": {}}

    @classmethod
    def register_dataset(cls, name):
        def wrap(func):
            cls.mapping["dataset_name_mapping"][name] = func
            return func

        return wrap

    @classmethod
    def register_trainer(cls, name):
        def wrap(func):
            cls.mapping["trainer_name_mapping"][name] = func
            return func

        return wrap

    @classmethod
    def get_dataset_class(cls, name):
        return cls.mapping["dataset_name_mapping"].get(name, None)

    @classmethod
    def get_trainer_class(cls, name):
        return cls.mapping["trainer_name_mapping"].get(name, None)


registry = Registry()
"""

DATASETS = """\
import pickle
from pathlib import Path

import torch.distributed as dist
from torch.utils.data import Dataset

from registry import registry


@registry.register_dataset("trajectory_lmdb")
class TrajectoryLmdbDataset(Dataset):
    def __init__(self, config, transform=None):
        super(TrajectoryLmdbDataset, self).__init__()
        self.config = config

        # If running in distributed mode, only read a subset of database files
        world_size = dist.get_world_size()
        rank = dist.get_rank()
        srcdir = Path(self.config["src"])
        db_paths = sorted(srcdir.glob("*.lmdb"))
        num_full_dbs = len(db_paths) - (len(db_paths) % world_size)
        full_db_paths = db_paths[rank:num_full_dbs:world_size]
        shared_db_paths = db_paths[num_full_dbs:]
        self.db_paths = full_db_paths + shared_db_paths

        self._keys, self.envs = [], []
        for db_path in full_db_paths:
            self.envs.append(self.connect_db(db_path))
            length = pickle.loads(self.envs[-1].begin().get("length".encode("ascii")))
            self._keys.append(list(range(length)))
        for db_path in shared_db_paths:
            self.envs.append(self.connect_db(db_path))
            length = pickle.loads(self.envs[-1].begin().get("length".encode("ascii")))
            length -= length % world_size
            self._keys.append(list(range(rank, length, world_size)))
        self._keylens = [len(k) for k in self._keys]
        self.num_samples = sum(self._keylens)
        self.transform = transform

    def __len__(self):
        return self.num_samples

    def __getitem__(self, idx):
        return self.envs[0].begin().get(f"{idx}".encode("ascii"))


@registry.register_dataset("single_point_lmdb")
class SinglePointLmdbDataset(Dataset):
    def __init__(self, config, transform=None):
        self.db_path = config["src"]
        self._keys = list(range(100))

    def __len__(self):
        return len(self._keys)

    def __getitem__(self, idx):
        return self._keys[idx]
"""

TRAINERS = """\
import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

import datasets  # noqa: F401 - registers the datasets
from registry import registry


@registry.register_trainer("forces")
class ForcesTrainer:
    def __init__(self, config):
        self.config = config
        self.load_task()
        self.model = DistributedDataParallel(torch.nn.Linear(4, 1).cuda(), device_ids=[0])
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def load_task(self):
        if self.config["task"]["dataset"] == "trajectory_lmdb":
            self.train_dataset = registry.get_dataset_class(
                self.config["task"]["dataset"]
            )(self.config["dataset"])

            self.train_loader = DataLoader(
                self.train_dataset,
                batch_size=self.config["optim"]["batch_size"],
                shuffle=True,
                num_workers=self.config["optim"]["num_workers"],
                pin_memory=True,
            )

    def train(self):
        for epoch in range(self.config["optim"]["max_epochs"]):
            for i, batch in enumerate(self.train_loader):
                loss = self.model(batch).sum()
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
"""


def _ocp(tmp_path: Path, name: str, datasets: str = DATASETS, trainers: str = TRAINERS) -> list:
    files = {
        "train.py": MAIN,
        "registry.py": REGISTRY,
        "datasets.py": datasets,
        "trainers.py": trainers,
    }
    return lint_project(tmp_path / name, files)


def test_registered_dataset_that_deals_files_by_rank(tmp_path: Path) -> None:
    found = _ocp(tmp_path, "bug")
    # said where the class sets the length it reports (`self.num_samples = ...`)
    assert severities(found, "DDP-UNEVEN-BATCH") == [("datasets.py", 37, "error")]


def test_registry_key_of_another_dataset_or_evened_shares_are_silent(tmp_path: Path) -> None:
    # the branch picks the registered dataset that reads all its data: no dealing here
    # (and no literal at all: nothing guessed)
    other = TRAINERS.replace('== "trajectory_lmdb"', '== "single_point_lmdb"')
    assert severities(_ocp(tmp_path, "other", trainers=other), "DDP-UNEVEN-BATCH") == []
    unknown = TRAINERS.replace('if self.config["task"]["dataset"] == "trajectory_lmdb":', "if 1:")
    assert severities(_ocp(tmp_path, "unknown", trainers=unknown), "DDP-UNEVEN-BATCH") == []
    # the fix (e6fdfb0d): every replica padded to one size
    padded = DATASETS.replace(
        "        self.num_samples = sum(self._keylens)\n",
        "        self.num_samples = sum(self._keylens)\n"
        "        self.num_samples = self._pad_to_largest_share(self.num_samples)\n",
    )
    assert severities(_ocp(tmp_path, "padded", datasets=padded), "DDP-UNEVEN-BATCH") == []


# Open-Catalyst-Project/ocp @ 930c536a3c6ff008e8afe9a8eb6e84fcc62ac005:
# ocpmodels/common/utils.py 21-23 (save_checkpoint), its callers in
# ocpmodels/trainers/base_trainer.py 356, dogss_trainer.py 143, energy_trainer.py 224-225
# (no rank test; fixed in 260b7c8d with distutils.is_master()) and forces_trainer.py 336-337,
# 374-375 (under `if not self.is_debug and distutils.is_master():`).
UTILS = """\
import os

import torch


def save_checkpoint(state, checkpoint_dir="checkpoints/"):
    filename = os.path.join(checkpoint_dir, "checkpoint.pt")
    torch.save(state, filename)
"""

SAVERS = """\
import torch.distributed as dist

from registry import registry
from utils import save_checkpoint


def is_master():
    return dist.get_rank() == 0


class BaseTrainer:
    def save(self, epoch, metrics):
        save_checkpoint({"epoch": epoch, "state_dict": self.model.state_dict()})


@registry.register_trainer("dogss")
class DogssTrainer(BaseTrainer):
    def train(self):
        for epoch in range(10):
            if self.better(epoch):
                save_checkpoint({"epoch": epoch, "state_dict": self.model.state_dict()})


@registry.register_trainer("energy")
class EnergyTrainer(BaseTrainer):
    def train(self):
        for epoch in range(10):
            if self.better(epoch):
                if not self.is_debug:
                    save_checkpoint(
                        {"epoch": epoch + 1, "state_dict": self.model.state_dict()},
                        self.config["cmd"]["checkpoint_dir"],
                    )


@registry.register_trainer("forces")
class ForcesTrainer(BaseTrainer):
    def train(self):
        for epoch in range(10):
            if self.better(epoch):
                if not self.is_debug and is_master():
                    save_checkpoint({"epoch": epoch, "state_dict": self.model.state_dict()})
            if self.last(epoch):
                if not self.is_debug and is_master():
                    save_checkpoint({"epoch": epoch, "state_dict": self.model.state_dict()})
"""

SAVE_MAIN = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import savers  # noqa: F401 - registers the trainers
from registry import registry


def main(config):
    dist.init_process_group("nccl")
    trainer = registry.get_trainer_class(config["trainer"])(config)
    trainer.model = DDP(torch.nn.Linear(2, 2).cuda())
    trainer.train()
"""


def _save_places(tmp_path: Path, name: str, savers: str) -> list[tuple[str, int, str]]:
    found = lint_project(
        tmp_path / name,
        {"train.py": SAVE_MAIN, "registry.py": REGISTRY, "savers.py": savers, "utils.py": UTILS},
    )
    hits = [f for f in found if f.id == "DDP-ALL-RANKS-IO" and Path(f.file).name == "utils.py"]
    assert [h.line for h in hits] == [8]
    return [(Path(p.file).name, p.line, p.label) for p in hits[0].also]


def test_callers_named_past_the_ones_under_a_rank_test(tmp_path: Path) -> None:
    # five callers, two of them under `is_master()`: the three that write on every rank
    # are where the guard goes (the energy trainer's among them)
    called = [p for p in _save_places(tmp_path, "bug", SAVERS) if p[2] == "called from"]
    assert called == [
        ("savers.py", 13, "called from"),
        ("savers.py", 21, "called from"),
        ("savers.py", 30, "called from"),
    ]


def test_a_helper_with_many_unguarded_callers_is_said_at_its_own_line(tmp_path: Path) -> None:
    # with every caller unguarded (five), the helper's own line says enough
    unguarded = SAVERS.replace("not self.is_debug and is_master()", "not self.is_debug")
    assert [p for p in _save_places(tmp_path, "many", unguarded) if p[2] == "called from"] == []
