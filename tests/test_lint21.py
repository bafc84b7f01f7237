"""Round 21: shapes of code the shared data flow (Script.origins, Script.callees) did not
follow, found on the misses of the handed blind batches, each followed in general for
every rule. The code is the real projects' (only the lines needed, each cited with its
repository and commit); each wrong shape is beside a correct twin that stays silent."""

from __future__ import annotations

import ast
from pathlib import Path

from lintproject import lint_project
from lintproject import severities as _sev

from ddptui.lint.project import Project
from ddptui.lint.script import Script

# h2oai/h2o-llmstudio @ 09de4c2f121e7391a1e3c09084040b18a6733e8f (blind L), fixed by
# 26f46d4 "fix ddp training": `wrap_model_distributed` returns the DDP wrapper in a tuple,
# main() calls the training function through a name that holds one of two functions, and
# run_train reads `model.backbone` on the wrapper under a NEFTune `hasattr` test of the
# config (not of the model). Three shapes at once: a function held in a name
# (`train_function = run_train_rlhf if ... else run_train`), a tuple unpacked from a
# project helper's return, and a `hasattr` that tests another object than the one read.
H2O_UTILS = """\
from torch.nn.parallel import DistributedDataParallel


def wrap_model_distributed(model, optimizer, lr_scheduler, train_dataloader, val_dataloader, cfg):
    find_unused_parameters = cfg.environment.find_unused_parameters
    model = DistributedDataParallel(
        model,
        device_ids=[cfg.environment._local_rank],
        find_unused_parameters=find_unused_parameters,
    )
    return model, optimizer, train_dataloader, val_dataloader, lr_scheduler


def unwrap_model(model):
    options = (DistributedDataParallel,)
    while isinstance(model, options):
        model = model.module
    return model
"""
H2O_TRAIN = """\
import torch
import torch.distributed as dist

from modeling_utils import unwrap_model, wrap_model_distributed


def activate_neftune(backbone, alpha):
    backbone.neftune_noise_alpha = alpha


def run_train(cfg, model, optimizer, scheduler, epoch_steps, train_dataloader, val_dataloader, val_df):
    if (
        hasattr(cfg.augmentation, "neftune_noise_alpha")
        and cfg.augmentation.neftune_noise_alpha > 0
    ):
        activate_neftune({READ}, cfg.augmentation.neftune_noise_alpha)
    for itr, batch in enumerate(train_dataloader):
        loss = model(batch)["loss"]
        loss.backward()
        optimizer.step()
    return 0.0, 0.0


def run_train_rlhf(cfg, model, optimizer, scheduler, epoch_steps, train_dataloader, val_dataloader, val_df):
    return 0.0, 0.0


def run(cfg):
    dist.init_process_group(backend="nccl", init_method="env://")
    torch.cuda.set_device(cfg.environment._local_rank)
    model = cfg.architecture.model_class(cfg).to("cuda")
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = None
    train_dataloader = val_dataloader = val_df = None
    epoch_steps = 1
    if cfg.environment._distributed:
        (
            model,
            optimizer,
            train_dataloader,
            val_dataloader,
            scheduler,
        ) = wrap_model_distributed(
            model=model,
            optimizer=optimizer,
            lr_scheduler=scheduler,
            train_dataloader=train_dataloader,
            val_dataloader=val_dataloader,
            cfg=cfg,
        )
    train_function = (
        run_train_rlhf
        if cfg.problem_type == "text_rlhf_language_modeling"
        else run_train
    )
    val_loss, val_metric = train_function(
        cfg=cfg,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        epoch_steps=epoch_steps,
        train_dataloader=train_dataloader,
        val_dataloader=val_dataloader,
        val_df=val_df,
    )
"""


def _h2o(tmp_path: Path, read: str, name: str) -> list[tuple[str, int, str]]:
    files = {"modeling_utils.py": H2O_UTILS, "train.py": H2O_TRAIN.replace("{READ}", read)}
    return _sev(lint_project(tmp_path / name, files), "DDP-WRAPPER-ATTR")


def test_wrapper_attr_through_a_held_function_and_an_unpacked_helper_return(
    tmp_path: Path,
) -> None:
    assert _h2o(tmp_path, "model.backbone", "bad") == [("train.py", 16, "warning")]
    # the fix (26f46d4): the model unwrapped before `.backbone` is read
    assert _h2o(tmp_path, "unwrap_model(model).backbone", "ok") == []


def test_a_hasattr_test_of_the_model_itself_still_tells_the_wrapper(tmp_path: Path) -> None:
    """`hasattr(model, "module")` in the test: the read is the mode-aware branch, silent."""
    text = H2O_TRAIN.replace(
        'hasattr(cfg.augmentation, "neftune_noise_alpha")', 'not hasattr(model, "module")'
    ).replace("{READ}", "model.backbone")
    found = lint_project(tmp_path, {"modeling_utils.py": H2O_UTILS, "train.py": text})
    assert _sev(found, "DDP-WRAPPER-ATTR") == []


