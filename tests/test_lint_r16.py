"""Round 16 (blind batch AF): the loss all-reduced and divided before backward()
(DDP-LOSS-ALL-REDUCED), cut from yuxumin/PoinTr@d6b7f4d34cbff3f9d10ffbed7fe448d70cdcea6c
(utils/dist_utils.py:41-48 reduce_tensor, tools/runner.py:89-102); the fix (PoinTr's next
commit) reduces copies for the log and backpropagates the local losses."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

DIST_UTILS = """\
import torch


def reduce_tensor(tensor, args):
    '''
        for acc kind, get the mean in each gpu
    '''
    rt = tensor.clone()
    torch.distributed.all_reduce(rt, op=torch.distributed.ReduceOp.SUM)
    rt /= args.world_size
    return rt
"""

RUNNER = """\
import torch
from torch.nn.parallel import DistributedDataParallel

from utils import dist_utils


def run_net(args, base_model, train_dataloader, optimizer, gt):
    base_model = DistributedDataParallel(base_model.cuda(), device_ids=[args.local_rank])
    for idx, (taxonomy_ids, model_ids, partial) in enumerate(train_dataloader):
        ret = base_model(partial)
        sparse_loss, dense_loss = base_model.module.get_loss(ret, gt)

        sparse_loss = dist_utils.reduce_tensor(sparse_loss, args)
        dense_loss = dist_utils.reduce_tensor(dense_loss, args)

        _loss = sparse_loss + dense_loss
        _loss.backward()
        optimizer.step()
"""

# the fix: the local losses are backpropagated, reduced copies are logged
FIXED = RUNNER.replace(
    """        sparse_loss = dist_utils.reduce_tensor(sparse_loss, args)
        dense_loss = dist_utils.reduce_tensor(dense_loss, args)

        _loss = sparse_loss + dense_loss
        _loss.backward()
""",
    """        _loss = sparse_loss + dense_loss
        _loss.backward()
        sparse_loss = dist_utils.reduce_tensor(sparse_loss, args)
        dense_loss = dist_utils.reduce_tensor(dense_loss, args)
""",
)

MAIN = """\
import torch.distributed as dist

from tools.runner import run_net

