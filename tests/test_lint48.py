"""Round 48 (misses of blind batch AG1), each on the real lines (cited with repository
and commit) beside twins that must stay silent: `import a.b` follows a/b too; a bare
`.cuda()` in a project that places everything else with `.cuda(rank)` and never sets
the current GPU (DDP-HARDCODED-DEVICE); a loader's `shuffle=True` on its own line is a
place of its DDP-SAMPLER finding."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

# hzxie/CityDreamer @ ddb08ea2f57f41bc97c54f0d37200db20b18c2ab: run.py 19-22 and 120-132,
# core/__init__.py, core/gancraft/__init__.py, core/gancraft/train.py 31-47 and 114-121,
# utils/distributed.py 62-70 (fixed in f98d725: `map_location=gancraft_g.device`).
CITY_RUN = """\
import torch

import core.gancraft
import utils.distributed


if __name__ == "__main__":
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        utils.distributed.init_dist(local_rank)
    core.gancraft.train(cfg)
"""
CITY_DIST = """\
import torch


def init_dist(local_rank, backend="nccl", **kwargs):
    if torch.distributed.is_available():
        if torch.distributed.is_initialized():
            return torch.cuda.current_device()
        torch.cuda.set_device(local_rank)
        torch.distributed.init_process_group(
            backend=backend, init_method="env://", **kwargs
        )


def get_rank():
    return torch.distributed.get_rank()
"""
CITY_TRAIN = """\
import torch

import models.gancraft
import utils.distributed


def train(cfg):
    local_rank = utils.distributed.get_rank()
    gancraft_g = models.gancraft.GanCraftGenerator(cfg)
    if torch.cuda.is_available():
        gancraft_g = torch.nn.parallel.DistributedDataParallel(
            gancraft_g.to(local_rank),
            device_ids=[local_rank],
        )
    if "CKPT" in cfg.CONST:
        checkpoint = torch.load(cfg.CONST.CKPT)
        gancraft_g.load_state_dict(checkpoint["gancraft_g"])
        init_epoch = checkpoint["epoch_index"]
"""
LOAD_LINE = CITY_TRAIN.splitlines().index("        checkpoint = torch.load(cfg.CONST.CKPT)") + 1


def _city(tmp_path: Path, train: str) -> list[tuple[str, int, str]]:
    files = {
        "run.py": CITY_RUN,
        "core/__init__.py": "",
        "core/gancraft/__init__.py": "from .train import train\n",
        "core/gancraft/train.py": train,
        "utils/__init__.py": "",
        "utils/distributed.py": CITY_DIST,
        "models/__init__.py": "",
        "models/gancraft.py": "import torch\n\n\nclass GanCraftGenerator(torch.nn.Module):\n    pass\n",
    }
    return severities(lint_project(tmp_path, files, "run.py"), "DDP-LOAD-MAP-LOCATION")


def test_a_dotted_import_runs_the_package_it_names(tmp_path: Path) -> None:
    assert _city(tmp_path / "a", CITY_TRAIN) == [("train.py", LOAD_LINE, "warning")]


def test_the_fix_stays_silent(tmp_path: Path) -> None:
    fixed = CITY_TRAIN.replace(
        "torch.load(cfg.CONST.CKPT)", "torch.load(cfg.CONST.CKPT, map_location=gancraft_g.device)"
    )
    assert _city(tmp_path / "b", fixed) == []


# hzxie/CityDreamer @ f415f580d940842b25ad092f71bcd5fd04c0d962, core/train.py 17-55
# (fixed in fffc9ff: a DistributedSampler in place of `shuffle=True`, and set_epoch).
CITY_SAMPLER = """\
import torch


def train(cfg):
    network = build(cfg)
    if torch.cuda.is_available():
        torch.distributed.init_process_group("nccl")
        rank = torch.distributed.get_rank()
        device_id = rank % torch.cuda.device_count()
        network = torch.nn.parallel.DistributedDataParallel(
            network.to(device_id), device_ids=[device_id]
        )
    train_data_loader = torch.utils.data.DataLoader(
        dataset=get_dataset(cfg, "train"),
        batch_size=cfg.TRAIN.BATCH_SIZE,
        num_workers=cfg.CONST.N_WORKERS,
        pin_memory=True,
        shuffle=True,
        drop_last=True,
    )
    for epoch_idx in range(cfg.TRAIN.N_EPOCHS):
        for data in train_data_loader:
            loss = network(data)
            loss.backward()
