"""Round 26: blind batch S's two false errors on correct projects and its misses, each on
the real lines (cited with repository and commit) beside a twin: for the false errors a
twin where the plain pitfall stays an error, for the misses a correct twin that stays
silent."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

from ddptui.lint.model import LintFinding

# Pang-Yatian/Point-MAE @ 7445a68068d707da6d959b66773bfef84c4e3e32: main.py:80-86 (the
# runner picked by if/else), tools/builder.py:91-100 and 127-129 (resume_model loads on
# every rank, save_checkpoint writes on local rank 0), tools/runner_*.py run_net.
PM_MAIN = """\
import torch
import torch.distributed as dist
from tools import pretrain_run_net as pretrain
from tools import finetune_run_net as finetune


def main(args):
    torch.cuda.set_device(args.local_rank)
    dist.init_process_group(backend='nccl')
{RUN}

if __name__ == '__main__':
    main(None)
"""
PM_IFELSE = """\
    if args.finetune_model or args.scratch_model:
        finetune(args)
    else:
        pretrain(args)
"""
PM_BOTH = """\
    finetune(args)
    pretrain(args)
"""
PM_INIT = """\
from .runner_pretrain import run_net as pretrain_run_net
from .runner_finetune import run_net as finetune_run_net
"""
PM_BUILDER = """\
import os
import torch


def resume_model(base_model, args):
    ckpt_path = os.path.join(args.experiment_path, 'ckpt-last.pth')
    if not os.path.exists(ckpt_path):
        return 0, 0
    map_location = {'cuda:%d' % 0: 'cuda:%d' % args.local_rank}
    state_dict = torch.load(ckpt_path, map_location=map_location)
    base_model.load_state_dict(state_dict['base_model'])
    return state_dict['epoch'] + 1, state_dict['best_metrics']


def save_checkpoint(base_model, epoch, prefix, args):
    if args.local_rank == 0:
        torch.save({'base_model': base_model.module.state_dict(), 'epoch': epoch},
                   os.path.join(args.experiment_path, prefix + '.pth'))
"""
PM_RUNNER = """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from tools import builder


def run_net(args):
    base_model = torch.nn.Linear(4, 4).to(args.local_rank)
    start_epoch = 0
    if args.resume:
        start_epoch, best_metric = builder.resume_model(base_model, args)
    base_model = DDP(base_model, device_ids=[args.local_rank])
    for epoch in range(start_epoch, args.max_epoch):
        base_model(torch.zeros(4)).sum().backward()
        builder.save_checkpoint(base_model, epoch, 'ckpt-last', args)
"""


def _pointmae(root: Path, run: str) -> list[LintFinding]:
    return lint_project(
        root,
        {
            "main.py": PM_MAIN.replace("{RUN}", run),
            "tools/__init__.py": PM_INIT,
            "tools/builder.py": PM_BUILDER,
            "tools/runner_pretrain.py": PM_RUNNER,
            "tools/runner_finetune.py": PM_RUNNER,
        },
        entry="main.py",
    )


def test_pointmae_save_and_load_in_two_branches_of_one_if(tmp_path: Path) -> None:
    ok = _pointmae(tmp_path / "ok", PM_IFELSE)
    assert not severities(ok, "DDP-CKPT-BARRIER"), ok
    # twin: the two runners run one after the other: the second reads what the first's
    # rank 0 wrote, with no barrier in between: the error stands
    bad = _pointmae(tmp_path / "bad", PM_BOTH)
    assert ("builder.py", 10, "error") in severities(bad, "DDP-CKPT-BARRIER"), bad


# jiaweizzhao/GaLore @ 2cc66f88cce189e505affbb91042a8e77f5bf4e9, torchrun_main.py:177-196
# (the streamed C4 split by node, the loader) and 401-409 (the step-bounded loop).
GALORE = """\
import os
import torch
import torch.distributed as dist
import datasets
from torch.nn.parallel import DistributedDataParallel as DDP


