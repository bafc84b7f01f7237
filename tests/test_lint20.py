"""Round 20: the shapes of code that defeated the rules on blind batch O, each followed in
general. The code is the real projects' (only the lines needed, each cited with its
repository and commit); each wrong shape is beside a correct twin that stays silent."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project
from lintproject import severities as _sev

from ddptui.lint import lint_paths

# The process group started under `if __name__ == "__main__":`, the GPU picked inside the
# `main(cfg)` it calls next, after a barrier (blind O). allenai/OLMo @
# 47f8f5abb40eb100c6623be12e1648c841b2ab99: scripts/train.py; PR #720 (c13090d) moved
# `torch.cuda.set_device(f"cuda:{get_local_rank()}")` to just before init_process_group
# ("GPU 0 has higher memory consumption than other GPUs"). The finding names the init.
OLMO_TORCH_UTIL = """\
import os
import torch.distributed as dist


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def get_local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK") or 0)


def barrier() -> None:
    if is_distributed():
        dist.barrier()
"""
OLMO_TRAIN = """\
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from olmo_torch_util import barrier, get_local_rank


def main(cfg) -> None:
    barrier()

    # Set CUDA device.
    {IN_MAIN}
    device = torch.device("cuda")
    barrier()


if __name__ == "__main__":
    try:
        mp.set_start_method("spawn", force=True)
    except RuntimeError as e:
        print(f"failed to set multiprocessing start method: {e}")
    {BEFORE_INIT}
    # Initialize process group.
    dist.init_process_group(backend="nccl", timeout=timedelta(minutes=30))
    main(None)
"""
PICK = 'torch.cuda.set_device(f"cuda:{get_local_rank()}")'


def test_init_before_set_device_in_the_function_called_next(tmp_path: Path) -> None:
    files = {
        "olmo_torch_util.py": OLMO_TORCH_UTIL,
        "train.py": OLMO_TRAIN.replace("{IN_MAIN}", PICK).replace("{BEFORE_INIT}", "pass"),
    }
    found = lint_project(tmp_path / "bad", files)
    assert [(n, ln) for n, ln, _ in _sev(found, "DDP-INIT-BEFORE-SET-DEVICE")] == [("train.py", 26)]
    # the fix (c13090d): set_device before the init, none left in main()
    files["train.py"] = OLMO_TRAIN.replace("{IN_MAIN}", "pass").replace("{BEFORE_INIT}", PICK)
    assert _sev(lint_project(tmp_path / "ok", files), "DDP-INIT-BEFORE-SET-DEVICE") == []
    # the GPU picked first thing in main(), before any collective: harmless, silent
    files["train.py"] = (
        OLMO_TRAIN.replace("    barrier()\n\n    # Set", "    # Set", 1)
        .replace("{IN_MAIN}", PICK)
        .replace("{BEFORE_INIT}", "pass")
    )
    assert _sev(lint_project(tmp_path / "early", files), "DDP-INIT-BEFORE-SET-DEVICE") == []


# Trainers imported by a name built at run time, and no process ever picks its GPU
# (blind O). facebookresearch/fairchem (Open Catalyst) @
# 6fb3e794eef31559db990300198eca20f41d8f37: main.py calls ocpmodels.common.utils
# .setup_imports(), which globs ocpmodels/trainers and runs
# `importlib.import_module("ocpmodels.%s.%s" % (key[1:], module_name))`; the trainer
# builds `torch.device(f"cuda:{local_rank}")`, wraps DDP(device_ids=[self.device]) and
# calls torch.cuda.empty_cache(); distutils.setup never calls set_device. The fix (#342,
# c60bbb1) adds `torch.cuda.set_device(config["local_rank"])` before init_process_group.
# OCPDataParallel's local variable `device_id` is no init's `device_id=`.
OCP_DISTUTILS = """\
import os

import torch
import torch.distributed as dist


def setup(config):
    config["local_rank"] = int(os.environ.get("SLURM_LOCALID"))
    {PICK}
    dist.init_process_group(
        backend=config["distributed_backend"],
        init_method=config["init_method"],
        world_size=config["world_size"],
        rank=config["rank"],
    )
"""
OCP_UTILS = """\
import glob
import importlib
import os


