"""Round 17: the shapes of code that defeated the rules on blind batches A..L, each
followed in general. The code is the real projects' (only the lines needed, each cited
with its repository and commit); each wrong shape is beside a correct twin that stays
silent."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project
from lintproject import severities as _sev

# A writer in a method of a project class of another file (blind D, two projects).
# ryul99/pytorch-project-template @ eb012d95092397159e4af11eecd0cd658c856fec: trainer.py
# calls `model.save_training_state(logger)` on every rank; model/model.py's method
# torch.saves the same file on each (fixed in PR #7 by a `self.rank == 0` guard, as
# `save_network` beside it already had). The finding names the torch.save in the method,
# where the guard goes, not trainer.py's call of it.
RYUL_MODEL = """\
import torch
import os.path as osp
from torch.nn.parallel import DistributedDataParallel as DDP


class Model:
    def __init__(self, hp, net_arch, rank=0, world_size=1):
        self.hp = hp
        self.net = net_arch.to(rank)
        self.rank = rank
        self.net = DDP(self.net, device_ids=[self.rank])
        self.optimizer = torch.optim.Adam(self.net.parameters())
        self.step = 0

    def save_network(self, logger):
        if self.rank == 0:
            save_path = osp.join(self.hp.log.chkpt_dir, "%s_%d.pt" % (self.hp.log.name, self.step))
            torch.save(self.net.module.state_dict(), save_path)

    def save_training_state(self, logger):
        save_filename = "%s_%d.state" % (self.hp.log.name, self.step)
        save_path = osp.join(self.hp.log.chkpt_dir, save_filename)
        state = {"optimizer": self.optimizer.state_dict(), "step": self.step}
{SAVE}
"""
RYUL_TRAIN = """\
import torch
import torch.distributed as dist
from model.model import Model


def train_loop(rank, hp, net_arch, train_loader, world_size=1):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    model = Model(hp, net_arch, rank, world_size)
    for epoch in range(hp.train.epochs):
        for x in train_loader:
            model.net(x).sum().backward()
        model.save_network(None)
        model.save_training_state(None)


if __name__ == "__main__":
    torch.multiprocessing.spawn(train_loop, nprocs=2)
"""


def test_writer_in_a_method_of_another_file_is_said_there(tmp_path: Path) -> None:
    files = {"train.py": RYUL_TRAIN, "model/__init__.py": ""}
    bare = RYUL_MODEL.replace("{SAVE}", "        torch.save(state, save_path)")
    found = lint_project(tmp_path / "bug", {**files, "model/model.py": bare})
    line = bare.splitlines().index("        torch.save(state, save_path)") + 1
    assert _sev(found, "DDP-ALL-RANKS-IO") == [("model.py", line, "warning")]
    guarded = RYUL_MODEL.replace(
        "{SAVE}", "        if self.rank == 0:\n            torch.save(state, save_path)"
    )
    found = lint_project(tmp_path / "ok", {**files, "model/model.py": guarded})
    assert _sev(found, "DDP-ALL-RANKS-IO") == []


# neuraloperator/neuraloperator @ 679fd33b8cd0dc0ca2f8b2308f44f23ec7b9bced: the script
# calls `trainer.train(...)`; `Trainer.checkpoint` (neuralop/training/trainer.py:604)
# calls the free helper `save_training_state` of training_state.py, which torch.saves
# on every rank (fixed by "only save model on rank 0", PR #444, in the method). The
# finding names the helper's call in the method, not the torch.save in the helper that
# also serves single-process runs, nor the script's `trainer.train` call.
NEURALOP_STATE = """\
import torch
from pathlib import Path


def save_training_state(save_dir, save_name, model, optimizer=None):
    save_dir = Path(save_dir)
    model.save_checkpoint(save_dir, save_name)
    if optimizer is not None:
        torch.save(optimizer.state_dict(), save_dir.joinpath("optimizer.pt"))
"""
NEURALOP_TRAINER = """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from .training_state import save_training_state