def main(args):
    global_rank = int(os.environ['RANK'])
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl", rank=global_rank, world_size=world_size)
    data = datasets.load_dataset("allenai/c4", "en", split="train", streaming=True)
    data = datasets.distributed.split_dataset_by_node(
        data, rank=global_rank, world_size=world_size,
    )
    dataloader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=args.workers)
    model = DDP(torch.nn.Linear(4, 4).to(local_rank), device_ids=[local_rank])
    update_step = 0
    for batch_idx, batch in enumerate(dataloader):
{STOP}
        loss = model(batch)
        loss.backward()
        update_step += 1


if __name__ == "__main__":
    main(None)
"""
_STOP = """\
        if update_step > args.num_training_steps:
            print(f"Rank {global_rank} stopping training.")
            break
"""


def test_galore_split_stream_with_a_step_bound(tmp_path: Path) -> None:
    ok = lint_project(tmp_path / "ok", {"train.py": GALORE.replace("{STOP}", _STOP)})
    assert severities(ok, "DDP-UNEVEN-BATCH") == [("train.py", 18, "warning")], ok
    assert any("fixed number of steps" in f.summary for f in ok)
    # twin: the hand split looped over to its end: the error stands
    bad = lint_project(tmp_path / "bad", {"train.py": GALORE.replace("{STOP}\n", "")})
    assert severities(bad, "DDP-UNEVEN-BATCH") == [("train.py", 18, "error")], bad


# thu-spmi/CAT @ 787eaa160baabe15602f8fac03964111c04e92a6 (and d4858c54), scripts/ctc-crf/
# train.py:30-50 (main spawns main_worker) and 190-244 (the seeds in the __main__ block).
CAT = """\
import argparse
import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def main(args):
    ngpus_per_node = torch.cuda.device_count()
    args.world_size = ngpus_per_node * args.world_size
    mp.spawn(main_worker, nprocs=ngpus_per_node, args=(ngpus_per_node, args))


def main_worker(gpu, ngpus_per_node, args):
    args.gpu = gpu
{SEED}
    args.rank = args.rank * ngpus_per_node + gpu
    dist.init_process_group(backend=args.dist_backend, init_method=args.dist_url,
                            world_size=args.world_size, rank=args.rank)
    torch.cuda.set_device(args.gpu)
    model = DDP(torch.nn.Linear(4, 4).cuda(args.gpu), device_ids=[args.gpu])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    SEED = args.seed
    torch.manual_seed(SEED)
    torch.cuda.manual_seed_all(SEED)
    np.random.seed(SEED)
    main(args)
"""


def test_cat_seeds_only_in_the_launching_process(tmp_path: Path) -> None:
    bad = lint_project(tmp_path / "bad", {"train.py": CAT.replace("{SEED}\n", "")})
    assert severities(bad, "DDP-SEED") == [("train.py", 16, "info")], bad
    assert any("launching process" in f.summary and "line 29" in f.summary for f in bad)
    # correct twin (the fix, 5c34dc15): main_worker seeds first: silent
    seed = "    torch.manual_seed(args.seed)\n    np.random.seed(args.seed)"
    ok = lint_project(tmp_path / "ok", {"train.py": CAT.replace("{SEED}", seed)})
    assert not severities(ok, "DDP-SEED"), ok
    # a literal seed before mp.spawn (rasbt/LLMs-from-scratch's DDP-script.py, a correct
    # case of blind batch P, `torch.manual_seed(123)`): no setting goes unseen: silent
    literal = CAT.replace("{SEED}\n", "").replace("SEED = args.seed", "SEED = 123")
    lit = lint_project(tmp_path / "lit", {"train.py": literal})
    assert not severities(lit, "DDP-SEED"), lit


# AutoResearch/EEG-GAN @ 67456eb09cb57cef2dc785e9f123a9da94289cd6 (and 738f1f1f):
# helpers/trainer.py:91-124 (training calls self.batch_train), 151-168 and 267 (the reads),
# helpers/ddp_training.py:13-21, 56-61 and 107-124 (the subclass wraps; the process runs
# `training.training(dataset)` on its instance).
EEG_TRAINER = """\
import torch


