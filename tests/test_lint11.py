"""Round 11 (blind batch H): a dataset that a project helper splits by rank takes a local
sampler (facebookresearch/contriever, a correct project the rule called an error). The
code is the real project's (only the lines needed); the same project without the rank
pick still gets DDP-SAMPLER."""

from __future__ import annotations

from pathlib import Path

from ddptui.lint import lint_paths
from ddptui.lint.model import LintFinding

# facebookresearch/contriever @ 39fb2201450cdba1648183737ed56d6b1bc33778, train.py (train)
CONTRIEVER_TRAIN = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, RandomSampler

from src import data, dist_utils


def train(opt, model, optimizer, tokenizer, step):
    collator = data.Collator(opt=opt)
    train_dataset = data.load_data(opt, tokenizer)

    train_sampler = RandomSampler(train_dataset)
    train_dataloader = DataLoader(
        train_dataset,
        sampler=train_sampler,
        batch_size=opt.per_gpu_batch_size,
        drop_last=True,
        collate_fn=collator,
    )
    model.train()
    while step < opt.total_steps:
        for i, batch in enumerate(train_dataloader):
            step += 1
            train_loss, iter_stats = model(**batch, stats_prefix="train")
            train_loss.backward()
            optimizer.step()


def main(opt, model, optimizer, tokenizer):
    dist.init_process_group(backend="nccl")
    torch.cuda.set_device(opt.local_rank)
    model = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[opt.local_rank], output_device=opt.local_rank)
    train(opt, model, optimizer, tokenizer, 0)
"""

# same commit, src/data.py (load_data, load_dataset) and src/dist_utils.py (get_rank...)
CONTRIEVER_DATA = """\
import glob
import os
import numpy as np
import torch

from src import dist_utils


def load_data(opt, tokenizer):
    datasets = {}
    for path in opt.train_data:
        data = load_dataset(path, opt.loading_mode)
        if data is not None:
            datasets[path] = Dataset(data, opt.chunk_length, tokenizer, opt)
    dataset = MultiDataset(datasets)
    return dataset


def load_dataset(data_path, loading_mode):
    files = glob.glob(os.path.join(data_path, "*.p*"))
    files.sort()
    tensors = []
    if loading_mode == "split":
        files_split = list(np.array_split(files, dist_utils.get_world_size()))[dist_utils.get_rank()]
        for filepath in files_split:
            tensors.append(torch.load(filepath, map_location="cpu"))
    return torch.cat(tensors)


class MultiDataset(torch.utils.data.Dataset):
    def __init__(self, datasets):
        self.datasets = datasets


class Dataset(torch.utils.data.Dataset):
    def __init__(self, data, chunk_length, tokenizer, opt):
        self.data = data


class Collator:
    def __init__(self, opt):
        self.opt = opt
"""

CONTRIEVER_DIST = """\
import torch.distributed as dist


def get_rank():
    if not dist.is_initialized():
        return 0
    return dist.get_rank()


def get_world_size():
    if not dist.is_initialized():
        return 1
    return dist.get_world_size()
"""

# the pick removed: every rank loads every file and iterates all of it
WHOLE_DATA = CONTRIEVER_DATA.replace(
    "list(np.array_split(files, dist_utils.get_world_size()))[dist_utils.get_rank()]", "files"
)


def _lint(tmp_path: Path, files: dict[str, str]) -> list[LintFinding]:
    (tmp_path / ".git").mkdir()
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    return lint_paths([tmp_path / "train.py"], root=tmp_path).findings


def test_contriever_helper_splits_files_by_rank_no_sampler_error(tmp_path: Path) -> None:
    found = _lint(
        tmp_path,
        {
            "train.py": CONTRIEVER_TRAIN,
            "src/__init__.py": "",
            "src/data.py": CONTRIEVER_DATA,
            "src/dist_utils.py": CONTRIEVER_DIST,
        },
    )
    assert not [f for f in found if f.id == "DDP-SAMPLER"], found
    assert not [f for f in found if f.severity == "error"], found


def test_same_helper_without_the_rank_pick_is_a_sampler_error(tmp_path: Path) -> None:
    found = _lint(
        tmp_path,
        {
            "train.py": CONTRIEVER_TRAIN,
            "src/__init__.py": "",
            "src/data.py": WHOLE_DATA,
            "src/dist_utils.py": CONTRIEVER_DIST,
        },
    )
    hits = [f for f in found if f.id == "DDP-SAMPLER"]
    assert hits, found
    assert hits[0].line == 12 and hits[0].file.endswith("train.py")