dist.init_process_group("nccl")
run_net(None, None, None, None, None)
"""


def _lint(root: Path, runner: str, utils: str = DIST_UTILS) -> list[tuple[str, int, str]]:
    files = {
        "main.py": MAIN,
        "tools/__init__.py": "",
        "tools/runner.py": runner,
        "utils/__init__.py": "",
        "utils/dist_utils.py": utils,
    }
    return severities(lint_project(root, files, entry="main.py"), "DDP-LOSS-ALL-REDUCED")


def test_a_loss_reduced_by_a_dividing_helper_then_backpropagated_is_a_warning(
    tmp_path: Path,
) -> None:
    assert _lint(tmp_path, RUNNER) == [("runner.py", 13, "warning"), ("runner.py", 14, "warning")]


def test_the_fix_reducing_after_backward_for_the_log_is_silent(tmp_path: Path) -> None:
    assert _lint(tmp_path, FIXED) == []


def test_a_helper_that_averages_with_reduceop_avg_leaves_the_gradient_alone(
    tmp_path: Path,
) -> None:
    """No division autograd records: the gradient is the local one, DDP averages once."""
    avg = DIST_UTILS.replace("ReduceOp.SUM", "ReduceOp.AVG").replace(
        "    rt /= args.world_size\n", ""
    )
    assert _lint(tmp_path, RUNNER, avg) == []


def test_the_differentiable_all_reduce_of_torch_distributed_nn_is_silent(tmp_path: Path) -> None:
    nn = DIST_UTILS.replace(
        "torch.distributed.all_reduce(rt, op=torch.distributed.ReduceOp.SUM)",
        "torch.distributed.nn.functional.all_reduce(rt)",
    )
    assert _lint(tmp_path, RUNNER, nn) == []


def test_an_in_place_reduce_and_division_in_the_loop_itself_fires(tmp_path: Path) -> None:
    inline = RUNNER.replace(
        "        sparse_loss = dist_utils.reduce_tensor(sparse_loss, args)\n",
        "        torch.distributed.all_reduce(sparse_loss)\n"
        "        sparse_loss /= args.world_size\n",
    )
    assert _lint(tmp_path, inline) == [
        ("runner.py", 13, "warning"),
        ("runner.py", 15, "warning"),
    ]


# MDIL-SNU/SevenNet@41d3831756036efd17184b69e10a9b7e80c9cbe3: sevenn/scripts/train.py 28-34
# (the DistributedSampler) and sevenn/scripts/processing_epoch.py 65-77 (the epoch loop runs
# each loader of a dict); the fix (8a7bc7a) calls `loader.sampler.set_epoch(epoch)` inside
# the loop over the loaders, just before `run_one_epoch(loader, ...)`.
SEVENNET = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler


def loader_from_config(dataset, batch_size, shuffle=True):
    loader_args = {'dataset': dataset, 'batch_size': batch_size, 'shuffle': shuffle}
    sampler = DistributedSampler(dataset, dist.get_world_size(), dist.get_rank(), shuffle=shuffle)
    loader_args.update({'sampler': sampler})
    loader_args.pop('shuffle')
    return DataLoader(**loader_args)


def processing_epoch(trainer, loaders, start_epoch, total_epoch):
    for epoch in range(start_epoch, total_epoch + 1):
        lr = trainer.get_lr()
        errors = {}
        for k, loader in loaders.items():
            trainer.run_one_epoch(loader, k == 'trainset')
            errors[k] = 0.0
        trainer.scheduler_step(errors)


def main(trainer, train_set, valid_set):
    dist.init_process_group('nccl')
    loaders = {'trainset': loader_from_config(train_set, 4), 'validset': loader_from_config(valid_set, 4)}
    processing_epoch(trainer, loaders, 1, 10)
"""


def test_set_epoch_names_where_a_loop_over_the_loaders_runs_each_loader(tmp_path: Path) -> None:
    found = [f for f in lint_project(tmp_path, {"train.py": SEVENNET}) if f.id == "DDP-SET-EPOCH"]
    assert [(f.line, [(p.line, p.label) for p in f.also]) for f in found] == [
        (15, [(18, "loader iterated at"), (19, "loader iterated at")])
    ]


# NVIDIA/DeepLearningExamples@729963dd47e7c8bd462ad10bfac7a7b0b604e6dd,
# PyTorch/LanguageModeling/Transformer-XL/pytorch: utils/distributed.py 38-46 (`barrier()`)
# and 117-124 (`sync_workers()`), train.py 331-338 (the rank-0 save inside
# `with sync_workers()`) and 355-361 (`load_checkpoint`, every rank, after training).
# A correct project (blind AG2): leaving the `with` is a barrier, so the write is waited for.
DIST = """\
from contextlib import contextmanager

import torch


def barrier():
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
    elif torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def get_rank():
    return torch.distributed.get_rank()


@contextmanager
def sync_workers():
    rank = get_rank()
    yield rank
    barrier()
"""

TXL = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import utils


def save_checkpoint(state, work_dir):
    with utils.distributed.sync_workers() as rank:
        last_chkpt_path = os.path.join(work_dir, 'checkpoint_last.pt')
        if rank == 0:
            torch.save(state, last_chkpt_path)


def load_checkpoint(path):
    return torch.load(path, map_location='cpu')


def main(args, model, batches):
    dist.init_process_group('nccl')
    torch.cuda.set_device(args.local_rank)
    model = DistributedDataParallel(model.cuda(), device_ids=[args.local_rank])
    for step, batch in enumerate(batches):
        model(batch).sum().backward()
        save_checkpoint({'model': model.module.state_dict()}, args.work_dir)
    checkpoint = load_checkpoint(os.path.join(args.work_dir, 'checkpoint_last.pt'))
    model.module.load_state_dict(checkpoint['model'])