class AutoencoderGenerator(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.decode = False


class Trainer:
    def __init__(self, generator, discriminator, opt):
        self.generator = generator
        self.discriminator = discriminator

    def training(self, dataset):
        for data in dataset:
            self.batch_train(data)

    def batch_train(self, data):
{READS}
"""
EEG_BAD = """\
        if self.discriminator.channels > 1:
            data = data[:, :1]
        gen_imgs = self.generator(data)
        if isinstance(self.generator, AutoencoderGenerator) and not self.generator.decode:
            gen_imgs = self.generator.autoencoder.decode(gen_imgs)
        self.discriminator(gen_imgs).mean().backward()
"""
EEG_OK = """\
        disc = self.discriminator.module if hasattr(self.discriminator, 'module') else self.discriminator
        if disc.channels > 1:
            data = data[:, :1]
        gen_imgs = self.generator(data)
        if not hasattr(self.generator, 'module'):
            if isinstance(self.generator, AutoencoderGenerator) and not self.generator.decode:
                gen_imgs = self.generator.autoencoder.decode(gen_imgs)
        else:
            if isinstance(self.generator.module, AutoencoderGenerator) and not self.generator.module.decode:
                gen_imgs = self.generator.module.autoencoder.decode(gen_imgs)
        self.discriminator(gen_imgs).mean().backward()
"""
EEG_DDP = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import helpers.trainer as trainer


class DDPTrainer(trainer.Trainer):
    def __init__(self, generator, discriminator, opt):
        super().__init__(generator, discriminator, opt)

    def set_ddp_framework(self):
        self.generator.to(self.rank)
        self.discriminator.to(self.rank)
        self.generator = DDP(self.generator, device_ids=[self.rank])
        self.discriminator = DDP(self.discriminator, device_ids=[self.rank])


def run(rank, world_size, training, opt):
    dist.init_process_group('nccl', rank=rank, world_size=world_size)
    training.rank = rank
    training.set_ddp_framework()
    _ddp_training(training, opt)


def _ddp_training(training: DDPTrainer, opt):
    dataset = torch.zeros(10, 4)
    training.training(dataset)
"""
EEG_MAIN = """\
import torch
import torch.multiprocessing as mp
from helpers.ddp_training import run, DDPTrainer

if __name__ == '__main__':
    training = DDPTrainer(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1), {})
    mp.spawn(run, args=(2, training, {}), nprocs=2, join=True)
"""


def _eeg(root: Path, reads: str) -> list[LintFinding]:
    files = {
        "gan_training_main.py": EEG_MAIN,
        "helpers/__init__.py": "",
        "helpers/trainer.py": EEG_TRAINER.replace("{READS}", reads),
        "helpers/ddp_training.py": EEG_DDP,
    }
    return lint_project(root, files, entry="gan_training_main.py")


def test_eeggan_base_class_reads_on_the_subclass_wrapper(tmp_path: Path) -> None:
    bad = _eeg(tmp_path / "bad", EEG_BAD)
    got = severities(bad, "DDP-WRAPPER-ATTR")
    assert sorted((n, line) for n, line, _ in got) == [("trainer.py", 20), ("trainer.py", 23)], bad
    assert any("is never true under DDP" in f.summary for f in bad)
    # correct twin (the fixes 961d651 / 500ab9d): each read tells the wrapper apart
    ok = _eeg(tmp_path / "ok", EEG_OK)
    assert not severities(ok, "DDP-WRAPPER-ATTR"), ok


# thu-spmi/CAT @ d4858c54d71a98f9d8b1b467974933bf2348870e, scripts/ctc-crf/utils.py:
# 380-418 (test(): the dev loss summed over all ranks, divided by this node's GPU count).
CAT_TEST = """\
import torch
import torch.distributed as dist


def test(testloader, model, args):
    model.eval()
    losses = []
    with torch.no_grad():
        for i, minibatch in enumerate(testloader):
            logits, labels = minibatch
            real_loss = model(logits.cuda(args.gpu, non_blocking=True), labels)
            dist.all_reduce(real_loss, dist.ReduceOp.SUM)
            real_loss = real_loss / {DIV}
            losses.append(real_loss.item())
    return sum(losses) / len(losses)
"""
CAT_MAIN = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import utils


def main_worker(gpu, args):
    torch.cuda.set_device(gpu)
    dist.init_process_group(backend='nccl', init_method=args.dist_url,
                            world_size=args.world_size, rank=args.rank)
    model = DDP(torch.nn.Linear(4, 4).cuda(gpu), device_ids=[gpu])
    utils.test([], model, args)
"""


def test_cat_sum_over_ranks_divided_by_device_count(tmp_path: Path) -> None:
    files = {
        "train.py": CAT_MAIN,
        "utils.py": CAT_TEST.replace("{DIV}", "torch.cuda.device_count()"),
    }
    bad = lint_project(tmp_path / "bad", files)
    assert severities(bad, "DDP-WORLD-FROM-DEVICE-COUNT") == [("utils.py", 13, "warning")], bad
    # correct twin (the fix, c3101b9): the world size
    files["utils.py"] = CAT_TEST.replace("{DIV}", "dist.get_world_size()")
    ok = lint_project(tmp_path / "ok", files)
    assert not severities(ok, "DDP-WORLD-FROM-DEVICE-COUNT"), ok


# kakaobrain/scrl @ f5bc426ed6eef130d44dd3a5609dc0772da59613: trainer/trainer.py:118-140
# (the periodic save under is_main_process, the best save not), trainer/base.py:159-188
# (both reach `_save_checkpoint`'s torch.save).
SCRL_BASE = """\
import torch


class TrainerBase:
    def _save_checkpoint(self, tag):
        save_path = f"{self.save_dir}/checkpoint_" + str(tag) + ".pth"
        state_dict = {'tag': str(tag), 'epoch': self.cur_epoch}
        for key, target in self._saving_targets.items():
            state_dict[f"{key}_state_dict"] = target.state_dict()
        torch.save(state_dict, save_path)
        return save_path

    def save_checkpoint(self, epoch):
        return self._save_checkpoint(str(epoch))

    def save_best_checkpoint(self):
        return self._save_checkpoint('best')
"""
SCRL_TRAINER = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from trainer.base import TrainerBase


def is_main_process():
    return dist.get_rank() == 0


class SCRLTrainer(TrainerBase):
    def __init__(self, save_dir, local_rank):
        self.save_dir = save_dir
        self.cur_epoch = 0
        self.model = DDP(torch.nn.Linear(4, 4).cuda(local_rank), device_ids=[local_rank])
        self._saving_targets = {'model': self.model.module}

    def run(self, loader, max_epochs):
        best = 0.0
        for epoch in range(max_epochs):
            for x in loader:
                self.model(x).sum().backward()
            if is_main_process() and epoch % 10 == 0:
                self.save_checkpoint(epoch)
            score = float(epoch)
            if score > best:
                best = score
{BEST}
"""
SCRL_MAIN = """\
import os
import torch
import torch.distributed as dist
from trainer.trainer import SCRLTrainer

if __name__ == '__main__':
    local_rank = int(os.environ['LOCAL_RANK'])
    torch.cuda.set_device(local_rank)
    dist.init_process_group('nccl')
    SCRLTrainer('out', local_rank).run([], 100)
"""


def _scrl(root: Path, best: str) -> list[LintFinding]:
    files = {
        "main.py": SCRL_MAIN,
        "trainer/__init__.py": "",
        "trainer/base.py": SCRL_BASE,
        "trainer/trainer.py": SCRL_TRAINER.replace("{BEST}", best),
    }
    return lint_project(root, files, entry="main.py")


def test_scrl_the_one_unguarded_call_beside_a_guarded_one(tmp_path: Path) -> None:
    bad = _scrl(tmp_path / "bad", "                self.save_best_checkpoint()")
    assert ("trainer.py", 28, "warning") in severities(bad, "DDP-ALL-RANKS-IO"), bad
    # correct twin (the fix, 053dfee): the best save under is_main_process too: silent
    ok = _scrl(
        tmp_path / "ok",
        "                if is_main_process():\n                    self.save_best_checkpoint()",
    )
    assert not severities(ok, "DDP-ALL-RANKS-IO"), ok


# opendilab/LightZero @ b229a7f8a08de9f6c7f3cdcde5905f09196ea56a:
# lzero/reward_model/rnd_reward_model.py:76-77 and 161-164 (a registered reward model that
# makes its own SummaryWriter when given none), lzero/entry/
# train_unizero_with_reward_model.py:100-130 (tb_logger None on ranks but 0).
RND = """\
import torch
from ding.utils import REWARD_MODEL_REGISTRY


@REWARD_MODEL_REGISTRY.register('rnd_muzero')
class RNDRewardModel(torch.nn.Module):
    def __init__(self, config, device, tb_logger):
        super().__init__()
        self.device = device
{LOGGER}
        self.predictor = torch.nn.Linear(4, 4)
        self.opt = torch.optim.Adam(self.predictor.parameters())

    def train_with_data(self, data):
        loss = self.predictor(data).sum()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        if self.tb_logger is not None:
            self.tb_logger.add_scalar('rnd/loss', loss.item())
"""
RND_BAD = """\
        if tb_logger is None:
            from tensorboardX import SummaryWriter
            tb_logger = SummaryWriter('rnd_reward_model')
        self.tb_logger = tb_logger"""
RND_OK = "        self.tb_logger = tb_logger"
RND_ENTRY = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from tensorboardX import SummaryWriter
from ding.utils import get_rank
from reward_model import RNDRewardModel


def train(cfg):
    dist.init_process_group('nccl')
    torch.cuda.set_device(get_rank() % torch.cuda.device_count())
    tb_logger = SummaryWriter('log/serial') if get_rank() == 0 else None
    model = DDP(torch.nn.Linear(4, 4).cuda())
    reward_model = RNDRewardModel(cfg, 'cuda', tb_logger)
    for step in range(10):
        model(torch.zeros(4).cuda()).sum().backward()
        reward_model.train_with_data(torch.zeros(4))


if __name__ == '__main__':
    train({})
"""


def test_lightzero_fallback_writer_in_a_registered_class(tmp_path: Path) -> None:
    files = {"train.py": RND_ENTRY, "reward_model.py": RND.replace("{LOGGER}", RND_BAD)}
    bad = lint_project(tmp_path / "bad", files)
    assert ("reward_model.py", 12, "warning") in severities(bad, "DDP-ALL-RANKS-IO"), bad
    # correct twin (the fix, 276c193): the model keeps the logger it is given (None off
    # rank 0) and tests it before writing: silent
    files["reward_model.py"] = RND.replace("{LOGGER}", RND_OK)
    ok = lint_project(tmp_path / "ok", files)
    assert not [x for x in severities(ok, "DDP-ALL-RANKS-IO") if x[0] == "reward_model.py"], ok


# deepset-ai/FARM @ bf13c4a33849bace29f2d04a7a7b05fb52aa73b1: examples/
# train_from_scratch.py:26-41 (the logger started on every rank), farm/utils.py:117-132
# (MLFlowLogger.init_experiment, a thin wrapper of mlflow.start_run).
FARM_UTILS = """\
import mlflow


class MLFlowLogger:
    def __init__(self, tracking_uri):
        self.tracking_uri = tracking_uri

    def init_experiment(self, experiment_name, run_name=None, nested=True):
        try:
            mlflow.set_tracking_uri(self.tracking_uri)
            mlflow.set_experiment(experiment_name)
            mlflow.start_run(run_name=run_name, nested=nested)
        except ConnectionError:
            raise Exception("MLFlow cannot connect")
"""
FARM_EXAMPLE = """\
import argparse
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from farm_utils import MLFlowLogger


def train_from_scratch():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=-1)
    args = parser.parse_args()
    ml_logger = MLFlowLogger(tracking_uri="")
{INIT}
    torch.cuda.set_device(args.local_rank)
    dist.init_process_group(backend="nccl")
    model = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[args.local_rank])
    model(torch.zeros(4).cuda()).sum().backward()


