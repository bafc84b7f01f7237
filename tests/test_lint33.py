"""Round 33: what blind batch Z missed, each on the real lines (cited with repository and
commit) beside a twin that must stay silent."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

# voicepaw/so-vits-svc-fork @ 30a08d561233595b8db13fc228e3624593662a3a,
# src/so_vits_svc_fork/train.py 79-102 (the DDP strategy when more than one GPU),
# 141, 256-287 (`on_train_end` / `on_validation_end` call `save_checkpoints`, which writes
# G_*.pth on every rank), 549-551; utils.py 261-286 (`save_checkpoint` opens the path and
# torch.save's into it). The fix, PR #451, returns early off the main device.
SVC_TRAIN = """\
from pathlib import Path

import lightning.pytorch as pl
import torch

from . import utils


def train(model_path):
    strategy = (
        "ddp_find_unused_parameters_true" if torch.cuda.device_count() > 1 else "auto"
    )
    trainer = pl.Trainer(max_epochs=10, strategy=strategy, enable_checkpointing=False)
    model = VitsLightning(model_dir=model_path)
    trainer.fit(model)


class VitsLightning(pl.LightningModule):
    def __init__(self, **hparams):
        super().__init__()
        self.save_hyperparameters(hparams)
        self.net_g = torch.nn.Linear(8, 8)
        self.optim_g = torch.optim.AdamW(self.net_g.parameters())

    def on_train_end(self) -> None:
        self.save_checkpoints(adjust=0)

    def save_checkpoints(self, adjust=1):
        current_epoch = self.current_epoch + adjust
        utils.save_checkpoint(
            self.net_g,
            self.optim_g,
            current_epoch,
            Path(self.hparams.model_dir) / f"G_{current_epoch}.pth",
        )

    def on_validation_end(self) -> None:
        self.save_checkpoints()
"""

SVC_UTILS = """\
from pathlib import Path

import torch


def save_checkpoint(model, optimizer, iteration, checkpoint_path):
    with Path(checkpoint_path).open("wb") as f:
        torch.save(
            {"model": model.state_dict(), "iteration": iteration,
             "optimizer": optimizer.state_dict()},
            f,
        )
"""


def _svc(root: Path, train: str) -> list:
    files = {"pkg/__init__.py": "", "pkg/train.py": train, "pkg/utils.py": SVC_UTILS}
    return lint_project(root, files, entry="pkg/train.py")


def test_lightning_hook_saves_on_every_rank(tmp_path: Path) -> None:
    bad = _svc(tmp_path / "bad", SVC_TRAIN)
    # said at the module's method that writes (its fix goes there), once
    assert severities(bad, "DDP-ALL-RANKS-IO") == [("train.py", 28, "warning")], bad
    # twin: the fix's early return off the main process
    fixed = SVC_TRAIN.replace(
        "    def save_checkpoints(self, adjust=1):\n",
        "    def save_checkpoints(self, adjust=1):\n"
        "        if self.global_rank != 0:\n"
        "            return\n",
    )
    assert fixed != SVC_TRAIN
    assert severities(_svc(tmp_path / "fixed", fixed), "DDP-ALL-RANKS-IO") == []
    # twin: Lightning's own decorator
    zero = SVC_TRAIN.replace(
        "    def save_checkpoints(self, adjust=1):\n",
        "    @rank_zero_only\n    def save_checkpoints(self, adjust=1):\n",
    )
    assert severities(_svc(tmp_path / "zero", zero), "DDP-ALL-RANKS-IO") == []
    # twin: the hook's own guard on the trainer's flag
    flag = SVC_TRAIN.replace(
        "        self.save_checkpoints(adjust=0)\n",
        "        if self.trainer.is_global_zero:\n            self.save_checkpoints(adjust=0)\n",
    ).replace("        self.save_checkpoints()\n", "")
    assert severities(_svc(tmp_path / "flag", flag), "DDP-ALL-RANKS-IO") == []
    # twin: no DDP strategy, a single process
    single = SVC_TRAIN.replace('"ddp_find_unused_parameters_true"', '"auto"')
    assert severities(_svc(tmp_path / "single", single), "DDP-ALL-RANKS-IO") == []


# GaTech-RL2/EgoVerse @ 3f6044011a2fda108443b451b0f36aaa7566a328,
# egomimic/pl_utils/pl_model.py 56-107 (`training_step` returns None on a non-finite loss
# and on a spike over this rank's own EMA; the rank checks are for printing). The fix,
# 00889b7 "added multi gpu safe loss ema spike check", all-reduces the skip flag.
EGO_SKIP = """\
import torch
from lightning import LightningModule