if __name__ == '__main__':
    main(None, None, None)
"""


def _txl(root: Path, dist_utils: str) -> list[tuple[str, int, str]]:
    files = {
        "train.py": TXL,
        "utils/__init__.py": "from . import distributed\n",
        "utils/distributed.py": dist_utils,
    }
    return severities(lint_project(root, files), "DDP-CKPT-BARRIER")


def test_a_context_manager_whose_exit_is_a_barrier_waits_for_the_write_inside_it(
    tmp_path: Path,
) -> None:
    assert _txl(tmp_path, DIST) == []


def test_the_same_context_manager_without_the_barrier_leaves_the_write_unwaited(
    tmp_path: Path,
) -> None:
    no_barrier = DIST.replace("    yield rank\n    barrier()\n", "    yield rank\n")
    assert _txl(tmp_path, no_barrier) == [("train.py", 18, "error")]


def test_a_barrier_on_entry_only_does_not_wait_for_the_write(tmp_path: Path) -> None:
    entry = DIST.replace(
        "    rank = get_rank()\n    yield rank\n    barrier()\n",
        "    rank = get_rank()\n    barrier()\n    yield rank\n",
    )
    assert _txl(tmp_path, entry) == [("train.py", 18, "error")]


# sczhou/ProPainter@e870e79321c31b733e2031af5aa2fb1fe3ac7eec core/trainer.py (a correct
# project, blind AF1): the Trainer resumes with `self.load()` in its `__init__` (line 103)
# and saves on rank 0 in `save()` with no barrier after; nothing loads after a save.
TRAINER = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, config, net):
        self.config = config
        self.netG = net.to(config['device'])
        self.load()
        self.netG = DDP(self.netG, device_ids=[config['local_rank']])

    def load(self):
        gen_path = os.path.join(self.config['save_dir'], 'gen_latest.pth')
        if os.path.isfile(gen_path):
            self.netG.load_state_dict(torch.load(gen_path, map_location=self.config['device']))

    def save(self, it):
        if self.config['global_rank'] == 0:
            gen_path = os.path.join(self.config['save_dir'], 'gen_latest.pth')
            torch.save(self.netG.module.state_dict(), gen_path)

    def train(self, batches):
        for it, batch in enumerate(batches):
            self.netG(batch).sum().backward()
            self.save(it)
"""

PROPAINTER_MAIN = """\
import torch.distributed as dist

from core.trainer import Trainer

dist.init_process_group('nccl')
trainer = Trainer({}, None)
trainer.train([])
"""


def _propainter(root: Path, main: str) -> list[tuple[str, int, str]]:
    files = {"train.py": main, "core/__init__.py": "", "core/trainer.py": TRAINER}
    return severities(lint_project(root, files), "DDP-CKPT-BARRIER")


def test_a_trainer_that_loads_only_when_it_is_built_races_no_save(tmp_path: Path) -> None:
    assert _propainter(tmp_path, PROPAINTER_MAIN) == []


def test_the_same_trainer_reloaded_after_training_still_warns(tmp_path: Path) -> None:
    again = PROPAINTER_MAIN + "trainer.load()\n"
    assert _propainter(tmp_path, again) == [("trainer.py", 18, "error"), ("trainer.py", 23, "warning")]


# sunlicai/MAE-DFER@80b651d4 (a correct project, blind AH1), BEiT's fine-tuning pattern:
# run_class_finetuning.py 483-497 (a DeepSpeed engine in one arm, DDP in the other) and
# engine_for_finetuning.py 75-80 (`model.step()` where only the DeepSpeed arm left
# `loss_scaler` None).
ENGINE = """\
class Stepper:  # the project's own classes have `step` and `backward` (schedulers, scalers)
    def step(self):
        pass

    def backward(self, loss):
        pass


def train_one_epoch(model, criterion, data_loader, optimizer, loss_scaler):
    for samples, targets in data_loader:
        loss = criterion(model(samples), targets)
        if loss_scaler is None:
            model.backward(loss)
            model.step()
        else:
            loss_scaler(loss, optimizer, parameters=model.parameters())
"""

