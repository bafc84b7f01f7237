"""Round 18: the shapes of code that defeated the rules on blind batch M, each followed
in general. The code is the real projects' (only the lines needed, each cited with its
repository and commit); each wrong shape is beside a correct twin that stays silent."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project
from lintproject import severities as _sev

# A helper saves its parameter's weights through a name (blind M).
# mozilla/TTS @ 9d0ae2bfb48aa7d95c6f236d8b9f841fb64a525f: TTS/tts/utils/io.py's save_model
# holds `new_state_dict = model.state_dict()` and torch.saves a dict twelve lines below;
# train_glow_tts.py hands it the DDP wrapper. The fix (e723b998) changed that line to
# `model.module.state_dict()`: the finding names it, not the torch.save.
TTS_IO = """\
import datetime
import torch


def save_model(model, optimizer, current_step, epoch, r, output_path, amp_state_dict=None, **kwargs):
    new_state_dict = {SD}
    state = {
        'model': new_state_dict,
        'optimizer': optimizer.state_dict() if optimizer is not None else None,
        'step': current_step,
        'epoch': epoch,
        'date': datetime.date.today().strftime("%B %d, %Y"),
        'r': r
    }
    if amp_state_dict:
        state['amp'] = amp_state_dict
    state.update(kwargs)
    torch.save(state, output_path)


def save_checkpoint(model, optimizer, current_step, epoch, r, output_folder, **kwargs):
    save_model(model, optimizer, current_step, epoch, r, output_folder + '/ckpt.pth', **kwargs)
"""
TTS_TRAIN = """\
import torch
import torch.distributed as dist
from apex.parallel import DistributedDataParallel as DDP
from tts_io import save_checkpoint


def main(model, optimizer, loader, num_gpus):
    dist.init_process_group("nccl")
    if num_gpus > 1:
        model = DDP(model)
    for epoch in range(10):
        for step, batch in enumerate(loader):
            optimizer.zero_grad()
            model(batch).mean().backward()
            optimizer.step()
            if step % 1000 == 0 and dist.get_rank() == 0:
                save_checkpoint(model, optimizer, step, epoch, 1, "out")
"""


def test_save_wrapper_names_the_line_that_holds_the_state_dict(tmp_path: Path) -> None:
    files = {"train.py": TTS_TRAIN, "tts_io.py": TTS_IO.replace("{SD}", "model.state_dict()")}
    found = lint_project(tmp_path / "bad", files)
    assert [(n, ln) for n, ln, _ in _sev(found, "DDP-SAVE-WRAPPER")] == [("tts_io.py", 6)]
    fixed = "model.module.state_dict() if hasattr(model, 'module') else model.state_dict()"
    files["tts_io.py"] = TTS_IO.replace("{SD}", fixed)
    assert _sev(lint_project(tmp_path / "ok", files), "DDP-SAVE-WRAPPER") == []


# The BatchNorm class chosen through a global name the wrapping method rebinds (blind M).
# lucidrains/lightweight-gan @ fa81e9c7105aa03f9ce699a6a7711e1a0cca86e2:
# lightweight_gan/lightweight_gan.py builds its blocks with `norm_class(chans)`
# (`norm_class = nn.BatchNorm2d` at module level), and Trainer.init_GAN sets
# `global norm_class; norm_class = nn.BatchNorm2d if not self.use_evonorm else ...`
# before it builds the GAN and wraps G and D in DDP. The fix (cab485f5) picks
# nn.SyncBatchNorm on that line when is_ddp: the finding names it, not the entry script.
LWGAN = """\
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

norm_class = nn.BatchNorm2d


class Generator(nn.Module):
    def __init__(self, chans):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(chans, chans, 3), norm_class(chans), nn.GLU(dim=1))

    def forward(self, x):
        return self.net(x)


class Trainer():
    def __init__(self, rank=0, is_ddp=False, use_evonorm=False):
        self.rank = rank
        self.is_ddp = is_ddp
        self.use_evonorm = use_evonorm

    def init_GAN(self):
        global norm_class
        norm_class = {NORM}
        self.G = Generator(64).cuda(self.rank)
        if self.is_ddp:
            self.G_ddp = DDP(self.G, device_ids=[self.rank], broadcast_buffers=False)

    def train(self, batch):
        self.G_ddp(batch).mean().backward()
"""
LWGAN_CLI = """\
import torch.distributed as dist
from lightweight_gan import Trainer


def run_training(rank, world_size):
    dist.init_process_group('nccl', rank=rank, world_size=world_size)
    model = Trainer(rank=rank, is_ddp=True)
    model.init_GAN()
    for batch in range(100):
        model.train(batch)