def setup_imports():
    root_folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    trainer_folder = os.path.join(root_folder, "trainers")
    trainer_pattern = os.path.join(trainer_folder, "**", "*.py")
    for f in glob.glob(trainer_pattern, recursive=True):
        for key in ["/trainers", "/datasets", "/models", "/tasks"]:
            if f.find(key) != -1:
                file_name = f.split(os.sep)[-1]
                module_name = file_name[: file_name.find(".py")]
                importlib.import_module("ocpmodels.%s.%s" % (key[1:], module_name))
"""
OCP_REGISTRY = """\
class Registry:
    mapping = {"trainer_name_mapping": {}}

    @classmethod
    def register_trainer(cls, name):
        def wrap(func):
            cls.mapping["trainer_name_mapping"][name] = func
            return func

        return wrap

    @classmethod
    def get_trainer_class(cls, name):
        return cls.mapping["trainer_name_mapping"].get(name, None)


registry = Registry()
"""
OCP_TRAINER = """\
import torch
from torch.nn.parallel.distributed import DistributedDataParallel

from ocpmodels.common.data_parallel import split
from ocpmodels.common.registry import registry


@registry.register_trainer("forces")
class ForcesTrainer:
    def __init__(self, model, local_rank):
        self.device = torch.device(f"cuda:{local_rank}")
        self.model = DistributedDataParallel(model, device_ids=[self.device])

    def train(self, loader):
        for batch in loader:
            self.model(batch).sum().backward()
            torch.cuda.empty_cache()
"""
OCP_DATA_PARALLEL = """\
import torch


def split(batch, num_gpus):
    device_id = torch.arange(num_gpus)
    return device_id.bincount()
"""
OCP_MAIN = """\
from ocpmodels.common import distutils
from ocpmodels.common.registry import registry
from ocpmodels.common.utils import setup_imports


def run(config, model, loader):
    distutils.setup(config)
    setup_imports()
    trainer = registry.get_trainer_class(config.get("trainer", "forces"))(
        model=model, local_rank=config["local_rank"]
    )
    trainer.train(loader)
"""


def _ocp(pick: str) -> dict[str, str]:
    return {
        "main.py": OCP_MAIN,
        "ocpmodels/__init__.py": "",
        "ocpmodels/common/__init__.py": "",
        "ocpmodels/common/distutils.py": OCP_DISTUTILS.replace("{PICK}", pick),
        "ocpmodels/common/utils.py": OCP_UTILS,
        "ocpmodels/common/registry.py": OCP_REGISTRY,
        "ocpmodels/common/data_parallel.py": OCP_DATA_PARALLEL,
        "ocpmodels/trainers/__init__.py": "",
        "ocpmodels/trainers/forces_trainer.py": OCP_TRAINER,
    }


def test_modules_a_loader_imports_by_name_are_followed(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "bad", _ocp("pass"), entry="main.py")
    assert [(n, ln) for n, ln, _ in _sev(found, "DDP-INIT-BEFORE-SET-DEVICE")] == [
        ("distutils.py", 10)
    ]
    fixed = _ocp('torch.cuda.set_device(config["local_rank"])')
    assert (
        _sev(lint_project(tmp_path / "ok", fixed, entry="main.py"), "DDP-INIT-BEFORE-SET-DEVICE")
        == []
    )


# ParlAI's agent loader (blind O). facebookresearch/ParlAI @
# ef1511f9989d5ce4cf1351aa3c0faeb5cee19acd: parlai/core/loader.py load_agent_module builds
# `module_name = "%s.agents.%s.%s" % (repo, path_list[0], path_list[1])` and imports it:
# the agents (parlai/agents/rag/rag.py, projects/*/agents/*.py) are part of the run.
PARLAI_LOADER = """\
import importlib


def load_agent_module(agent_path: str):
    repo = 'parlai'
    if agent_path.startswith('projects:'):
        path_list = agent_path.split(':')
        module_name = 'projects.{p}.{m}.{m}'.format(m=path_list[2], p=path_list[1])
    else:
        path_list = agent_path.split('/')
        module_name = "%s.agents.%s.%s" % (repo, path_list[0], path_list[1])
    my_module = importlib.import_module(module_name)
    return my_module
