"""Round 23: the shapes of code that defeated the rules on blind batch P, each followed in
general. The code is the real projects' (only the lines needed, each cited with its
repository and commit); each wrong shape is beside a correct twin that stays silent."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project
from lintproject import severities as _sev

# The world size given to init_process_group as this node's GPU count, the rank as the
# torchrun local rank (blind P). Guitaricet/relora @ 111f94d4a56766e13a9f2ea2fe484ae1ac860b9e:
# torchrun_main.py; fix 0113239 "fix multi-node distributed" reads RANK/WORLD_SIZE from
# the torchrun environment.
RELORA = """\
import os

import torch


def main(args):
    assert "LOCAL_RANK" in os.environ, "torchrun should set LOCAL_RANK"
    args.local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(args.local_rank)

    # assumes that we are using a single node
    torch.distributed.init_process_group(
        backend="nccl",
        {INIT}
    )
"""
RELORA_BAD = "rank=args.local_rank,\n        world_size=torch.cuda.device_count()"
RELORA_FIX = 'rank=int(os.environ["RANK"]),\n        world_size=int(os.environ["WORLD_SIZE"])'


def test_world_size_from_device_count_given_inline(tmp_path: Path) -> None:
    bad = lint_project(tmp_path / "bad", {"train.py": RELORA.replace("{INIT}", RELORA_BAD)})
    assert [(n, ln) for n, ln, _ in _sev(bad, "DDP-WORLD-FROM-DEVICE-COUNT")] == [("train.py", 15)]
    ok = lint_project(tmp_path / "ok", {"train.py": RELORA.replace("{INIT}", RELORA_FIX)})
    assert _sev(ok, "DDP-WORLD-FROM-DEVICE-COUNT") == []
    # the script starts its own processes on one node (mp.spawn): the GPU count is the world
    spawned = RELORA.replace("{INIT}", RELORA_BAD) + (
        "\n\nif __name__ == '__main__':\n"
        "    torch.multiprocessing.spawn(main, nprocs=torch.cuda.device_count())\n"
    )
    assert (
        _sev(lint_project(tmp_path / "spawn", {"train.py": spawned}), "DDP-WORLD-FROM-DEVICE-COUNT")
        == []
    )


# The wrapper stored in `self.game` by the Trainer, saved by a callback through the trainer
# it holds (blind P, twice). facebookresearch/EGG @ de36453e1f55630490ae74c6c103ad5e40b78ba5:
# egg/core/trainers.py, egg/core/callbacks.py; fix 3443e09 "fix distributed model saving"
# takes `self.trainer.game.module` when distributed.
EGG_TRAINERS = """\
import torch


class Trainer:
    def __init__(self, game, optimizer, distributed_context, callbacks):
        self.game = game
        self.optimizer = optimizer
        self.distributed_context = distributed_context
        if self.distributed_context.is_distributed:
            device_id = self.distributed_context.local_rank
            torch.cuda.set_device(device_id)
            self.game.to(device_id)
            self.game = torch.nn.parallel.DistributedDataParallel(
                self.game, device_ids=[device_id], output_device=device_id
            )
        self.callbacks = callbacks
        for callback in self.callbacks:
            callback.on_train_begin(self)
"""
EGG_CALLBACKS = """\
import torch


class CheckpointSaver:
    def on_train_begin(self, trainer_instance):
        self.trainer = trainer_instance

    def save_checkpoint(self, path):
        torch.save(self.get_checkpoint(), path)

    def get_checkpoint(self):
{BODY}
        return dict(
            model_state_dict={GAME}.state_dict(),
            optimizer_state_dict=self.trainer.optimizer.state_dict(),
        )
"""
EGG_TRAIN = """\
from callbacks import CheckpointSaver
from trainers import Trainer


def main(game, optimizer, ctx):
    trainer = Trainer(game, optimizer, ctx, callbacks=[CheckpointSaver()])
"""
EGG_FIX = """\
        if self.trainer.distributed_context.is_distributed:
            game = self.trainer.game.module
        else:
            game = self.trainer.game"""


def _egg(
    root: Path, body: str, game: str, trainers: str = EGG_TRAINERS
) -> list[tuple[str, int, str]]:
    files = {
        "trainers.py": trainers,
        "callbacks.py": EGG_CALLBACKS.replace("{BODY}", body).replace("{GAME}", game),
        "train.py": EGG_TRAIN,
    }
    return _sev(lint_project(root, files), "DDP-SAVE-WRAPPER")


def test_wrapper_saved_through_the_object_that_holds_it(tmp_path: Path) -> None:
    assert [
        (n, ln) for n, ln, _ in _egg(tmp_path / "bad", "        pass", "self.trainer.game")
    ] == [("callbacks.py", 14)]
    # the fix: the module inside the wrapper when distributed
    assert _egg(tmp_path / "ok", EGG_FIX, "game") == []
    # the attribute of some other object (not the Trainer that wraps): not read as the wrapper
    assert _egg(tmp_path / "other", "        pass", "self.teacher.game") == []
    # the Trainer keeps the wrapper in another attribute, `self.game` stays the module
    kept = EGG_TRAINERS.replace("self.game = torch.nn", "self.ddp_game = torch.nn")
    assert _egg(tmp_path / "kept", "        pass", "self.trainer.game", kept) == []


# A shared folder checked, then created, on every rank (blind P). jwyang/graph-rcnn.pytorch
# @ fd53f2e93990e5479ddcb51398aa629680100b0a: main.py; fix feb4bb7 (PR #37) adds
# `and get_rank() == 0` to the test.
GRAPH_RCNN = """\
import argparse
import os

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=0)
    args = parser.parse_args()

    num_gpus = int(os.environ["WORLD_SIZE"]) if "WORLD_SIZE" in os.environ else 1
    args.distributed = num_gpus > 1
    if args.distributed:
        torch.cuda.set_device(args.local_rank)
        torch.distributed.init_process_group(backend="nccl", init_method="env://")

    if not os.path.exists("logs"){AND}:
        {MK}