"""


def test_batchnorm_named_where_the_wrapping_method_picks_the_norm_class(tmp_path: Path) -> None:
    bad = "nn.BatchNorm2d if not self.use_evonorm else nn.Identity"
    files = {"train.py": LWGAN_CLI, "lightweight_gan.py": LWGAN.replace("{NORM}", bad)}
    found = lint_project(tmp_path / "bad", files)
    assert [(n, ln) for n, ln, _ in _sev(found, "DDP-BATCHNORM")] == [("lightweight_gan.py", 25)]
    fixed = "nn.SyncBatchNorm if self.is_ddp else nn.BatchNorm2d"
    files["lightweight_gan.py"] = LWGAN.replace("{NORM}", fixed)
    assert _sev(lint_project(tmp_path / "ok", files), "DDP-BATCHNORM") == []


# The sampler is built in a package that `import _init_paths` puts on sys.path (blind M).
# HRNet/DEKR @ b3904a4a3861c912d07c8294530772af33bda578: tools/_init_paths.py runs
# `add_path(osp.join(this_dir, '..', 'lib'))` with `def add_path(path):
# sys.path.insert(0, path)`; tools/train.py imports it, then `from dataset import
# make_dataloader`, whose lib/dataset/build.py builds the DistributedSampler. The epoch
# loop never called set_epoch (issue #13; fixed in e375276 by
# `train_loader.sampler.set_epoch(epoch)` at its top).
DEKR_PATHS = """\
import os.path as osp
import sys


def add_path(path):
    if path not in sys.path:
        sys.path.insert(0, path)


this_dir = osp.dirname(__file__)

lib_path = osp.join(this_dir, '..', 'lib')
add_path(lib_path)
"""
DEKR_BUILD = """\
import torch
import torch.utils.data
import torch.utils.data.distributed


def make_dataloader(dataset, images_per_batch, distributed=False):
    shuffle = True
    if distributed:
        train_sampler = torch.utils.data.distributed.DistributedSampler(dataset)
        shuffle = False
    else:
        train_sampler = None
    data_loader = torch.utils.data.DataLoader(
        dataset, batch_size=images_per_batch, shuffle=shuffle, sampler=train_sampler
    )
    return data_loader
"""
DEKR_TRAIN = """\
import torch
import torch.distributed as dist

import _init_paths
from dataset import make_dataloader


def main_worker(gpu, args, model, dataset, optimizer):
    dist.init_process_group(backend="nccl", init_method=args.dist_url,
                            world_size=args.world_size, rank=args.rank)
    torch.cuda.set_device(gpu)
    model = torch.nn.parallel.DistributedDataParallel(model.cuda(gpu), device_ids=[gpu])
    train_loader = make_dataloader(dataset, 8, distributed=args.distributed)
    for epoch in range(0, 140):
{SET}        for images in train_loader:
            optimizer.zero_grad()
            model(images).mean().backward()
            optimizer.step()
"""


def test_set_epoch_follows_the_sys_path_an_init_paths_import_adds(tmp_path: Path) -> None:
    files = {
        "tools/train.py": DEKR_TRAIN.replace("{SET}", ""),
        "tools/_init_paths.py": DEKR_PATHS,
        "lib/dataset/__init__.py": "from .build import make_dataloader\n",
        "lib/dataset/build.py": DEKR_BUILD,
    }
    found = lint_project(tmp_path / "bad", files, entry="tools/train.py")
    assert [(n, ln) for n, ln, _ in _sev(found, "DDP-SET-EPOCH")] == [("train.py", 14)]
    fixed = "        if args.distributed:\n            train_loader.sampler.set_epoch(epoch)\n"
    files["tools/train.py"] = DEKR_TRAIN.replace("{SET}", fixed)
    assert _sev(lint_project(tmp_path / "ok", files, entry="tools/train.py"), "DDP-SET-EPOCH") == []


# A second DDP-wrapped model left out of accelerator.accumulate (blind M).
# huggingface/diffusers @ e372e0a20bcd79b72bd5b1536bfd98de6d55e7bb:
# examples/dreambooth/train_dreambooth_lora_sd3.py prepares the transformer and both CLIP
# text encoders, then `models_to_accumulate.extend([text_encoder_one])` before
# `with accelerator.accumulate(models_to_accumulate):`, whose block encodes the prompts
# with text_encoder_two too. The fix (3e57cfe9, PR #9682) extends the list with both.
SD3 = """\
import torch
from accelerate import Accelerator