def test_a_name_holding_one_of_two_functions_reaches_both(tmp_path: Path) -> None:
    """Without the name (`run_train(...)` called directly) the same read is found: the
    name is followed as the direct call is, not more."""
    text = H2O_TRAIN.replace("{READ}", "model.backbone").replace(
        "val_loss, val_metric = train_function(", "val_loss, val_metric = run_train("
    )
    found = lint_project(tmp_path, {"modeling_utils.py": H2O_UTILS, "train.py": text})
    assert _sev(found, "DDP-WRAPPER-ATTR") == [("train.py", 16, "warning")]
    # a name that holds no project function reaches nothing: silent
    text = H2O_TRAIN.replace("{READ}", "model.backbone").replace(
        "        run_train_rlhf\n        if", "        print\n        if"
    ).replace("        else run_train\n", "        else len\n")
    found = lint_project(tmp_path / "none", {"modeling_utils.py": H2O_UTILS, "train.py": text})
    assert _sev(found, "DDP-WRAPPER-ATTR") == []


# NVIDIA/DeepLearningExamples @ 446c87887817bedfe7d96ef5dcc467294637eeae (blind G),
# PyTorch/Classification/ConvNets: an object of a project class holds the model,
# `ModelAndLoss.distributed()` wraps it in place (`self.model = DDP(self.model)`), and the
# epoch loop saves `model_and_loss.model.state_dict()` (keys prefixed `module.`; fixed by
# 72f40b8, which strips the prefix when loading). `obj.attr` is followed to what the
# class's methods assign to `self.attr`. (The real main() then loads back into the same
# wrapper, which the rule takes as a consistent pair: this keeps only the save.)
CONVNETS_UTILS = """\
import os

import torch


def save_checkpoint(state, is_best, filename="checkpoint.pth.tar", checkpoint_dir="./", backup_filename=None):
    if (not torch.distributed.is_initialized()) or torch.distributed.get_rank() == 0:
        filename = os.path.join(checkpoint_dir, filename)
        print("SAVING {}".format(filename))
        torch.save(state, filename)
"""
CONVNETS_TRAINING = """\
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import utils


class ModelAndLoss(nn.Module):
    def __init__(self, arch, loss, cuda=True):
        super(ModelAndLoss, self).__init__()
        self.arch = arch
        model = torch.hub.load("pytorch/vision", arch)
        if cuda:
            model = model.cuda()
        self.model = model
        self.loss = loss()

    def forward(self, data, target):
        output = self.model(data)
        loss = self.loss(output, target)
        return loss, output

    def distributed(self):
        self.model = DDP(self.model)


def train_loop(model_and_loss, optimizer, train_loader, start_epoch, end_epoch, checkpoint_dir):
    for epoch in range(start_epoch, end_epoch):
        train_loader.sampler.set_epoch(epoch)
        for input, target in train_loader:
            loss, output = model_and_loss(input, target)
            loss.backward()
            optimizer.step()
        utils.save_checkpoint(
            {
                "epoch": epoch + 1,
                "arch": model_and_loss.arch,
                "state_dict": {SAVED}.state_dict(),
                "optimizer": optimizer.state_dict(),
            },
            False,
            checkpoint_dir=checkpoint_dir,
        )
"""
CONVNETS_MAIN = """\
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn

from training import ModelAndLoss, train_loop


def main(args):
    args.distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
    if args.distributed:
        args.gpu = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(args.gpu)
        dist.init_process_group(backend="nccl", init_method="env://")
    model_and_loss = ModelAndLoss(args.arch, nn.CrossEntropyLoss, cuda=True)
    optimizer = torch.optim.SGD(model_and_loss.model.parameters(), lr=0.1)
    if args.distributed:
        model_and_loss.distributed()
    dataset = torch.load(args.data)
    sampler = torch.utils.data.distributed.DistributedSampler(dataset)
    train_loader = torch.utils.data.DataLoader(dataset, batch_size=64, sampler=sampler)
    train_loop(model_and_loss, optimizer, train_loader, 0, 90, args.workspace)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--data")
    parser.add_argument("--workspace", default="./")
    main(parser.parse_args())
"""


def _convnets(tmp_path: Path, saved: str) -> list[tuple[str, int, str]]:
    files = {
        "utils.py": CONVNETS_UTILS,
        "training.py": CONVNETS_TRAINING.replace("{SAVED}", saved),
        "main.py": CONVNETS_MAIN,
    }
    return _sev(lint_project(tmp_path, files, entry="main.py"), "DDP-SAVE-WRAPPER")