if __name__ == "__main__":
    train_from_scratch()
"""
_FARM_INIT = '    ml_logger.init_experiment(experiment_name="train_from_scratch", run_name="run")'


def test_farm_thin_logger_class_said_at_the_callers_line(tmp_path: Path) -> None:
    files = {"train.py": FARM_EXAMPLE.replace("{INIT}", _FARM_INIT), "farm_utils.py": FARM_UTILS}
    bad = lint_project(tmp_path / "bad", files)
    assert severities(bad, "DDP-ALL-RANKS-IO") == [("train.py", 13, "warning")], bad
    # correct twin (the fix, 94cae29): started on the first process only: silent
    guarded = "    if args.local_rank in [0, -1]:\n    " + _FARM_INIT
    files["train.py"] = FARM_EXAMPLE.replace("{INIT}", guarded)
    ok = lint_project(tmp_path / "ok", files)
    assert not severities(ok, "DDP-ALL-RANKS-IO"), ok


# opendilab/LightZero @ b0a69b6a6a7c6d718b6d627a52e1b3ee0014de07,
# lzero/entry/train_unizero_multitask_segment_ddp.py:396-400 (the rank-local count) and
# 455-505 (the learn block with its barrier and all_gather_object).
LZ = """\
import torch
import torch.distributed as dist
from ding.utils import get_rank, get_world_size