class ModelWrapper(LightningModule):
    def __init__(self, model):
        super().__init__()
        self.model = model
        self.loss_ema = None
        self.loss_ema_decay = 0.99
        self.loss_spike_factor = 5.0

    def training_step(self, batch, batch_idx):
        predictions = self.model.forward_training(batch)
        loss = self.model.compute_losses(predictions, batch)["action_loss"]

        if not torch.isfinite(loss):
            if self.global_rank == 0:
                print(f"[SKIP] Non-finite loss at batch {batch_idx}: {loss.item()}", flush=True)
            return None

        loss_val = loss.detach()

        if self.loss_ema is None:
            self.loss_ema = loss_val
            return loss

        prev_ema = self.loss_ema
        if loss_val > self.loss_spike_factor * prev_ema:
            if self.global_rank == 0:
                print(f"[SKIP] Loss spike at batch {batch_idx}", flush=True)
            return None

        self.loss_ema = (
            self.loss_ema_decay * self.loss_ema + (1.0 - self.loss_ema_decay) * loss_val
        )
        return loss
"""


def test_lightning_training_step_skipped_on_one_rank(tmp_path: Path) -> None:
    bad = lint_project(tmp_path / "bad", {"train.py": EGO_SKIP})
    assert severities(bad, "DDP-RANK-DIVERGENCE") == [
        ("train.py", 17, "warning"),
        ("train.py", 29, "warning"),
    ], bad
    # twin: the fix decides together and steps with a zero loss
    fixed = EGO_SKIP.replace(
        "            return None\n",
        "            return loss * 0\n",
    )
    assert fixed != EGO_SKIP
    compile(fixed, "train.py", "exec")
    assert (
        severities(lint_project(tmp_path / "fixed", {"train.py": fixed}), "DDP-RANK-DIVERGENCE")
        == []
    )
    # twin: manual optimisation, where skipping is the module's own business
    manual = EGO_SKIP.replace(
        "        self.model = model\n",
        "        self.model = model\n        self.automatic_optimization = False\n",
    )
    assert (
        severities(lint_project(tmp_path / "manual", {"train.py": manual}), "DDP-RANK-DIVERGENCE")
        == []
    )
    # twin: nothing says more than one process (no rank test, no DDP strategy)
    single = EGO_SKIP.replace("            if self.global_rank == 0:\n    ", "")
    assert "global_rank" not in single
    compile(single, "train.py", "exec")
    assert (
        severities(lint_project(tmp_path / "single", {"train.py": single}), "DDP-RANK-DIVERGENCE")
        == []
    )


# GaTech-RL2/EgoVerse @ d12af61f6496f2237543979ce704aa3214f4235b,
# egomimic/pl_utils/pl_model.py 12, 17, 85-96 (`validation_step` under `@rank_zero_only`).
# The fix, f9ff33f "removed rank conditions", drops the decorator and logs with
# sync_dist=True.
EGO_VAL = """\
from lightning import LightningModule
from lightning.pytorch.utilities import rank_zero_only


class ModelWrapper(LightningModule):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def training_step(self, batch, batch_idx):
        return self.model.compute_losses(self.model.forward_training(batch), batch)["loss"]

    @rank_zero_only
    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        metrics, images_dict = self.model.forward_eval_logging(batch)
        self.log_dict(metrics)

    @rank_zero_only
    def on_validation_epoch_end(self):
        print("validation done")
"""


def test_lightning_validation_step_on_rank_zero_only(tmp_path: Path) -> None:
    bad = lint_project(tmp_path / "bad", {"train.py": EGO_VAL})
    # the epoch-end hook under rank_zero_only only prints: not a step
    assert severities(bad, "DDP-RANK-DIVERGENCE") == [("train.py", 14, "warning")], bad
    fixed = EGO_VAL.replace(
        "    @rank_zero_only\n    def validation_step",
        "    def validation_step",
    ).replace("self.log_dict(metrics)", "self.log_dict(metrics, sync_dist=True)")
    assert fixed != EGO_VAL
    assert (
        severities(lint_project(tmp_path / "fixed", {"train.py": fixed}), "DDP-RANK-DIVERGENCE")
        == []
    )
