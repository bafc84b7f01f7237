"""Round 37: pitfalls with ids that blind batch AC missed, each on the real lines (cited
with repository and commit) beside a twin that must stay silent."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

# bytedance/ParaGen @ 27c2e9d2a65d6ac26f72f84af2f5c479d84189c6,
# paragen/optim/__init__.py 66-101 (`get_grouped_parameters(DDP(model, ...))`: the wrapper
# is asked for its parameters and dropped; `build_optimizer` returns the bare model) and
# paragen/trainers/trainer.py 142 (the trainer keeps what it returns). The fix, PR #32
# "fix ddp bug", keeps the wrapper.
PARAGEN_OPTIM = """\
import torch
import torch.distributed as dist


def build_optimizer(model, configs, local_rank):
    def get_grouped_parameters(model):
        if 'no_decay' in configs:
            named_parameters = model.named_parameters()
            no_decay = configs.pop('no_decay')
            weight_decay = configs.pop('weight_decay')
            grouped_parameters = [
                {'params': [p for n, p in named_parameters if not any(nd in n for nd in no_decay)],
                 'weight_decay': weight_decay},
                {'params': [p for n, p in named_parameters if any(nd in n for nd in no_decay)],
                 'weight_decay': 0.0}
            ]
        else:
            grouped_parameters = model.parameters()
        return grouped_parameters

    if dist.get_world_size() > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        grouped_parameters = get_grouped_parameters(
            DDP(model, device_ids=[local_rank], output_device=local_rank)
        )
        optimizer = torch.optim.Adam(grouped_parameters, lr=1e-3)
    else:
        optimizer = torch.optim.Adam(get_grouped_parameters(model), lr=1e-3)
    return model, optimizer
"""

PARAGEN_TRAIN = """\
import os

import torch
import torch.distributed as dist

from pkg.optim import build_optimizer


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = torch.nn.Linear(8, 8).cuda()
    model, optimizer = build_optimizer(model, {}, local_rank)
    for _ in range(10):
        loss = model(torch.randn(4, 8).cuda()).sum()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
"""


def _paragen(root: Path, optim: str) -> list:
    files = {"pkg/__init__.py": "", "pkg/optim.py": optim, "train.py": PARAGEN_TRAIN}
    return lint_project(root, files)


def test_wrapper_built_only_for_its_parameters(tmp_path: Path) -> None:
    bad = _paragen(tmp_path / "bad", PARAGEN_OPTIM)
    assert severities(bad, "DDP-NOT-APPLIED") == [("optim.py", 24, "error")], bad
    # twin: the fix keeps the wrapper in the name that is returned and trained
    fixed = PARAGEN_OPTIM.replace(
        "        grouped_parameters = get_grouped_parameters(\n"
        "            DDP(model, device_ids=[local_rank], output_device=local_rank)\n"
        "        )\n",
        "        model = DDP(model, device_ids=[local_rank], output_device=local_rank)\n"
        "        grouped_parameters = get_grouped_parameters(model)\n",
    )
    assert fixed != PARAGEN_OPTIM
    assert severities(_paragen(tmp_path / "fixed", fixed), "DDP-NOT-APPLIED") == []
    # twin: a helper that keeps the module it is given (returns it) is a real wrap
    kept = PARAGEN_OPTIM.replace(
        "        return grouped_parameters\n",
        "        return model\n",
    )
    assert kept != PARAGEN_OPTIM
    assert severities(_paragen(tmp_path / "kept", kept), "DDP-NOT-APPLIED") == []


# BatsResearch/taglets @ e50b7838c303911282ff77ea4d76d57e80a0d133,
# taglets/pipeline/trainable.py 144-215 (`_do_train`, run under mp.spawn, builds a
# DistributedSampler; its `for epoch in ...` never calls set_epoch) and
# taglets/modules/transfer.py 154-180 (another module's own `_train` epoch loop on a
# loader with no sampler). The fix, PR #28, calls train_sampler.set_epoch(epoch).
TAGLETS_TRANSFER = """\
import logging

log = logging.getLogger(__name__)


class TransferTaglet:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.num_epochs = 10

    def train(self, train_data_loader, use_gpu):
        self.model = self.model.cuda()
        for epoch in range(self.num_epochs):
            log.info('Epoch: %s', epoch)
            train_loss = self._train_epoch(train_data_loader)

    def _train_epoch(self, train_data_loader):
        for inputs, labels in train_data_loader:
            self.optimizer.zero_grad()
            loss = self.model(inputs.cuda()).sum()
            loss.backward()
            self.optimizer.step()
        return 0
"""

TAGLETS_TRAINABLE = """\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