"""


def test_parlai_agents_loaded_by_name_are_followed(tmp_path: Path) -> None:
    root = tmp_path / "parlai_proj"
    lint_project(
        root,
        {
            "train.py": "from parlai.core.loader import load_agent_module\n",
            "parlai/__init__.py": "",
            "parlai/core/__init__.py": "",
            "parlai/core/loader.py": PARLAI_LOADER,
            "parlai/agents/rag/rag.py": "import torch\n",
            "projects/bb2/agents/bb2.py": "import torch\n",
            "parlai/utils/unrelated.py": "import torch\n",
        },
    )
    followed = {Path(p).name for p in lint_paths([root / "train.py"], root=root).followed}
    assert {"rag.py", "bb2.py", "loader.py"} <= followed
    assert "unrelated.py" not in followed


# Gradient accumulation whose optimizer step is gated by a flag (blind O).
# m2lines/Samudra @ 7c64a41ea99b3ade14b29c10e39d71ae984eb8ac: src/ocean_emulators/train.py
# Trainer.train_one_epoch computes `should_step = (data_iter_step + 1) %
# self.gradient_accumulation_steps == 0` and steps under `if should_step or is_last:`,
# while `scaled_loss.backward()` on the DDP model runs every micro-batch. The fix (ee22927)
# wraps the non-final micro-batches' backward in `self.model.no_sync()`.
SAMUDRA = """\
import contextlib

import torch
from torch import nn


def train_batch(model, data, loss_fn):
    return loss_fn(model(data), data)


class Trainer:
    def __init__(self, model, optimizer, loader, loss_fn, local_rank, accum):
        self.model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
        self.optimizer = optimizer
        self.train_loader = loader
        self.loss_fn = loss_fn
        self.gradient_accumulation_steps = accum

    def train_one_epoch(self):
        total_batches = len(self.train_loader)
        for data_iter_step, data in enumerate(self.train_loader):
            r = self.gradient_accumulation_steps
            is_last = data_iter_step + 1 == total_batches
            should_step = (data_iter_step + 1) % self.gradient_accumulation_steps == 0
            loss = train_batch(self.model, data, self.loss_fn)
            scaled_loss = loss / r
            {BACKWARD}
            if should_step or is_last:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
                self.optimizer.step()
                self.optimizer.zero_grad()
"""
FIXED_BACKWARD = """\
sync = should_step or is_last
            with contextlib.nullcontext() if sync else self.model.no_sync():
                scaled_loss.backward()"""


def test_no_sync_when_the_step_is_gated_by_a_flag(tmp_path: Path) -> None:
    files = {"train.py": SAMUDRA.replace("{BACKWARD}", "scaled_loss.backward()")}
    found = lint_project(tmp_path / "bad", files)
    assert [(n, ln) for n, ln, _ in _sev(found, "DDP-NO-SYNC")] == [("train.py", 27)]
    files["train.py"] = SAMUDRA.replace("{BACKWARD}", FIXED_BACKWARD)
    assert _sev(lint_project(tmp_path / "ok", files), "DDP-NO-SYNC") == []
    # a flag that is no accumulation test (a step every micro-batch): silent
    every = SAMUDRA.replace("{BACKWARD}", "scaled_loss.backward()").replace(
        "(data_iter_step + 1) % self.gradient_accumulation_steps == 0", "True"
    )
    assert _sev(lint_project(tmp_path / "every", {"train.py": every}), "DDP-NO-SYNC") == []


# wandb.init on rank 0 only, wandb.log in the evaluators every rank runs; the evaluator
# built by a factory into a value declared of the project's base class (blind O).
# VMarsocci/pangaea-bench @ 3fdd72b232f6cda88e3f1bb58f31e5dd6dd9f7a0: pangaea/run.py runs
# `if cfg.task.trainer.use_wandb and rank == 0: wandb.init(...)` and
# `val_evaluator: Evaluator = instantiate(cfg.task.evaluator, ...)` (Hydra picks
# SegEvaluator); pangaea/engine/evaluator.py logs under `if self.use_wandb:`. The fix
# (8f7ac08) makes it `if self.use_wandb and self.rank == 0:`.
PANGAEA_EVALUATOR = """\
import os

import torch
import wandb


class Evaluator:
    def __init__(self, val_loader, device, use_wandb=False):
        self.rank = int(os.environ["RANK"])
        self.val_loader = val_loader
        self.device = device
        self.use_wandb = use_wandb

    def __call__(self, model, model_name):
        raise NotImplementedError


