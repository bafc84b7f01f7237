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