def train(cfgs, game_buffers, learner, update_per_collect):
    dist.init_process_group('nccl')
    rank, world_size = get_rank(), get_world_size()
    while True:
        not_enough_data = any(
            replay_buffer.get_num_of_transitions() < cfgs[0].policy.total_batch_size / world_size
            for replay_buffer in game_buffers
        )
{AGREE}
        if not not_enough_data:
            for i in range(update_per_collect):
                log_vars = learner.train([b.sample() for b in game_buffers], 0)
                dist.barrier()
                all_obs_loss = [None for _ in range(world_size)]
                dist.all_gather_object(all_obs_loss, log_vars)


if __name__ == '__main__':
    train([], [], None, 1)
"""
LZ_AGREE = """\
        flag = torch.tensor([1 if not_enough_data else 0], device='cuda')
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        not_enough_data = bool(flag.item())
"""


def test_lightzero_buffer_count_decides_a_block_of_collectives(tmp_path: Path) -> None:
    bad = lint_project(tmp_path / "bad", {"train.py": LZ.replace("{AGREE}\n", "")})
    assert severities(bad, "DDP-RANK-DIVERGENCE") == [("train.py", 10, "warning")], bad
    # correct twin (the fix, 7841fdf): the flag all_reduced with MAX first: silent
    ok = lint_project(tmp_path / "ok", {"train.py": LZ.replace("{AGREE}", LZ_AGREE)})
    assert not severities(ok, "DDP-RANK-DIVERGENCE"), ok


# meta-llama/llama-cookbook (then llama-recipes) @ c19c5c69aa4f2b0eb03119ef64c3aec164595ab9,
# utils/train_utils.py:32 and 136-138 (train() hands `rank` to evaluation()'s
# `local_rank`) and 222-237 (evaluation moves batches to local_rank).
LLAMA = """\
import os
import torch
import torch.distributed as dist