"""


def _rcnn(root: Path, cond: str = "", mk: str = 'os.mkdir("logs")') -> list[tuple[str, int, str]]:
    text = GRAPH_RCNN.replace("{AND}", cond).replace("{MK}", mk)
    return _sev(lint_project(root, {"train.py": text}), "DDP-ALL-RANKS-IO")


def test_folder_checked_then_created_on_every_rank(tmp_path: Path) -> None:
    assert [(n, ln) for n, ln, _ in _rcnn(tmp_path / "bad")] == [("train.py", 18)]
    # the fix (feb4bb7): rank 0 only
    fixed = " and torch.distributed.get_rank() == 0"
    assert _rcnn(tmp_path / "ok", cond=fixed) == []
    # makedirs(..., exist_ok=True) behind the same test: no race
    assert _rcnn(tmp_path / "exist_ok", mk='os.makedirs("logs", exist_ok=True)') == []


# `--seed` parsed, read only by a seed call behind a flag no caller passes (blind P).
# NVIDIA-BioNeMo/KERMT @ 4dbaef40f6fb3239c3614b20536eaafe064e65d1: kermt/data/molgraph.py,
# pretrain_ddp.py; fix 0c289a6 "make --seed actually seed the run" adds
# `setup_seed(args.seed)` after parse_args_ddp() in main().
KERMT_MOLGRAPH = """\
import numpy as np


def mol2graph(smiles_batch, shared_dict, args, set_seed: bool = False):
    # Set seed
    if set_seed:
        seed = getattr(args, "seed", None)
        if seed is not None:
            print(f"Setting seed to {seed}")
            np.random.seed(seed)
    return [shared_dict[s] for s in smiles_batch]
"""
KERMT_TRAIN = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from molgraph import mol2graph


def main(rank, world_size, args, model_cls):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    {SEED}
    model = model_cls(args).to(rank)
    model = DDP(model, device_ids=[rank])
    for batch in args.batches:
        graph = mol2graph(batch, args.shared, args{PASS})
        model(graph).sum().backward()


if __name__ == "__main__":
    torch.multiprocessing.spawn(main, nprocs=2)
"""


def _kermt(root: Path, seed: str = "pass", passes: str = "") -> list[tuple[str, int, str]]:
    files = {
        "molgraph.py": KERMT_MOLGRAPH,
        "train.py": KERMT_TRAIN.replace("{SEED}", seed).replace("{PASS}", passes),
    }
    return _sev(lint_project(root, files), "DDP-SEED")


def test_seed_behind_a_flag_no_caller_passes(tmp_path: Path) -> None:
    assert [(n, ln) for n, ln, _ in _kermt(tmp_path / "bad")] == [("train.py", 11)]
    # the fix (0c289a6): the run seeded first thing in main()
    assert _kermt(tmp_path / "ok", seed="torch.manual_seed(args.seed)") == []
    # a caller that turns the flag on: the seed runs, the other rules judge it
    assert _kermt(tmp_path / "on", passes=", set_seed=True") == []


# Files written by every process of a Hugging Face Trainer run (blind P).
# NetherlandsForensicInstitute/asmtransformers @ c4d9caae73e969f0f358e64d48a979acb0b272ed:
# asmtransformers/scripts/pretrain.py; PR #61 saves the tokenizer only if
# trainer.is_world_process_zero() and the model with trainer.save_model().
ASM_PRETRAIN = """\
import logging

from transformers import Trainer


def pretrain(model, tokenizer, training_args, data_collator, train_tokenized, output_dir):
    trainer = Trainer(
        model=model,
        args=training_args,
        data_collator=data_collator,
        train_dataset=train_tokenized,
    )

    logging.info(f'Save tokenizer to: {output_dir}')
{TOKENIZER}

    trainer.train()

    logging.info(f'Save model to: {output_dir}')
{MODEL}
"""
ASM_BAD = {"{TOKENIZER}": "    tokenizer.save_pretrained(output_dir)",
           "{MODEL}": "    model.save_pretrained(output_dir)"}  # fmt: skip
ASM_FIX = {
    "{TOKENIZER}": "    if trainer.is_world_process_zero():\n        tokenizer.save_pretrained(output_dir)",
    "{MODEL}": "    trainer.save_model(output_dir)",
}


def _asm(root: Path, parts: dict[str, str]) -> list[tuple[str, int, str]]:
    text = ASM_PRETRAIN
    for k, v in parts.items():
        text = text.replace(k, v)
    return _sev(lint_project(root, {"train.py": text}), "DDP-ALL-RANKS-IO")


def test_trainer_script_saves_on_every_rank(tmp_path: Path) -> None:
    assert [(n, ln) for n, ln, _ in _asm(tmp_path / "bad", ASM_BAD)] == [
        ("train.py", 15),
        ("train.py", 20),
    ]
    # the fix (PR #61): the tokenizer on the main process, the model through the Trainer
    assert _asm(tmp_path / "ok", ASM_FIX) == []
