"""Round 11 (blind batch H): a dataset that a project helper splits by rank takes a local
sampler (facebookresearch/contriever, a correct project the rule called an error). The
code is the real project's (only the lines needed); the same project without the rank
pick still gets DDP-SAMPLER."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project

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




def test_contriever_helper_splits_files_by_rank_no_sampler_error(tmp_path: Path) -> None:
    found = lint_project(
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
    found = lint_project(
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


# mala-project/mala @ f80a9831f922e783f7662172f4fa75b638f1c9f8, mala/network/runner.py
# (Runner.save_run) and mala/network/trainer.py (Trainer.__init__, the checkpoint);
# fixed by 2f10a23 "allowing ddp wrapper to push network for saving during checkpoint"
# (`self.network.module.save_network(...)`)
MALA_RUNNER = """\
import os
import torch


class Runner:
    def __init__(self, params, network, data, runner_dict=None):
        self.parameters_full = params
        self.parameters = params.running
        self.network = network
        self.data = data

    def save_run(self, run_name, save_path="./", zip_run=True,
                 save_runner=False, additional_calculation_data=None):
        model_file = run_name + ".network.pth"
        params_file = run_name + ".params.json"
        self.parameters_full.save(os.path.join(save_path, params_file))
        self.network.save_network(os.path.join(save_path, model_file))
"""

MALA_TRAINER = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from mala.network.runner import Runner


class Trainer(Runner):
    def __init__(self, params, network, data, optimizer_dict=None):
        super(Trainer, self).__init__(params, network, data)

        if self.parameters_full.use_ddp:
                s = torch.cuda.Stream()
                with torch.cuda.stream(s):
                    self.network = DDP(self.network)
                torch.cuda.current_stream().wait_stream(s)

    def train_network(self):
        for epoch in range(self.parameters.max_number_epochs):
            for x, y in self.data.training_data_loaders[0]:
                loss = self.network.module.calculate_loss(self.network(x), y)
                loss.backward()
            self.__create_training_checkpoint()

    def __create_training_checkpoint(self):
        torch.save({"epoch": 0}, "opt.pth")
        self.save_run(self.parameters.checkpoint_name, save_runner=True)
"""


def _mala(tmp_path: Path, runner: str, trainer: str) -> list[LintFinding]:
    (tmp_path / ".git").mkdir(parents=True)
    pkg = tmp_path / "mala" / "network"
    pkg.mkdir(parents=True)
    (tmp_path / "mala" / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "runner.py").write_text(runner, encoding="utf-8")
    (pkg / "trainer.py").write_text(trainer, encoding="utf-8")
    found = lint_paths([pkg / "trainer.py"], root=tmp_path).findings
    return [f for f in found if f.id == "DDP-WRAPPER-ATTR"]


def test_mala_inherited_save_run_calls_model_method_on_wrapper(tmp_path: Path) -> None:
    hits = _mala(tmp_path, MALA_RUNNER, MALA_TRAINER)
    assert [(h.file.endswith("runner.py"), h.line) for h in hits] == [(True, 17)], hits
    assert "save_network" in hits[0].summary and "Trainer" in hits[0].summary


def test_mala_fixed_or_overridden_or_never_called_gets_no_finding(tmp_path: Path) -> None:
    fixed = MALA_RUNNER.replace("self.network.save_network", "self.network.module.save_network")
    assert _mala(tmp_path / "fixed", fixed, MALA_TRAINER) == []
    # the subclass never calls the inherited save_run: nothing shows it runs on the wrapper
    never = MALA_TRAINER.replace("self.save_run(", "print(")
    assert _mala(tmp_path / "never", MALA_RUNNER, never) == []
    # the subclass overrides save_run (unwrapping itself)
    own = MALA_TRAINER + (
        "\n    def save_run(self, run_name, **kw):\n"
        "        self.network.module.save_network(run_name)\n"
    )
    assert _mala(tmp_path / "own", MALA_RUNNER, own) == []


# LAION-AI/CLAP @ 0dc2b92d1933d871c2bceaba7d8d3ecbefb3c7e4, src/training/main.py: a
# seeding helper defined and never called; fixed by 73a9f82 "fix random seed control"
# (the seeds set at the start of main)
CLAP_MAIN = """\
import random
import numpy as np
import torch


def random_seed(seed=42, rank=0):
    torch.manual_seed(seed + rank)
    np.random.seed(seed + rank)
    random.seed(seed + rank)


def main(args, device):
    torch.distributed.init_process_group(backend="nccl")
    model, model_cfg = create_model(
        args.model,
        args.pretrained,
        device=device,
    )
    if args.distributed:
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device], find_unused_parameters=True
        )
"""


def _seed(tmp_path: Path, text: str) -> list[LintFinding]:
    (tmp_path / ".git").mkdir(parents=True)
    (tmp_path / "main.py").write_text(text, encoding="utf-8")
    found = lint_paths([tmp_path / "main.py"], root=tmp_path).findings
    return [f for f in found if f.id == "DDP-SEED"]


def test_clap_seed_helper_never_called_is_no_seed_at_the_model_build(tmp_path: Path) -> None:
    hits = _seed(tmp_path, CLAP_MAIN)
    assert len(hits) == 1, hits  # reported at the DDP wrap (the build line is left: see notes)


def test_clap_helper_called_or_handed_on_sets_the_seed(tmp_path: Path) -> None:
    called = CLAP_MAIN.replace(
        '    torch.distributed.init_process_group(backend="nccl")\n',
        '    torch.distributed.init_process_group(backend="nccl")\n    random_seed(args.seed)\n',
    )
    assert _seed(tmp_path / "called", called) == []
    handed = CLAP_MAIN + "\n\nSEEDERS = [random_seed]\n"
    assert _seed(tmp_path / "handed", handed) == []