class Trainer:
    def __init__(self, model, device_id):
        self.model = DDP(model.to(device_id), device_ids=[device_id])
        self.optimizer = torch.optim.Adam(self.model.parameters())

    def train(self, loader, epochs, save_dir="./ckpt"):
        for epoch in range(epochs):
            for x in loader:
                self.model(x).sum().backward()
            self.checkpoint(save_dir)

    def checkpoint(self, save_dir):
{SAVE}
"""
NEURALOP_SCRIPT = """\
import os
import torch.distributed as dist
from training.trainer import Trainer

dist.init_process_group("nccl")
trainer = Trainer(build_model(), int(os.environ["LOCAL_RANK"]))
trainer.train(make_loader(), 10)
"""
_CALL = (
    "save_training_state(save_dir=save_dir, save_name='model', model=self.model, "
    "optimizer=self.optimizer)"
)


def test_free_helper_called_from_a_method_is_said_at_the_call(tmp_path: Path) -> None:
    files = {
        "train.py": NEURALOP_SCRIPT,
        "training/__init__.py": "",
        "training/training_state.py": NEURALOP_STATE,
    }
    bare = NEURALOP_TRAINER.replace("{SAVE}", "        " + _CALL)
    found = lint_project(tmp_path / "bug", {**files, "training/trainer.py": bare})
    line = bare.splitlines().index("        " + _CALL) + 1
    assert _sev(found, "DDP-ALL-RANKS-IO") == [("trainer.py", line, "warning")]
    guarded = NEURALOP_TRAINER.replace(
        "{SAVE}", "        if dist.get_rank() == 0:\n            " + _CALL
    ).replace("import torch\n", "import torch\nimport torch.distributed as dist\n", 1)
    found = lint_project(tmp_path / "ok", {**files, "training/trainer.py": guarded})
    assert _sev(found, "DDP-ALL-RANKS-IO") == []


# A write deep in a function that computes and returns a value (blind L). ACEsuit/mace @
# 47ea1a7e4c7f6d6cc98a9f94956dcc70984a87c4: mace/cli/run_train.py calls
# `get_dataset_from_xyz` (mace/tools/scripts_utils.py), which calls
# `data.random_train_valid_split` (mace/data/utils.py:135): it splits the data, returns
# the two parts, and writes the validation indices to the same file on every rank (fixed
# in 289aaee by `if distributed_on_root():` around that write). The finding names the
# write, not the entry's call of the step two calls above it.
MACE_SPLIT = """\
import os
import numpy as np


def random_train_valid_split(items, valid_fraction, seed, work_dir, prefix=None):
    size = len(items)
    train_size = min(size - int(valid_fraction * size), size - 1)
    indices = list(range(size))
    rng = np.random.default_rng(seed)
    rng.shuffle(indices)
    filename = f"valid_indices_{seed}.txt"
    path = os.path.join(work_dir, filename)
{WRITE}
    return (
        [items[i] for i in indices[:train_size]],
        [items[i] for i in indices[train_size:]],
    )
"""
MACE_TOOLS = """\
from mace import data


def get_dataset_from_xyz(work_dir, train_path, valid_fraction, seed):
    all_train_configs = data.load_from_xyz(train_path)
    train_configs, valid_configs = data.random_train_valid_split(
        all_train_configs, valid_fraction, seed, work_dir
    )
    return train_configs, valid_configs
"""
MACE_DATA_INIT = """\
from .utils import random_train_valid_split, load_from_xyz
"""
MACE_TRAIN = """\
import os
import torch
import torch.distributed
from torch.nn.parallel import DistributedDataParallel as DDP
from mace.tools.scripts_utils import get_dataset_from_xyz


def main(args):
    torch.distributed.init_process_group(backend="nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    train, valid = get_dataset_from_xyz(
        work_dir=args.work_dir, train_path=args.train_file, valid_fraction=0.1, seed=args.seed
    )
    model = DDP(build_model().to(local_rank), device_ids=[local_rank])
    for batch in make_loader(train):
        model(batch).sum().backward()