def test_save_wrapper_through_an_attribute_of_a_project_object(tmp_path: Path) -> None:
    assert _convnets(tmp_path / "bad", "model_and_loss.model") == [("training.py", 38, "warning")]
    # the module's own weights: no `module.` prefix, silent
    assert _convnets(tmp_path / "ok", "model_and_loss.model.module") == []


# facebookresearch/pytext @ afc9823edafdf5e5ce05e439fdeb1be8752271fe (blind N), fixed by
# 593cb6f (PR #537 "Fix DDP for new model"). Three shapes: a base class's `self.run_epoch`
# that runs a subclass's override (NewTaskTrainer in new_task.py), an attribute stored on
# an object in another method (`state.model = DistributedModel(...)` in set_up_training,
# read as `state.model` in run_epoch), and a helper that backpropagates the loss
# (`self.backprop(state, loss)`). DistributedModel's `__getattr__` hands out the module's
# `train_batch`, whose `self(...)` is the module's forward, not DDP's.
PYTEXT_DIST = """\
import torch.nn as nn


class DistributedModel(nn.parallel.DistributedDataParallel):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)

    def __getattr__(self, name):
        wrapped_module = super().__getattr__("module")
        if hasattr(wrapped_module, name):
            return getattr(wrapped_module, name)
        return super().__getattr__(name)
"""
PYTEXT_TRAINER = """\
import torch

from distributed_model import DistributedModel


class TrainingState:
    model = None
    optimizer = None
    epoch: int = 0

    def __init__(self, **kwargs):
        vars(self).update(kwargs)


class Trainer:
    def set_up_training(self, state):
        state.model.cuda()
        if torch.distributed.get_world_size() > 1:
            device_id = torch.cuda.current_device()
            state.model = DistributedModel(
                module=state.model,
                device_ids=[device_id],
                output_device=device_id,
                broadcast_buffers=False,
            )

    def backprop(self, state, loss):
        loss.backward()
        state.optimizer.step()

    def train(self, training_data, model, optimizer):
        state = TrainingState(model=model, optimizer=optimizer)
        self.set_up_training(state)
        while state.epoch < 10:
            state.epoch += 1
            state.model.train()
            self.run_epoch(state, training_data)

    def run_epoch(self, state, data):
        for batch in data:
            loss = state.model(batch)
            self.backprop(state, loss)
"""
PYTEXT_NEW_TASK = """\
from trainer import Trainer


class NewTaskTrainer(Trainer):
    def run_epoch(self, state, data):
        model = state.model
        for batch_id, batch in enumerate(data):
            state.optimizer.zero_grad()
            loss, metric_data = {CALL}
            self.backprop(state, loss)
"""
PYTEXT_MAIN = """\
import torch
import torch.distributed as dist

from new_task import NewTaskTrainer


def main(model, data, rank):
    dist.init_process_group("nccl", init_method="env://")
    torch.cuda.set_device(rank % torch.cuda.device_count())
    optimizer = torch.optim.Adam(model.parameters())
    NewTaskTrainer().train(data, model, optimizer)
"""


def _pytext(tmp_path: Path, call: str) -> list[tuple[str, int, str]]:
    files = {
        "distributed_model.py": PYTEXT_DIST,
        "trainer.py": PYTEXT_TRAINER,
        "new_task.py": PYTEXT_NEW_TASK.replace("{CALL}", call),
        "main.py": PYTEXT_MAIN,
    }
    return _sev(lint_project(tmp_path, files, entry="main.py"), "DDP-FORWARD-BYPASS")


def test_forward_bypass_through_a_subclass_override_and_a_stored_attribute(
    tmp_path: Path,
) -> None:
    assert _pytext(tmp_path / "bad", "model.train_batch(batch)") == [("new_task.py", 9, "error")]
    # the wrapper called itself: DDP's own forward runs, silent
    assert _pytext(tmp_path / "ok", "model(batch)") == []


def test_no_getattr_forwarding_no_bypass(tmp_path: Path) -> None:
    """Without DistributedModel's `__getattr__` the wrapper has no `train_batch` (an
    AttributeError, another finding): no bypass is said."""
    dist = PYTEXT_DIST[: PYTEXT_DIST.index("    def __getattr__")]
    files = {
        "distributed_model.py": dist,
        "trainer.py": PYTEXT_TRAINER,
        "new_task.py": PYTEXT_NEW_TASK.replace("{CALL}", "model.train_batch(batch)"),
        "main.py": PYTEXT_MAIN,
    }
    found = lint_project(tmp_path, files, entry="main.py")
    assert _sev(found, "DDP-FORWARD-BYPASS") == []


