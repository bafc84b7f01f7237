"""Round 30: what blind batch W missed, each on the real lines (cited with repository and
commit) beside a twin that must stay silent."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

# nerfstudio-project/nerfstudio @ f1b60d46415bdfcf344c9aaf819d2e5d81689799,
# nerfstudio/pipelines/base_pipeline.py:51-57, 96-102, 214-316 (the pipeline holds the
# DDP wrapper in `self._model`; its `model` property unwraps it, and get_train_loss_dict
# runs the forward through `self.model`: issue #1847, PR #1856 runs `self._model(...)`),
# nerfstudio/configs/base_config.py's `setup()` (a config instantiates its `_target`) and
# nerfstudio/engine/trainer.py:151-153, 446-448 (the trainer backpropagates the losses).
NS_PIPELINE = """\
import typing
from dataclasses import dataclass, field
from typing import Type, Union, cast

import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from model import Model


def module_wrapper(ddp_or_model: Union[DDP, Model]) -> Model:
    if isinstance(ddp_or_model, DDP):
        return cast(Model, ddp_or_model.module)
    return ddp_or_model


class Pipeline(nn.Module):
    _model: Model

    @property
    def model(self):
        \"\"\"Returns the unwrapped model if in ddp\"\"\"
        return module_wrapper(self._model)


@dataclass
class VanillaPipelineConfig:
    _target: Type = field(default_factory=lambda: VanillaPipeline)

    def setup(self, **kwargs):
        return self._target(self, **kwargs)


class VanillaPipeline(Pipeline):
    def __init__(self, config, device, test_mode="val", world_size=1, local_rank=0):
        super().__init__()
        self.config = config
        self.datamanager = config.datamanager.setup(device=device, test_mode=test_mode)
        self._model = config.model.setup(num_train_data=len(self.datamanager.train_dataset))
        self.model.to(device)

        self.world_size = world_size
        if world_size > 1:
            self._model = typing.cast(Model, DDP(self._model, device_ids=[local_rank], find_unused_parameters=True))
            dist.barrier(device_ids=[local_rank])

    def get_train_loss_dict(self, step: int):
        ray_bundle, batch = self.datamanager.next_train(step)
        model_outputs = self.model(ray_bundle)
        metrics_dict = self.model.get_metrics_dict(model_outputs, batch)
        loss_dict = self.model.get_loss_dict(model_outputs, batch, metrics_dict)
        return model_outputs, loss_dict, metrics_dict

    def get_eval_loss_dict(self, step: int):
        self.eval()
        ray_bundle, batch = self.datamanager.next_eval(step)
        model_outputs = self.model(ray_bundle)
        metrics_dict = self.model.get_metrics_dict(model_outputs, batch)
        loss_dict = self.model.get_loss_dict(model_outputs, batch, metrics_dict)
        self.train()
        return model_outputs, loss_dict, metrics_dict
"""
NS_MODEL = """\
from torch import nn


class Model(nn.Module):
    def get_metrics_dict(self, outputs, batch):
        return {}
"""
NS_TRAINER = """\
import functools

import torch
import torch.distributed as dist

from pipeline import VanillaPipelineConfig


class Trainer:
    def __init__(self, config, local_rank, world_size):
        self.config = config
        self.local_rank = local_rank
        self.world_size = world_size

    def setup(self, test_mode="val"):
        dist.init_process_group("nccl")
        self.pipeline = self.config.pipeline.setup(
            device="cuda", test_mode=test_mode, world_size=self.world_size, local_rank=self.local_rank
        )
        self.optimizer = torch.optim.Adam(self.pipeline.parameters())

    def train_iteration(self, step: int):
        self.optimizer.zero_grad()
        _, loss_dict, metrics_dict = self.pipeline.get_train_loss_dict(step=step)
        loss = functools.reduce(torch.add, loss_dict.values())
        loss.backward()
        self.optimizer.step()


def main(local_rank, world_size):
    trainer = Trainer(VanillaPipelineConfig(), local_rank, world_size)
    trainer.setup()
    for step in range(100):
        trainer.train_iteration(step)
