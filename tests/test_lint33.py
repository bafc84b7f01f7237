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
