"""Round 50: a name bound only under a rank test and read on every rank
(DDP-RANK-ONLY-NAME: UnboundLocalError on the other ranks), on the real lines (cited with
repository and commit) beside twins from correct code that must stay silent."""

from __future__ import annotations

from ddptui.lint import lint_source

# RVC-Project/Retrieval-based-Voice-Conversion-WebUI @ 57dde51e11e1352ca74d7f48d2c36b77e32abba7
# (as handed in blind batch AG2), infer/modules/train/train.py 1-5, 123-137, 224-240; fixed
# in 9b3f210c (PR #1722): the logger is built before the workers start, for every rank.
RVC = """\
import logging
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from infer.lib.train import utils

logger = logging.getLogger(__name__)


def run(rank, n_gpus, hps, net_g):
    global global_step
    if rank == 0:
        logger = utils.get_logger(hps.model_dir)
        logger.info(hps)
        writer = SummaryWriter(log_dir=hps.model_dir)
    dist.init_process_group(backend="gloo", init_method="env://", world_size=n_gpus, rank=rank)
    net_g = DDP(net_g.cuda(rank), device_ids=[rank])
    try:
        load_checkpoint(net_g)
    except:
        if hps.pretrainG != "":
            if rank == 0:
                logger.info("loaded pretrained %s" % (hps.pretrainG))
            if hasattr(net_g, "module"):
                logger.info(
                    net_g.module.load_state_dict(torch.load(hps.pretrainG, map_location="cpu")["model"])
                )
    for epoch in range(hps.train.epochs):
        if rank == 0:
            train_and_evaluate(rank, epoch, net_g, logger, writer)
        else:
            train_and_evaluate(rank, epoch, net_g, None, None)
"""
BIND = RVC.splitlines().index("        logger = utils.get_logger(hps.model_dir)") + 1
READ = RVC.splitlines().index("                logger.info(") + 1


def _found(text: str) -> list[tuple[int, str]]:
    return [
        (f.line, f.severity) for f in lint_source(text, "train.py") if f.id == "DDP-RANK-ONLY-NAME"
    ]


def test_rank0_logger_read_on_every_rank_is_an_error_at_the_binding() -> None:
    found = [f for f in lint_source(RVC, "train.py") if f.id == "DDP-RANK-ONLY-NAME"]
    assert [(f.line, f.severity) for f in found] == [(BIND, "error")]
    assert [line for _, line in found[0].lines()] == [BIND, READ]
    # writer is read only in the rank-0 arm: not said


def test_the_fix_logger_given_to_every_rank_is_silent() -> None:
    # 9b3f210: `def run(rank, n_gpus, hps, logger)`, the logger made before the spawn
    fixed = RVC.replace(
        "def run(rank, n_gpus, hps, net_g):", "def run(rank, n_gpus, hps, net_g, logger):"
    )
    assert _found(fixed) == []


def test_bound_on_the_other_ranks_too_is_silent() -> None:
    other = RVC.replace(
        "        writer = SummaryWriter(log_dir=hps.model_dir)\n",
        "        writer = SummaryWriter(log_dir=hps.model_dir)\n    else:\n        logger = None\n",
    )
    # bound, but to None: the read on every rank is an AttributeError there instead (round
    # 19's rank_none.py: said at the read, the None as its second place)
    assert _found(other) == [(READ + 2, "error")]
    before = RVC.replace(
        "    if rank == 0:\n        logger =",
        "    logger = None\n    if rank == 0:\n        logger =",
    )
    assert _found(before) == [(READ + 1, "error")]
    found = [f for f in lint_source(before, "train.py") if f.id == "DDP-RANK-ONLY-NAME"]
    assert "'NoneType' object has no attribute 'info'" in found[0].summary


def test_a_global_declaration_or_leaving_ranks_is_silent() -> None:
    assert _found(RVC.replace("global global_step", "global global_step, logger")) == []
    leaves = RVC.replace(
        "        writer = SummaryWriter(log_dir=hps.model_dir)\n",
        "        writer = SummaryWriter(log_dir=hps.model_dir)\n    else:\n        return\n",
    )
    assert _found(leaves) == []


def test_reads_under_the_rank_test_are_silent() -> None:
    # the common correct shape (e.g. pytorch/examples' imagenet, tensorboard writers)
    text = """\
import torch.distributed as dist
from torch.utils.tensorboard import SummaryWriter


def train(args, model, loader):
    rank = dist.get_rank()
    is_main = rank == 0
    if is_main:
        writer = SummaryWriter(args.logdir)
        best = 0.0
    for step, batch in enumerate(loader):
        loss = model(batch).mean()
        loss.backward()
        if is_main and step % 10 == 0:
            writer.add_scalar("loss", loss.item(), step)
    if rank == 0:
        writer.close()
        print(best)
    try:
        print(best)
    except NameError:
        pass
"""
    assert _found(text) == []