"""


def _ns(root: Path, pipeline: str) -> list:  # type: ignore[type-arg]
    files = {"pipeline.py": pipeline, "model.py": NS_MODEL, "train.py": NS_TRAINER}
    return lint_project(root, files)


def test_forward_through_a_property_that_unwraps_the_held_wrapper(tmp_path: Path) -> None:
    bad = _ns(tmp_path / "bad", NS_PIPELINE)
    # the training forward only: the eval one (line 60) is never backpropagated
    assert severities(bad, "DDP-FORWARD-BYPASS") == [("pipeline.py", 50, "error")], bad
    # twin: PR #1856 runs the forward through the wrapper
    fixed = NS_PIPELINE.replace(
        "model_outputs = self.model(ray_bundle)\n        metrics_dict = self.model."
        "get_metrics_dict(model_outputs, batch)\n        loss_dict",
        "model_outputs = self._model(ray_bundle)\n        metrics_dict = self.model."
        "get_metrics_dict(model_outputs, batch)\n        loss_dict",
        1,
    )
    assert fixed != NS_PIPELINE
    ok = _ns(tmp_path / "ok", fixed)
    assert severities(ok, "DDP-FORWARD-BYPASS") == [], ok
    # twin: a property that hands back what it holds (the wrapper) unwraps nothing
    plain = NS_PIPELINE.replace("return module_wrapper(self._model)", "return self._model")
    ok2 = _ns(tmp_path / "ok2", plain)
    assert severities(ok2, "DDP-FORWARD-BYPASS") == [], ok2


# nerfstudio-project/nerfstudio @ 2c12f5f205581cb99d2d4140bb14eefe7842129e,
# nerfstudio/pipelines/base_pipeline.py:366-377: `load_pipeline` calls update_to_step on
# `self._model`, which holds `typing.cast(Model, DDP(...))`; PR #1682 calls it on
# `self.model` (the property that unwraps).
NS_LOAD = """
    def load_pipeline(self, loaded_state, step: int) -> None:
        state = {
            (key[len("module.") :] if key.startswith("module.") else key): value for key, value in loaded_state.items()
        }
        self._model.update_to_step(step)
        self.load_state_dict(state, strict=True)
"""


def test_attribute_read_on_a_wrapper_held_through_typing_cast(tmp_path: Path) -> None:
    bad = _ns(tmp_path / "bad", NS_PIPELINE + NS_LOAD)
    assert severities(bad, "DDP-WRAPPER-ATTR") == [("pipeline.py", 68, "warning")], bad
    # twin: PR #1682 reads it on the unwrapped model
    fixed = NS_LOAD.replace("self._model.update_to_step", "self.model.update_to_step")
    ok = _ns(tmp_path / "ok", NS_PIPELINE + fixed)
    assert severities(ok, "DDP-WRAPPER-ATTR") == [], ok


# hustvl/WeakTr @ 5bdceb83d685742a993bf5cb27fa263c2d97d9f4, OnlineRetraining/segm/
# utils/distributed.py:54-64 (sync_model, after cosypose: the other ranks load what rank
# 0 saved from its GPU, with no map_location; the "fix ddp" commit b1a0fa6 drops the
# path), train.py:11,25,296-303 (the script sits in the `segm` package it imports by
# name), engine.py:78-110 and model/utils.py:151-160 (evaluate hands `inference` the
# model it unwrapped when there is a `.module`).
WT_DIST = """\
from pathlib import Path

import torch
import torch.distributed as dist

import segm.utils.torch as ptu


def sync_model(sync_dir, model):
    # https://github.com/ylabbe/cosypose/blob/master/cosypose/utils/distributed.py
    sync_path = Path(sync_dir).resolve() / "sync_model.pkl"
    if ptu.dist_rank == 0 and ptu.world_size > 1:
        torch.save(model.state_dict(), sync_path)
    dist.barrier()
    if ptu.dist_rank > 0:
        model.load_state_dict(torch.load(sync_path))
    dist.barrier()
    if ptu.dist_rank == 0 and ptu.world_size > 1:
        sync_path.unlink()
    return model
"""
WT_PTU = """\
import os

dist_rank = int(os.environ.get("RANK", 0))
world_size = int(os.environ.get("WORLD_SIZE", 1))
"""
WT_ENGINE = """\
import torch

from segm.model import utils


def evaluate(model, data_loader):
    model_without_ddp = model
    if hasattr(model, "module"):
        model_without_ddp = model.module
    model.eval()
    for batch in data_loader:
        with torch.no_grad():
            seg_pred = utils.inference(model_without_ddp, batch["im"])
    return seg_pred
"""
WT_UTILS = """\
def inference(model, ims):
    C = model.n_cls
    return [model.forward(im)[:C] for im in ims]
"""
WT_TRAIN = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from segm.engine import evaluate
from segm.utils.distributed import sync_model


def main(log_dir, model, loader, val_loader, gpu_id):
    dist.init_process_group("nccl")
    model.to(gpu_id)
    sync_model(log_dir, model)
    model = DDP(model, device_ids=[gpu_id], find_unused_parameters=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for batch in loader:
        model(batch).backward()
        optimizer.step()
    evaluate(model, val_loader)
"""


