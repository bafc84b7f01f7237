"""Round 24: blind batch Q. The false error on Stark's trainer (a GPU fixed only as the
default when no device was given) is a warning; each new reading is shown on real code
of batch Q (only the lines needed, cited with repository and commit) beside a silent or
error-keeping twin."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

# researchmm/Stark @ 162e1d37a38f92251cb380e90ccdb59608f2df3c,
# lib/train/trainers/base_trainer.py:32-35 (the trainer's default device) and
# lib/train/train_script.py:65-67 (distributed runs pass `cuda:local_rank` in settings).
STARK = """\
import argparse
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class BaseTrainer:
    def __init__(self, actor, settings):
        self.actor = actor
        self.device = getattr(settings, 'device', None)
{DEFAULT}
        self.actor.to(self.device)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--local_rank', default=-1, type=int)
    args = parser.parse_args()
    torch.cuda.set_device(args.local_rank)
    dist.init_process_group(backend="nccl")
    settings = argparse.Namespace(use_gpu=True)
    net = build()
    if args.local_rank != -1:
        net = DDP(net, device_ids=[args.local_rank], find_unused_parameters=True)
        settings.device = torch.device("cuda:%d" % args.local_rank)
    BaseTrainer(net, settings)
"""
_FALLBACK = """\
        if self.device is None:
            self.device = torch.device("cuda:0" if torch.cuda.is_available() and settings.use_gpu else "cpu")"""
_PLAIN = """\
        self.device = torch.device("cuda:0" if torch.cuda.is_available() and settings.use_gpu else "cpu")"""


def test_default_device_when_none_given_is_a_warning_a_fixed_one_stays_an_error(
    tmp_path: Path,
) -> None:
    found = lint_project(tmp_path / "ok", {"train.py": STARK.replace("{DEFAULT}", _FALLBACK)})
    sev = severities(found, "DDP-HARDCODED-DEVICE")
    assert sev and all(s == "warning" for _, _, s in sev), sev
    assert any("no device was given" in f.summary for f in found)
    # twin: the trainer fixes GPU 0 whatever it is given: every rank on one GPU
    bad = lint_project(tmp_path / "bad", {"train.py": STARK.replace("{DEFAULT}", _PLAIN)})
    assert ("train.py", 11, "error") in severities(bad, "DDP-HARDCODED-DEVICE"), bad