FINETUNE = """\
import torch
import torch.distributed as dist

from engine_for_finetuning import train_one_epoch

try:
    import deepspeed
    ds_init = deepspeed.initialize
except ImportError:
    ds_init = None


def main(args, model, criterion, loader, loss_scaler):
    dist.init_process_group('nccl')
    torch.cuda.set_device(args.gpu)
    torch.manual_seed(args.seed)
    if args.enable_deepspeed:
        loss_scaler = None
        model, optimizer, _, _ = ds_init(args=args, model=model)
    else:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])
        optimizer = torch.optim.AdamW(model.parameters())
    train_one_epoch(model, criterion, loader, optimizer, loss_scaler)
"""


def _finetune(root: Path, main: str) -> list[tuple[str, int, str]]:
    files = {"run_class_finetuning.py": main, "engine_for_finetuning.py": ENGINE}
    return severities(
        lint_project(root, files, entry="run_class_finetuning.py"), "DDP-WRAPPER-ATTR"
    )


def test_deepspeed_engine_members_read_where_the_project_builds_one_are_not_certain(
    tmp_path: Path,
) -> None:
    assert _finetune(tmp_path, FINETUNE) == [
        ("engine_for_finetuning.py", 13, "warning"),
        ("engine_for_finetuning.py", 14, "warning"),
    ]


def test_without_a_deepspeed_engine_the_same_read_stays_an_error(tmp_path: Path) -> None:
    no_ds = FINETUNE.replace("    ds_init = deepspeed.initialize\n", "    ds_init = None\n")
    assert _finetune(tmp_path, no_ds) == [
        ("engine_for_finetuning.py", 13, "error"),
        ("engine_for_finetuning.py", 14, "error"),
    ]


# caizhongang/SMPLer-X@07d9834450f78241e243bdd1d3f28bbd39749899: main/config.py 60-64 and
# 123 (`sys.path.insert(0, osp.join(cfg.root_dir, 'common'))` while the module is
# imported), main/train.py 2 and 12 (`from config import cfg`, then `from base import
# Trainer`), common/base.py 95-98 (the resume `torch.load` without map_location, blind AH1;
# the fix maps it to the rank's GPU).
SMPLERX_CONFIG = """\
import os
import os.path as osp
import sys


class Config:
    cur_dir = osp.dirname(os.path.abspath(__file__))
    root_dir = osp.join(cur_dir, '..')


cfg = Config()
sys.path.insert(0, osp.join(cfg.root_dir, 'common'))
"""

SMPLERX_BASE = """\
import torch


class Trainer:
    def load_model(self, model, ckpt_path):
        ckpt = torch.load(ckpt_path)
        model.load_state_dict(ckpt['network'], strict=False)
"""

SMPLERX_TRAIN = """\
import torch
import torch.distributed as dist
from config import cfg
from base import Trainer


def main(args, model):
    dist.init_process_group('nccl')
    torch.cuda.set_device(args.local_rank)
    trainer = Trainer()
    trainer.load_model(model, args.pretrained_model_path)


if __name__ == '__main__':
    main(None, None)
"""


def _smplerx(root: Path, config: str) -> list[tuple[str, int, str]]:
    files = {
        "main/train.py": SMPLERX_TRAIN,
        "main/config.py": config,
        "common/base.py": SMPLERX_BASE,
    }
    return severities(lint_project(root, files, entry="main/train.py"), "DDP-LOAD-MAP-LOCATION")


def test_a_from_import_of_a_config_that_extends_sys_path_reaches_its_folders(
    tmp_path: Path,
) -> None:
    assert _smplerx(tmp_path, SMPLERX_CONFIG) == [("base.py", 6, "warning")]


def test_without_the_sys_path_insert_the_module_stays_unknown(tmp_path: Path) -> None:
    no_path = SMPLERX_CONFIG.replace("sys.path.insert(0, osp.join(cfg.root_dir, 'common'))\n", "")
    assert _smplerx(tmp_path, no_path) == []
