"""Round 17 (blind batches AI-AK, tuned after their scores): names and syncs that differ
between ranks, each on the real lines (cited with repository and commit) beside twins that
must stay silent: a barrier its callee's arguments gate (a warning); an attribute set on
rank 0 only, and a name bound on rank 0 on one path only, then read on every rank
(DDP-RANK-ONLY-NAME); a trainer that keeps the model inside the wrapper (DDP-NOT-APPLIED);
the zero-first helper entered by rank 0 alone."""

from __future__ import annotations

from ddptui.lint import lint_source

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
    # the unwrapped copy called only to evaluate, the wrapper trained
    evaluated = CREDIT.replace(
        "        self.model = model.module if module else model\n",
        "        self.model = model\n        self.bare = model.module if module else model\n",
    ).replace(
        "            optimizer.step()\n",
        "            optimizer.step()\n\n    def validate(self, loader):\n"
        "        with torch.no_grad():\n            return [self.bare(b) for b in loader]\n",
    )
    assert _not_applied(evaluated) == []


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