def test_an_attribute_read_follows_the_constructor_keyword_and_every_store(tmp_path: Path) -> None:
    """`state.model` in NewTaskTrainer.run_epoch: the model given to `TrainingState(model=
    model, ...)` and the DistributedModel `set_up_training` stores on the same object; an
    attribute of another object (`other.model`) gets neither."""
    files = {
        "distributed_model.py": PYTEXT_DIST,
        "trainer.py": PYTEXT_TRAINER,
        "new_task.py": PYTEXT_NEW_TASK.replace(
            "{CALL}", "model.train_batch(batch)\n            other = object()\n            print(other.model)"
        ),
        "main.py": PYTEXT_MAIN.replace(
            "    optimizer =", "    model = torch.nn.Linear(4, 2)\n    optimizer ="
        ),
    }
    lint_project(tmp_path, files, entry="main.py")
    project = Project(tmp_path, "--root")
    entry, _ = project.entry(str(tmp_path / "main.py"))
    followed, _ = project.closure(entry)
    s = Script.build(project, entry, followed)
    reads = {
        ast.unparse(n): n
        for n in s.nodes
        if isinstance(n, ast.Attribute) and s.path_of(n).endswith("new_task.py")
    }
    got = {ast.unparse(o).split("(")[0] for o in s.origins(reads["state.model"])}
    assert sorted(got) == ["DistributedModel", "state.model", "torch.nn.Linear"]
    assert [ast.unparse(o) for o in s.origins(reads["other.model"])] == ["other.model"]


def test_an_override_of_a_class_built_only_through_a_registry_is_not_followed(
    tmp_path: Path,
) -> None:
    """microsoft/Semi-supervised-learning @ 067b0f062333f14bf0ca15beb83d785dab7db74d (blind
    G) registers its algorithms in `name2alg` and builds one by name: which subclass's
    override runs is not known, so none is followed (following all of them there said a
    DDP-SAMPLER error on an evaluation loader of CRMatch's `set_data_loader`)."""
    main = PYTEXT_MAIN.replace(
        "    NewTaskTrainer().train(data, model, optimizer)",
        '    name2trainer = {"new_task": NewTaskTrainer}\n'
        '    name2trainer["new_task"]().train(data, model, optimizer)',
    )
    files = {
        "distributed_model.py": PYTEXT_DIST,
        "trainer.py": PYTEXT_TRAINER,
        "new_task.py": PYTEXT_NEW_TASK.replace("{CALL}", "model.train_batch(batch)"),
        "main.py": main,
    }
    found = lint_project(tmp_path, files, entry="main.py")
    assert _sev(found, "DDP-FORWARD-BYPASS") == []


# abogatskiy/PELICAN @ d6ff331ddf013d517c159c3286a008db6345db1e (blind H), trainer.py's
# predict(): `gather` holds a lambda when not distributed (where ranks > 0 leave early)
# and the project's all_gather otherwise. Which one runs after the rank test is not
# known from the name, so the held function is not followed: no rank divergence is said
# of the all_gather (following it said two false errors). A name whose every value is a
# project function is followed (the h2o case above).
PELICAN_UTILS = """\
import torch
import torch.distributed as dist


def get_world_size():
    return dist.get_world_size() if dist.is_initialized() else 1


def all_gather(tensor):
    world_size = get_world_size()
    if world_size <= 1:
        return tensor
    tensor_placeholder = [torch.zeros_like(tensor) for _ in range(world_size)]
    dist.all_gather(tensor_placeholder, tensor)
    return torch.cat(tensor_placeholder, dim=0)
"""
PELICAN_TRAIN = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from utils import all_gather


class Trainer:
    def __init__(self, model, dataloaders, device_id):
        self.model = DDP(model, device_ids=[device_id])
        self.dataloaders = dataloaders
        self.device_id = device_id

    def predict(self, set="valid", distributed=True):
        dataloader = self.dataloaders[set]
        self.model.eval()
        all_predict, all_targets = [], []
        if not distributed:
            if self.device_id > 0:
                return None, None
            gather = {LAMBDA}
        else:
            gather = all_gather
        with torch.no_grad():
            for batch_idx, data in enumerate(dataloader):
                targets = gather(data["target"]).detach().cpu()
                predict = gather(self.model(data)).detach().cpu()
                if self.device_id <= 0:
                    all_targets.append(targets)
                    all_predict.append(predict)
        return all_predict, all_targets


def main(model, dataloaders, local_rank):
    dist.init_process_group(backend="nccl")
    torch.cuda.set_device(local_rank)
    trainer = Trainer(model.cuda(), dataloaders, local_rank)
    trainer.predict("test")
"""


def test_a_name_holding_a_lambda_or_a_collective_helper_is_not_followed(tmp_path: Path) -> None:
    files = {"utils.py": PELICAN_UTILS, "train.py": PELICAN_TRAIN.replace("{LAMBDA}", "lambda x: x")}
    assert _sev(lint_project(tmp_path, files), "DDP-RANK-DIVERGENCE") == []
