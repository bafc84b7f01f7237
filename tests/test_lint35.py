"""Round 35: the writes of a file-system layer. `PathManager.open(path, "w")` (iopath /
fvcore, as detectron2, mmf and fast-reid write every file) and `gfile.GFile` are read as
`open(path, "w")`; and a path a helper is given that one assignment suffixes with the rank
(detectron2's `setup_logger`: `filename + f".rank{rank}"`) is one file per rank, not a
shared one."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

# facebookresearch/mmf @ c745af578d8f42b61b6a3928fa375c09df81600e, mmf/utils/checkpoint.py
# 163 and 177-180 (Checkpoint.__init__ / save_config); the fix 8c80a00 ("[MMF][fix] Only
# save config in master process") returns early unless is_master(). The trainer around it
# is cut to the lines that make it distributed.
MMF_CHECKPOINT = """\
import os

import torch
from iopath.common.file_io import PathManager


def is_master():
    return torch.distributed.get_rank() == 0


class Checkpoint:
    def __init__(self, config, ckpt_foldername):
        self.config = config
        self.ckpt_foldername = ckpt_foldername
        self.save_config()

    def save_config(self):
        cfg_file = os.path.join(self.ckpt_foldername, "config.yaml")
        with PathManager.open(cfg_file, "w") as f:
            f.write(str(self.config))
"""

MMF_TRAIN = """\
import torch

from checkpoint import Checkpoint


def main(config):
    torch.distributed.init_process_group("nccl")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).cuda())
    Checkpoint(config, "save")
    return model


if __name__ == "__main__":
    main({})
"""


def _mmf(tmp_path: Path, checkpoint: str) -> list[tuple[str, int, str]]:
    files = {"train.py": MMF_TRAIN, "checkpoint.py": checkpoint}
    return severities(lint_project(tmp_path, files), "DDP-ALL-RANKS-IO")


def test_a_path_manager_write_on_every_rank_is_said(tmp_path: Path) -> None:
    # (a helper of another file whose caller is the entry: said at the entry's call)
    assert [(n, ln) for n, ln, _ in _mmf(tmp_path, MMF_CHECKPOINT)] == [("train.py", 9)]


def test_the_path_manager_write_on_the_master_only_stays_silent(tmp_path: Path) -> None:
    # the twin: the fix 8c80a00
    text = MMF_CHECKPOINT.replace(
        "    def save_config(self):\n",
        "    def save_config(self):\n        if not is_master():\n            return\n",
    )
    assert _mmf(tmp_path, text) == []


def test_a_path_manager_read_stays_silent(tmp_path: Path) -> None:
    # the twin: the same layer opened for reading
    text = MMF_CHECKPOINT.replace('PathManager.open(cfg_file, "w")', "PathManager.open(cfg_file)")
    assert _mmf(tmp_path, text) == []


def test_tensorflow_gfile_write_is_said(tmp_path: Path) -> None:
    text = MMF_CHECKPOINT.replace(
        "from iopath.common.file_io import PathManager", "from tensorflow.io import gfile"
    ).replace('PathManager.open(cfg_file, "w")', 'gfile.GFile(cfg_file, "w")')
    assert [(n, ln) for n, ln, _ in _mmf(tmp_path, text)] == [("train.py", 9)]


# facebookresearch/mmf @ c745af578d8f42b61b6a3928fa375c09df81600e, mmf/utils/logger.py
# 107-136 and 186-191 (setup_logger / _cached_log_stream, after detectron2's logger):
# "file logging: all workers", each rank but 0 on its own `train.log.rank<N>`.
MMF_LOGGER = """\
import functools
import logging
import os

import torch
from iopath.common.file_io import PathManager


def setup_logger(output, distributed_rank=0):
    logger = logging.getLogger("mmf")
    filename = os.path.join(output, "train.log")
    if distributed_rank > 0:
        filename = filename + f".rank{distributed_rank}"
    PathManager.mkdirs(os.path.dirname(filename))
    fh = logging.StreamHandler(_cached_log_stream(filename))
    logger.addHandler(fh)
    return logger


@functools.lru_cache(maxsize=None)
def _cached_log_stream(filename):
    return PathManager.open(filename, "a")


def main():
    torch.distributed.init_process_group("nccl")
    setup_logger("save", torch.distributed.get_rank())
    return torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).cuda())


if __name__ == "__main__":
    main()
"""


def test_a_log_file_suffixed_with_the_rank_stays_silent(tmp_path: Path) -> None:
    assert severities(lint_project(tmp_path, {"train.py": MMF_LOGGER}), "DDP-ALL-RANKS-IO") == []


def test_the_same_log_file_on_every_rank_is_said(tmp_path: Path) -> None:
    # the twin: no rank suffix, every process appends to the one train.log
    text = MMF_LOGGER.replace(
        '    if distributed_rank > 0:\n        filename = filename + f".rank{distributed_rank}"\n',
        "",
    )
    hits = severities(lint_project(tmp_path, {"train.py": text}), "DDP-ALL-RANKS-IO")
    assert len(hits) == 1