class SegEvaluator(Evaluator):
    @torch.no_grad()
    def __call__(self, model, model_name):
        metrics = self.compute_metrics(model)
        self.log_metrics(metrics)
        return metrics

    def compute_metrics(self, model):
        return {"mIoU": sum(model(x).mean().item() for x in self.val_loader)}

    def log_metrics(self, metrics):
        if {GUARD}:
            wandb.log({"val_mIoU": metrics["mIoU"]})
"""
PANGAEA_RUN = """\
import os

import torch
import torch.distributed as dist
from hydra.utils import instantiate

from evaluator import Evaluator


def main(cfg):
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl")
    if cfg.task.trainer.use_wandb and rank == 0:
        import wandb

        wandb.init(project="geofm-bench", name=cfg.task_name)
    model = torch.nn.parallel.DistributedDataParallel(
        instantiate(cfg.decoder).to(local_rank), device_ids=[local_rank]
    )
    val_evaluator: Evaluator = instantiate(cfg.task.evaluator, val_loader=None, device=local_rank)
    val_evaluator(model, "best")
"""


def test_wandb_log_on_every_rank_of_a_factory_built_evaluator(tmp_path: Path) -> None:
    ev = PANGAEA_EVALUATOR
    files = {"train.py": PANGAEA_RUN, "evaluator.py": ev.replace("{GUARD}", "self.use_wandb")}
    found = lint_project(tmp_path / "bad", files)
    assert [(n, ln) for n, ln, _ in _sev(found, "DDP-ALL-RANKS-IO")] == [("evaluator.py", 30)]
    files["evaluator.py"] = ev.replace("{GUARD}", "self.use_wandb and self.rank == 0")
    assert _sev(lint_project(tmp_path / "ok", files), "DDP-ALL-RANKS-IO") == []
    # wandb.init on every rank (its own run each; said by the writer rule, not this one)
    files = {
        "train.py": PANGAEA_RUN.replace(" and rank == 0:", ":"),
        "evaluator.py": ev.replace("{GUARD}", "self.use_wandb"),
    }
    found = lint_project(tmp_path / "all", files)
    assert ("evaluator.py", 30) not in [(n, ln) for n, ln, _ in _sev(found, "DDP-ALL-RANKS-IO")]


def test_wandb_log_that_asks_for_the_run_is_silent(tmp_path: Path) -> None:
    """allenai/OLMo @ c13090d77f9e8573cd325f44217b68b5627d1cc3 olmo/train.py: `if
    wandb.run is not None: wandb.log(...)`, wandb.init under `get_global_rank() == 0 or
    not cfg.wandb.rank_zero_only` (scripts/train.py)."""
    ev = PANGAEA_EVALUATOR.replace("{GUARD}", "wandb.run is not None")
    files = {"train.py": PANGAEA_RUN, "evaluator.py": ev}
    assert _sev(lint_project(tmp_path / "run", files), "DDP-ALL-RANKS-IO") == []
    files = {
        "train.py": PANGAEA_RUN.replace(
            " and rank == 0:", " and (rank == 0 or not cfg.zero_only):"
        ),
        "evaluator.py": PANGAEA_EVALUATOR.replace("{GUARD}", "self.use_wandb"),
    }
    assert _sev(lint_project(tmp_path / "either", files), "DDP-ALL-RANKS-IO") == []


# A logger the master alone builds, None on the other ranks, used by every rank (blind O).
# The FAENet fork of facebookresearch/fairchem @ 6cb044cf0ab9114e7503f25e8a4d3019051d8bca:
# ocpmodels/trainers/base_trainer.py load_logger sets `self.logger = None`, then builds it
# under `distutils.is_master()`; eval_all_val_splits runs `if self.config["logger"] ==
# "wandb": self.logger.log({"Val. time": ...})` on every rank. The fix (f1f5e06) adds
# `and distutils.is_master()` there.
FAENET = """\
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


class WandBLogger:
    def __init__(self, config):
        self.config = config

    def log(self, update_dict, step=None, split=""):
        print(update_dict)


class BaseTrainer:
    def __init__(self, config, model, local_rank):
        self.config = config
        dist.init_process_group(backend="nccl")
        self.model = DistributedDataParallel(model.cuda(local_rank), device_ids=[local_rank])
        self.load_logger()

    def load_logger(self):
        self.logger = None
        if dist.get_rank() == 0:
            self.logger = WandBLogger(self.config)

    def validate(self, split):
        metrics = {"loss": 0.0}
        if self.logger is not None:
            self.logger.log(metrics, split=split)
        return metrics

    def eval_all_val_splits(self):
        start_time = time.time()
        for s in ["val_ood_ads", "val_id"]:
            self.validate(split=s)
            if {GUARD}:
                self.logger.log({"Val. time": time.time() - start_time})