def _wt(root: Path, dist_py: str = WT_DIST, engine: str = WT_ENGINE) -> list:  # type: ignore[type-arg]
    pkg = "OnlineRetraining/segm/"
    files = {
        pkg + "__init__.py": "",
        pkg + "utils/__init__.py": "",
        pkg + "model/__init__.py": "",
        pkg + "utils/distributed.py": dist_py,
        pkg + "utils/torch.py": WT_PTU,
        pkg + "engine.py": engine,
        pkg + "model/utils.py": WT_UTILS,
        pkg + "train.py": WT_TRAIN,
    }
    return lint_project(root, files, entry=pkg + "train.py")


def test_other_ranks_load_what_rank_0_saved_from_its_gpu(tmp_path: Path) -> None:
    bad = _wt(tmp_path / "bad")
    assert [f for f, line, _ in severities(bad, "DDP-LOAD-MAP-LOCATION") if line == 16] == [
        "distributed.py"
    ], bad
    # twin: the DDP tutorial maps the saved GPU onto the loading rank's
    mapped = WT_DIST.replace(
        "torch.load(sync_path)",
        'torch.load(sync_path, map_location={"cuda:0": f"cuda:{ptu.dist_rank}"})',
    )
    ok = _wt(tmp_path / "ok", mapped)
    assert severities(ok, "DDP-LOAD-MAP-LOCATION") == [], ok
    # twin: the model unwrapped when it has a `.module` is what `inference` reads
    assert severities(bad, "DDP-WRAPPER-ATTR") == [], bad


def test_an_attribute_read_on_the_wrapper_handed_down_still_said(tmp_path: Path) -> None:
    """The unwrapping idiom's twin: hand `inference` the wrapper itself."""
    handed = WT_ENGINE.replace("utils.inference(model_without_ddp,", "utils.inference(model,")
    bad = _wt(tmp_path / "bad", engine=handed)
    assert severities(bad, "DDP-WRAPPER-ATTR") == [("utils.py", 2, "warning")], bad


# facebookresearch/vissl @ 8e0476b12674089ecea5b85c246a2df19f9402e4, vissl/utils/misc.py:
# 140-153 (set_seeds seeds from the node id) and vissl/engines/train.py:23-79 (every
# training process of a machine calls it with the same node_id); PR #299 passes the
# process's dist_rank.
VISSL_MISC = """\
import logging
import random

import numpy as np
import torch


def set_seeds(cfg, node_id=0):
    node_seed = cfg.SEED_VALUE
    if cfg.DISTRIBUTED.NUM_NODES > 1:
        node_seed = node_seed * 2 * node_id
    logging.info(f"MACHINE SEED: {node_seed}")
    random.seed(node_seed)
    np.random.seed(node_seed)
    torch.manual_seed(node_seed)
    if cfg["MACHINE"]["DEVICE"] == "gpu" and torch.cuda.is_available():
        torch.cuda.manual_seed_all(node_seed)
"""
VISSL_TRAIN = """\
import torch
import torch.distributed as dist

from misc import set_seeds


def train_main(cfg, dist_run_id, local_rank=0, node_id=0):
    dist_rank = cfg.DISTRIBUTED.NUM_PROC_PER_NODE * node_id + local_rank
    dist.init_process_group("nccl", init_method=dist_run_id, rank=dist_rank)
    torch.cuda.set_device(local_rank)
    set_seeds(cfg, node_id)
"""


def test_seed_from_the_node_id(tmp_path: Path) -> None:
    bad = lint_project(tmp_path / "bad", {"misc.py": VISSL_MISC, "train.py": VISSL_TRAIN})
    # (the helper's call, train.py:11, is said by the seeding-helper reading of rules_seed)
    assert ("misc.py", 15, "info") in severities(bad, "DDP-RANK-SEED"), bad
    # twin: PR #299 seeds each process from its rank
    fixed = VISSL_MISC.replace("node_id=0", "dist_rank=0").replace(
        "node_seed * 2 * node_id", "node_seed * 2 * dist_rank"
    )
    ok = lint_project(
        tmp_path / "ok",
        {"misc.py": fixed, "train.py": VISSL_TRAIN.replace("(cfg, node_id)", "(cfg, dist_rank)")},
    )
    assert severities(ok, "DDP-RANK-SEED") == [], ok