"""
_WRITE = """\
    with open(path, "w", encoding="utf-8") as f:
        for index in indices[train_size:]:
            f.write(f"{index}\\n")"""


def test_write_deep_in_a_function_that_returns_is_said_at_the_write(tmp_path: Path) -> None:
    files = {
        "mace/__init__.py": "",
        "mace/cli/__init__.py": "",
        "mace/cli/run_train.py": MACE_TRAIN,
        "mace/tools/__init__.py": "",
        "mace/tools/scripts_utils.py": MACE_TOOLS,
        "mace/data/__init__.py": MACE_DATA_INIT,
    }
    bare = MACE_SPLIT.replace("{WRITE}", _WRITE)
    found = lint_project(
        tmp_path / "bug", {**files, "mace/data/utils.py": bare}, entry="mace/cli/run_train.py"
    )
    line = bare.splitlines().index('    with open(path, "w", encoding="utf-8") as f:') + 1
    assert _sev(found, "DDP-ALL-RANKS-IO") == [("utils.py", line, "warning")]
    guarded = MACE_SPLIT.replace(
        "{WRITE}",
        "    import torch.distributed as dist\n    if dist.get_rank() == 0:\n"
        + "\n".join("    " + x for x in _WRITE.splitlines()),
    )
    found = lint_project(
        tmp_path / "ok", {**files, "mace/data/utils.py": guarded}, entry="mace/cli/run_train.py"
    )
    assert _sev(found, "DDP-ALL-RANKS-IO") == []


# A folder put on sys.path as seen from above the clone (blind B). Snowdar/asv-subtools @
# a10cb414e3e55455798d915157d7904cc9977e4b: pytorch/launcher/runXvector.py does
# `sys.path.insert(0, 'subtools/pytorch')` (the clone is named subtools) then
# `import libs.egs.egs as egs`: the modules are followed from the path less its leading
# folder, and the epoch loop of libs/training/trainer.py, which never calls set_epoch on
# the DistributedSampler egs.py builds, is audited.
ASV_ENTRY = """\
import sys
import torch
sys.path.insert(0, 'subtools/pytorch')
import libs.egs.egs as egs
import libs.training.trainer as trainer

torch.distributed.init_process_group(backend="nccl")
bunch = egs.get_bunch(sys.argv[1])
model = torch.nn.parallel.DistributedDataParallel(build_model().cuda())
trainer.SimpleTrainer(model, bunch).run()
"""
ASV_EGS = """\
import torch
from torch.utils.data import DataLoader


def get_bunch(path):
    dataset = load(path)
    train_sampler = torch.utils.data.distributed.DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=64, sampler=train_sampler)
    return loader
"""
ASV_TRAINER = """\
class SimpleTrainer:
    def __init__(self, model, loader):
        self.model = model
        self.loader = loader

    def run(self):
        for epoch in range(10):
{SET}            for batch in self.loader:
                self.model(batch).sum().backward()
"""


def test_sys_path_seen_from_above_the_clone_is_followed(tmp_path: Path) -> None:
    files = {
        "pytorch/launcher/runXvector.py": ASV_ENTRY,
        "pytorch/libs/__init__.py": "",
        "pytorch/libs/egs/__init__.py": "",
        "pytorch/libs/egs/egs.py": ASV_EGS,
        "pytorch/libs/training/__init__.py": "",
    }
    entry = "pytorch/launcher/runXvector.py"
    bare = ASV_TRAINER.replace("{SET}", "")
    found = lint_project(
        tmp_path / "bug", {**files, "pytorch/libs/training/trainer.py": bare}, entry=entry
    )
    assert [f for f, _, _ in _sev(found, "DDP-SET-EPOCH")] == ["trainer.py"]
    fixed = ASV_TRAINER.replace("{SET}", "            self.loader.sampler.set_epoch(epoch)\n")
    found = lint_project(
        tmp_path / "ok", {**files, "pytorch/libs/training/trainer.py": fixed}, entry=entry
    )
    assert _sev(found, "DDP-SET-EPOCH") == []