"""
_LINES = CITY_SAMPLER.splitlines()
LOADER_LINE = _LINES.index("    train_data_loader = torch.utils.data.DataLoader(") + 1
SHUFFLE_LINE = _LINES.index("        shuffle=True,") + 1


def _sampler(tmp_path: Path, text: str) -> list[list[tuple[str, int]]]:
    found = lint_project(tmp_path, {"train.py": text})
    return [[(Path(p).name, n) for p, n in f.lines()] for f in found if f.id == "DDP-SAMPLER"]


def test_shuffle_on_its_own_line_is_a_place_of_the_finding(tmp_path: Path) -> None:
    assert _sampler(tmp_path / "a", CITY_SAMPLER) == [
        [("train.py", LOADER_LINE), ("train.py", SHUFFLE_LINE)]
    ]


def test_shuffle_on_the_call_line_adds_no_place(tmp_path: Path) -> None:
    one_line = CITY_SAMPLER.replace(
        "torch.utils.data.DataLoader(\n", "torch.utils.data.DataLoader(shuffle=True,\n"
    ).replace("        shuffle=True,\n", "")
    assert _sampler(tmp_path / "b", one_line) == [[("train.py", LOADER_LINE)]]
    sampled = CITY_SAMPLER.replace(
        "        shuffle=True,\n",
        "        sampler=torch.utils.data.distributed.DistributedSampler(dataset),\n",
    )
    assert _sampler(tmp_path / "c", sampled) == []


# lucidrains/lightweight-gan @ c192ab24bba6b48c0906d622f0d939f1c8cbde1a:
# lightweight_gan/cli.py 31-50 and 154-160, lightweight_gan/lightweight_gan.py 67-74,
# 564-571, 697-756 (fixed in 353a427, which gives grad_outputs the rank's device).
LWGAN_CLI = """\
import os
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from lightweight_gan import Trainer


def run_training(rank, world_size, model_args):
    is_ddp = world_size > 1
    if is_ddp:
        os.environ['MASTER_ADDR'] = 'localhost'
        os.environ['MASTER_PORT'] = '12355'
        dist.init_process_group('nccl', rank=rank, world_size=world_size)
    model_args.update(is_ddp=is_ddp, rank=rank, world_size=world_size)
    model = Trainer(**model_args)
    model.train()


def train_from_folder(multi_gpus=False):
    world_size = torch.cuda.device_count()
    mp.spawn(run_training, args=(world_size, {}), nprocs=world_size, join=True)
"""
LWGAN = """\
import torch
from torch.autograd import grad as torch_grad
from torch.nn.parallel import DistributedDataParallel as DDP


def gradient_penalty(images, outputs, weight = 10):
    batch_size = images.shape[0]
    gradients = torch_grad(outputs=outputs, inputs=images,
                           grad_outputs=list(map(lambda t: torch.ones(t.size()).cuda(), outputs)),
                           create_graph=True, retain_graph=True, only_inputs=True)[0]
    return weight * gradients.norm(2, dim=1).mean()


class Trainer():
    def __init__(self, is_ddp = False, rank = 0, world_size = 1):
        self.is_ddp = is_ddp
        self.rank = rank
        self.world_size = world_size

    def init_GAN(self):
        self.GAN = LightweightGAN(rank = self.rank)
        if self.is_ddp:
            ddp_kwargs = {'device_ids': [self.rank]}
            self.D_aug_ddp = DDP(self.GAN.D_aug, **ddp_kwargs)

    def train(self):
        self.init_GAN()
        D_aug = self.GAN.D_aug if not self.is_ddp else self.D_aug_ddp
        image_batch = next(self.loader).cuda(self.rank)
        image_batch.requires_grad_()
        real_output, real_aux_loss = D_aug(image_batch,  calc_aux_loss = True)
        gp = gradient_penalty(image_batch, (real_output,))
        gp.backward()
"""
BARE_LINE = (
    LWGAN.splitlines().index(
        "                           grad_outputs=list(map(lambda t: torch.ones(t.size()).cuda(), outputs)),"
    )
    + 1
)


def _lwgan(tmp_path: Path, lib: str) -> list[tuple[str, int, str]]:
    files = {
        "lightweight_gan/__init__.py": "from lightweight_gan.lightweight_gan import Trainer\n",
        "lightweight_gan/cli.py": LWGAN_CLI,
        "lightweight_gan/lightweight_gan.py": lib,
    }
    found = lint_project(tmp_path, files, "lightweight_gan/cli.py")
    return severities(found, "DDP-HARDCODED-DEVICE")


def test_a_bare_cuda_beside_cuda_rank_is_said_where_it_is(tmp_path: Path) -> None:
    # said at the bare .cuda(), not at the spawn worker: the rest is on the rank's GPU
    assert _lwgan(tmp_path / "a", LWGAN) == [("lightweight_gan.py", BARE_LINE, "warning")]


def test_the_fix_and_a_set_device_stay_silent(tmp_path: Path) -> None:
    fixed = LWGAN.replace("torch.ones(t.size()).cuda()", "torch.ones(t.size()).cuda(images.device)")
    assert _lwgan(tmp_path / "b", fixed) == []
    picked = LWGAN.replace(
        "        self.rank = rank\n",
        "        self.rank = rank\n        torch.cuda.set_device(rank)\n",
    )
    assert _lwgan(tmp_path / "c", picked) == []