def main(config, model):
    trainer = BaseTrainer(config, model, 0)
    trainer.eval_all_val_splits()
"""


def test_master_only_logger_used_by_every_rank(tmp_path: Path) -> None:
    bad = FAENET.replace("{GUARD}", 'self.config["logger"] == "wandb"')
    found = lint_project(tmp_path / "bad", {"train.py": bad})
    assert [(n, ln) for n, ln, _ in _sev(found, "DDP-ALL-RANKS-IO")] == [("train.py", 39)]
    for i, guard in enumerate(
        [
            'self.config["logger"] == "wandb" and dist.get_rank() == 0',
            'self.config["logger"] == "wandb" and self.logger is not None',
        ]
    ):
        ok = FAENET.replace("{GUARD}", guard)
        assert _sev(lint_project(tmp_path / f"ok{i}", {"train.py": ok}), "DDP-ALL-RANKS-IO") == []


# The best checkpoint written by the master, read back on every rank with no barrier that
# always runs in between (blind O). FAENet fork of fairchem @
# 6cb044cf0ab9114e7503f25e8a4d3019051d8bca: energy_trainer.py's train() calls
# `self.save(metrics=val_metrics, checkpoint_file="best_checkpoint.pt", ...)` (written under
# `distutils.is_master()`), then, when a test loader exists, predict() (which syncs), then
# eval_all_val_splits(final), which loads os.path.join(dir, "best_checkpoint.pt") on every
# rank. The fix (f1f5e06) ends save() with `distutils.synchronize()`.
FAENET_CKPT = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def save_checkpoint(state, checkpoint_dir="checkpoints/", checkpoint_file="checkpoint.pt"):
    filename = os.path.join(checkpoint_dir, checkpoint_file)
    torch.save(state, filename)
    return filename


class Trainer:
    def __init__(self, model, local_rank, ckpt_dir, test_loader=None):
        dist.init_process_group(backend="nccl")
        self.model = DistributedDataParallel(model.cuda(local_rank), device_ids=[local_rank])
        self.ckpt_dir = ckpt_dir
        self.test_loader = test_loader

    def save(self, metrics=None, checkpoint_file="checkpoint.pt"):
        if dist.get_rank() == 0:
            save_checkpoint(
                {"state_dict": self.model.state_dict(), "val_metrics": metrics},
                checkpoint_dir=self.ckpt_dir,
                checkpoint_file=checkpoint_file,
            )
        {AFTER}

    def load_checkpoint(self, checkpoint_path):
        checkpoint = torch.load(checkpoint_path, map_location="cpu")
        self.model.load_state_dict(checkpoint["state_dict"])

    def predict(self, loader):
        dist.barrier()

    def eval_all_val_splits(self, final=False):
        if final:
            checkpoint_path = os.path.join(self.ckpt_dir, "best_checkpoint.pt")
            self.load_checkpoint(checkpoint_path=checkpoint_path)

    def train(self, loader, epochs):
        for epoch in range(epochs):
            for batch in loader:
                self.model(batch).sum().backward()
            self.save(metrics={}, checkpoint_file="best_checkpoint.pt")
            if self.test_loader is not None:
                self.predict(self.test_loader)
            self.eval_all_val_splits(epoch == epochs - 1)
"""


def test_master_checkpoint_read_back_by_name_without_a_barrier(tmp_path: Path) -> None:
    bad = FAENET_CKPT.replace("{AFTER}", "return None")
    found = lint_project(tmp_path / "bad", {"train.py": bad})
    assert [(n, ln, sv) for n, ln, sv in _sev(found, "DDP-CKPT-BARRIER")] == [
        ("train.py", 40, "warning")
    ]
    fixed = FAENET_CKPT.replace("{AFTER}", "dist.barrier()")
    assert _sev(lint_project(tmp_path / "ok", {"train.py": fixed}), "DDP-CKPT-BARRIER") == []
    # a barrier that always runs between the write and the read: silent
    always = bad.replace(
        "            if self.test_loader is not None:\n                self.predict(self.test_loader)\n",
        "            self.predict(self.test_loader)\n",
    )
    assert _sev(lint_project(tmp_path / "always", {"train.py": always}), "DDP-CKPT-BARRIER") == []