def train(model, train_dataloader, eval_dataloader, optimizer, local_rank=None, rank=None):
    for step, batch in enumerate(train_dataloader):
        for key in batch.keys():
            batch[key] = batch[key].to(local_rank)
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
    eval_loss = evaluation(model, eval_dataloader, {ARG})
    return eval_loss


def evaluation(model, eval_dataloader, local_rank):
    model.eval()
    for step, batch in enumerate(eval_dataloader):
        for key in batch.keys():
            batch[key] = batch[key].to(local_rank)
        with torch.no_grad():
            loss = model(**batch).loss
    return loss


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(local_rank)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4).cuda())
    train(model, [], [], None, local_rank, rank)


if __name__ == "__main__":
    main()
"""


def test_llama_recipes_global_rank_in_the_local_ranks_place(tmp_path: Path) -> None:
    bad = lint_project(tmp_path / "bad", {"train.py": LLAMA.replace("{ARG}", "rank")})
    assert ("train.py", 13, "error") in severities(bad, "DDP-HARDCODED-DEVICE"), bad
    # correct twin (the fix): the local rank passed: silent
    ok = lint_project(tmp_path / "ok", {"train.py": LLAMA.replace("{ARG}", "local_rank")})
    assert not severities(ok, "DDP-HARDCODED-DEVICE"), ok