def main(args, transformer, text_encoder_one, text_encoder_two, optimizer, train_dataloader, lr_scheduler):
    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
    if args.train_text_encoder:
        (
            transformer,
            text_encoder_one,
            text_encoder_two,
            optimizer,
            train_dataloader,
            lr_scheduler,
        ) = accelerator.prepare(
            transformer, text_encoder_one, text_encoder_two, optimizer, train_dataloader, lr_scheduler
        )
    else:
        transformer, optimizer, train_dataloader, lr_scheduler = accelerator.prepare(
            transformer, optimizer, train_dataloader, lr_scheduler
        )
    for epoch in range(args.num_train_epochs):
        for step, batch in enumerate(train_dataloader):
            models_to_accumulate = [transformer]
            if args.train_text_encoder:
                models_to_accumulate.extend({MODELS})
            with accelerator.accumulate(models_to_accumulate):
                prompt_embeds = encode_prompt(
                    text_encoders=[text_encoder_one, text_encoder_two], prompt=batch["prompts"]
                )
                loss = transformer(batch["pixel_values"], prompt_embeds).mean()
                accelerator.backward(loss)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
"""


def test_no_sync_a_prepared_model_left_out_of_accumulate(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "bad", {"train.py": SD3.replace("{MODELS}", "[text_encoder_one]")})
    assert [(n, ln) for n, ln, _ in _sev(found, "DDP-NO-SYNC")] == [("train.py", 26)]
    both = SD3.replace("{MODELS}", "[text_encoder_one, text_encoder_two]")
    assert _sev(lint_project(tmp_path / "ok", {"train.py": both}), "DDP-NO-SYNC") == []


# A loader class that seeds the global generators with its default (blind M).
# deepmodeling/deepmd-kit @ 269ed3e7cb9b8a92b33948c79645339e2f36add8:
# deepmd/pt/utils/dataloader.py's DpLoaderSet.__init__(..., seed=10) calls
# setup_seed(seed) (torch.manual_seed); deepmd/pt/entrypoints/main.py builds the
# validation, then the training DpLoaderSet on every rank without a seed, and the
# WeightedRandomSampler that picks each batch's system draws from the global generator:
# every rank the same systems. The fix (7eaa80cb, #4015) passes seed=(seed + rank) to
# both; the finding names the training loader's, the last to seed before training.
DP_LOADER = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, WeightedRandomSampler
from torch.utils.data.distributed import DistributedSampler


def setup_seed(seed):
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


class DpLoaderSet(Dataset):
    def __init__(self, systems, batch_size, type_map, seed=10, shuffle=True):
        setup_seed(seed)
        self.systems = systems
        self.dataloaders = []
        for system in self.systems:
            sampler = DistributedSampler(system) if dist.is_initialized() else None
            self.dataloaders.append(DataLoader(system, batch_size=batch_size, sampler=sampler))

    def __len__(self):
        return len(self.dataloaders)


def get_weighted_sampler(training_data, probs):
    with torch.device("cpu"):
        sampler = WeightedRandomSampler(probs, len(training_data), replacement=True)
    return sampler
"""
DP_MAIN = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

from dataloader import DpLoaderSet, get_weighted_sampler


def get_trainer(config, model, seed=None):
    local_rank = os.environ.get("LOCAL_RANK")
    if local_rank is not None:
        local_rank = int(local_rank)
        dist.init_process_group(backend="nccl")

    def prepare_trainer_input_single(data_dict_single, rank=0):
        validation_data_single = DpLoaderSet(
            data_dict_single["validation_systems"],
            data_dict_single["batch_size"],
            config["type_map"],{VSEED}
        )
        train_data_single = DpLoaderSet(
            data_dict_single["training_systems"],
            data_dict_single["batch_size"],
            config["type_map"],{TSEED}
        )
        return train_data_single, validation_data_single

    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    train_data, validation_data = prepare_trainer_input_single(config["training"], rank=rank)
    sampler = get_weighted_sampler(train_data, config["probs"])
    loader = DataLoader(train_data, sampler=sampler, batch_size=None)
    model = DDP(model.to(local_rank), device_ids=[local_rank])
    optimizer = torch.optim.Adam(model.parameters())
    for batch in loader:
        optimizer.zero_grad()
        model(batch).mean().backward()
        optimizer.step()
"""


def test_rank_seed_a_loader_class_seeding_alike_through_its_default(tmp_path: Path) -> None:
    bad = DP_MAIN.replace("{VSEED}", "").replace("{TSEED}", "")
    found = lint_project(tmp_path / "bad", {"train.py": bad, "dataloader.py": DP_LOADER})
    assert [(n, ln) for n, ln, _ in _sev(found, "DDP-RANK-SEED")] == [("train.py", 23)]
    seeded = "\n            seed=(seed + rank) if seed is not None else None,"
    ok = DP_MAIN.replace("{VSEED}", seeded).replace("{TSEED}", seeded)
    found = lint_project(tmp_path / "ok", {"train.py": ok, "dataloader.py": DP_LOADER})
    assert _sev(found, "DDP-RANK-SEED") == []