# WongKinYiu/yolov9 @ 5b1ea9a8b3f0ffe4fe0e203ec6232d788bb3fcff (a correct project of blind
# N): utils/loggers/clearml/clearml_utils.py sets `self.task = None`, then `if
# self.clearml: self.task = Task.init(...)`; the whole logger is built on rank 0 only
# (train.py: `if RANK in {-1, 0}: loggers = Loggers(...)`): no rank test in the class, so
# nothing to say about its `self.task.get_logger()`.
YOLO = """\
import os

import torch.distributed as dist
from clearml import Task

RANK = int(os.getenv("RANK", -1))


class ClearmlLogger:
    def __init__(self, opt, clearml=True):
        self.clearml = clearml
        self.task = None
        if self.clearml:
            self.task = Task.init(project_name=opt.project)

    def log_debug_samples(self, files, title="Debug Samples"):
        for f in files:
            self.task.get_logger().report_image(title=title, local_path=str(f))


class Loggers:
    def __init__(self, opt):
        self.clearml = ClearmlLogger(opt)

    def on_train_end(self, files):
        self.clearml.log_debug_samples(files, title="Results")


def train(opt, model, files, callbacks):
    dist.init_process_group(backend="nccl")
    if RANK in {-1, 0}:
        loggers = Loggers(opt)
        for k in ("on_train_end",):
            callbacks.register_action(k, callback=getattr(loggers, k))
    callbacks.run("on_train_end", files)
"""


def test_logger_class_built_on_rank_zero_alone_is_silent(tmp_path: Path) -> None:
    assert _sev(lint_project(tmp_path / "yolo", {"train.py": YOLO}), "DDP-ALL-RANKS-IO") == []


# The agent class the loader returns by name runs (blind O). facebookresearch/ParlAI @
# ef1511f9989d5ce4cf1351aa3c0faeb5cee19acd: TorchGeneratorAgent wraps self.model in
# DistributedDataParallel; RagAgent._set_query_vec (parlai/agents/rag/rag.py:512) calls
# `self.model.tokenize_query(...)`, a method of RagModel the wrapper does not have (PR #3787,
# de5a42d, goes through self.model.module). Nothing names RagAgent but the loader's string.
PARLAI_TGA = """\
import torch
import torch.distributed as dist


class TorchGeneratorAgent:
    def __init__(self, opt):
        self.model = self.build_model()
        if opt.get("ddp"):
            dist.init_process_group(backend="nccl")
            self.model = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[opt["gpu"]], broadcast_buffers=False
            )
"""
PARLAI_RAG = """\
import torch

from parlai.core.torch_generator_agent import TorchGeneratorAgent


class RagModel(torch.nn.Module):
    def tokenize_query(self, query):
        return [len(query)]


class RagAgent(TorchGeneratorAgent):
    def build_model(self):
        return RagModel()

    def _set_query_vec(self, observation):
        observation["query_vec"] = {CALL}(observation["text"])
        return observation
"""
PARLAI_TRAIN = """\
from parlai.core.loader import load_agent_module


def main(opt):
    agent = getattr(load_agent_module(opt["model"]), "RagAgent")(opt)
    agent.act()
"""


def test_class_a_loader_returns_by_name_runs(tmp_path: Path) -> None:
    files = {
        "train.py": PARLAI_TRAIN,
        "parlai/__init__.py": "",
        "parlai/core/__init__.py": "",
        "parlai/core/loader.py": PARLAI_LOADER,
        "parlai/core/torch_generator_agent.py": PARLAI_TGA,
        "parlai/agents/rag/rag.py": PARLAI_RAG.replace("{CALL}", "self.model.tokenize_query"),
    }
    found = lint_project(tmp_path / "bad", files)
    assert [(n, ln) for n, ln, _ in _sev(found, "DDP-WRAPPER-ATTR")] == [("rag.py", 16)]
    fixed = "(self.model.module if hasattr(self.model, 'module') else self.model).tokenize_query"
    files["parlai/agents/rag/rag.py"] = PARLAI_RAG.replace("{CALL}", fixed)
    assert _sev(lint_project(tmp_path / "ok", files), "DDP-WRAPPER-ATTR") == []