class Trainable:
    def __init__(self, model, n_proc):
        self.model = model
        self.n_proc = n_proc
        self.num_epochs = 10
        self.batch_size = 32
        self.optimizer = torch.optim.Adam(self.model.parameters())
        self.criterion = nn.CrossEntropyLoss()

    def train(self, train_data, use_gpu):
        mp.spawn(self._do_train, nprocs=self.n_proc, args=(self, train_data, use_gpu, self.n_proc))

    @staticmethod
    def _do_train(rank, self, train_data, use_gpu, n_proc):
        dist.init_process_group(backend='nccl', init_method='env://', world_size=n_proc, rank=rank)
        self.model = self.model.cuda(rank)
        self.model = nn.parallel.DistributedDataParallel(self.model, device_ids=[rank])
        train_sampler = torch.utils.data.distributed.DistributedSampler(
            train_data, num_replicas=n_proc, rank=rank,
        )
        train_data_loader = torch.utils.data.DataLoader(
            dataset=train_data, batch_size=self.batch_size, shuffle=False,
            num_workers=0, pin_memory=True, sampler=train_sampler
        )
        for epoch in range(self.num_epochs):
            train_loss, train_acc = self._train_epoch(train_data_loader, use_gpu)

    def _train_epoch(self, train_data_loader, use_gpu):
        self.model.train()
        for batch_idx, batch in enumerate(train_data_loader):
            inputs = batch[0].cuda()
            labels = batch[1].cuda()
            self.optimizer.zero_grad()
            outputs = self.model(inputs)
            loss = self.criterion(outputs, labels)
            loss.backward()
            self.optimizer.step()
        return 0, 0
"""

TAGLETS_ENTRY = """\
import torch

from pkg.modules.transfer import TransferTaglet
from pkg.pipeline.trainable import Trainable


def main():
    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.zeros(64).long())
    model = torch.nn.Linear(8, 2)
    TransferTaglet(model, torch.optim.Adam(model.parameters())).train(data, True)
    Trainable(torch.nn.Linear(8, 2), 2).train(data, True)


if __name__ == "__main__":
    main()
"""


def _taglets(root: Path, trainable: str) -> list:
    files = {
        "pkg/__init__.py": "",
        "pkg/modules/__init__.py": "",
        "pkg/modules/transfer.py": TAGLETS_TRANSFER,
        "pkg/pipeline/__init__.py": "",
        "pkg/pipeline/trainable.py": trainable,
        "run.py": TAGLETS_ENTRY,
    }
    return lint_project(root, files, entry="run.py")


def test_set_epoch_said_at_the_loop_beside_the_sampler(tmp_path: Path) -> None:
    bad = _taglets(tmp_path / "bad", TAGLETS_TRAINABLE)
    assert severities(bad, "DDP-SET-EPOCH") == [("trainable.py", 31, "warning")], bad
    # twin: the fix re-seeds the sampler each epoch
    fixed = TAGLETS_TRAINABLE.replace(
        "        for epoch in range(self.num_epochs):\n            train_loss, train_acc",
        "        for epoch in range(self.num_epochs):\n"
        "            train_sampler.set_epoch(epoch)\n"
        "            train_loss, train_acc",
    )
    assert fixed != TAGLETS_TRAINABLE
    assert severities(_taglets(tmp_path / "fixed", fixed), "DDP-SET-EPOCH") == []


# BatsResearch/taglets @ bb6ac49179c041f72ca1acea3f07dbe3955fc277,
# taglets/pipeline/trainable.py 236-266 (rank 0 keeps `copy.deepcopy(self.model
# .state_dict())` of the DDP wrapper, saves it to model.pth.tar and loads the in-memory
# copy back into the wrapper). The fix, bd8d619, saves self.model.module.state_dict().
TAGLETS_BEST = (
    TAGLETS_TRAINABLE.replace("import torch\n", "import copy\n\nimport torch\n", 1)
    .replace(
        "        for epoch in range(self.num_epochs):\n"
        "            train_loss, train_acc = self._train_epoch(train_data_loader, use_gpu)\n",
        "        best_model_to_save = None\n"
        "        best_val_acc = 0\n"
        "        for epoch in range(self.num_epochs):\n"
        "            train_sampler.set_epoch(epoch)\n"
        "            train_loss, val_acc = self._train_epoch(train_data_loader, use_gpu)\n"
        "            if rank == 0:\n"
        "                if val_acc > best_val_acc:\n"
        "                    best_model_to_save = copy.deepcopy(self.model.state_dict())\n"
        "                    best_val_acc = val_acc\n"
        "                    if self.save_dir:\n"
        "                        torch.save(best_model_to_save, self.save_dir + '/model.pth.tar')\n"
        "        if rank == 0:\n"
        "            if best_model_to_save:\n"
        "                self.model.load_state_dict(best_model_to_save)\n",
    )
    .replace(
        "        self.batch_size = 32\n",
        "        self.batch_size = 32\n        self.save_dir = 'out'\n",
    )
)


def test_wrapper_state_saved_though_its_copy_is_loaded_back(tmp_path: Path) -> None:
    assert TAGLETS_BEST != TAGLETS_TRAINABLE
    bad = _taglets(tmp_path / "bad", TAGLETS_BEST)
    assert severities(bad, "DDP-SAVE-WRAPPER") == [("trainable.py", 41, "warning")], bad
    # twin: the fix copies the bare model's state
    fixed = TAGLETS_BEST.replace(
        "copy.deepcopy(self.model.state_dict())", "copy.deepcopy(self.model.module.state_dict())"
    )
    assert severities(_taglets(tmp_path / "fixed", fixed), "DDP-SAVE-WRAPPER") == []
    # twin: the saved file itself is read back into the wrapper: consistent, nothing to say
    reread = TAGLETS_BEST.replace(
        "self.model.load_state_dict(best_model_to_save)",
        "self.model.load_state_dict(torch.load(self.save_dir + '/model.pth.tar'))",
    )
    assert reread != TAGLETS_BEST
    assert severities(_taglets(tmp_path / "reread", reread), "DDP-SAVE-WRAPPER") == []


# hirofumi0810/neural_sp @ 17ffccc6d25b874f3e7932dd8fa12a469eeae8ca,
# neural_sp/bin/asr/train.py 57-70 (on resume every key of conf.yml overwrites args),
# 123, 258-264 (device_ids from args.local_rank), 289-290 (rank 0 saves the whole args).
# The fix, PR #329 "Fix bug in resuming multi-GPU training", leaves local_rank out.
NEURALSP_TRAIN = """\
import os

import torch
import yaml
from torch.nn.parallel import DistributedDataParallel as DDP


def load_config(path):
    with open(path) as f:
        return yaml.safe_load(f)


def save_config(conf, path):
    with open(path, 'w') as f:
        yaml.dump(vars(conf), f)


def main(args):
    torch.manual_seed(args.seed)

    # Load a conf file
    if args.resume:
        conf = load_config(os.path.join(os.path.dirname(args.resume), 'conf.yml'))
        for k, v in conf.items():
            if k != 'resume':
                setattr(args, k, v)

    torch.distributed.init_process_group(backend='nccl', init_method='env://')
    model = torch.nn.Linear(8, 8)
    n = torch.cuda.device_count() // args.local_world_size
    device_ids = list(range(args.local_rank * n, (args.local_rank + 1) * n))
    torch.cuda.set_device(device_ids[0])
    model.cuda(device_ids[0])
    model = DDP(model, device_ids=device_ids)

    if args.local_rank == 0:
        save_config(args, os.path.join(args.save_path, 'conf.yml'))

    for _ in range(10):
        model(torch.randn(4, 8).cuda()).sum().backward()
"""


def test_resume_restores_the_saved_local_rank(tmp_path: Path) -> None:
    bad = lint_project(tmp_path / "bad", {"train.py": NEURALSP_TRAIN})
    assert ("train.py", 25, "error") in severities(bad, "DDP-HARDCODED-DEVICE"), bad
    # twin: the fix leaves the local rank out of the restore
    fixed = NEURALSP_TRAIN.replace("if k != 'resume':", "if k not in ['resume', 'local_rank']:")
    assert fixed != NEURALSP_TRAIN
    assert ("train.py", 25, "error") not in severities(
        lint_project(tmp_path / "fixed", {"train.py": fixed}), "DDP-HARDCODED-DEVICE"
    )
    # twin: the local rank is taken from the launcher again after the restore
    again = NEURALSP_TRAIN.replace(
        "    torch.distributed.init_process_group(",
        "    args.local_rank = int(os.environ['LOCAL_RANK'])\n"
        "    torch.distributed.init_process_group(",
    )
    assert (
        severities(lint_project(tmp_path / "again", {"train.py": again}), "DDP-HARDCODED-DEVICE")
        == []
    )
    # twin: the config written holds chosen fields only, not the whole args
    chosen = NEURALSP_TRAIN.replace(
        "save_config(args, os.path.join", "save_config(args.model_conf, os.path.join"
    )
    assert (
        severities(lint_project(tmp_path / "chosen", {"train.py": chosen}), "DDP-HARDCODED-DEVICE")
        == []
    )
