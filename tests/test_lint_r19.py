"""Round 19 (misses and one false error of blind batch AO, tuned after its score): readings on
the real lines (cited with repository and commit) beside twins that must stay silent: a
DistributedSampler seed that travels on the arguments object from a per-rank worker seed
(DDP-SAMPLER-SEED); a `set_device` that picks the first GPU for every process while each
wraps on its own (DDP-INIT-BEFORE-SET-DEVICE); a name the loop around the read rebinds is
not "bound on one rank only" (no DDP-RANK-ONLY-NAME)."""

from __future__ import annotations

import ast

import pytest

from ddptui.lint import lint_source

# mlcommons/training @ f255dee4ed5cc95de490d2b4332098a9f064ff24 (as handed in blind batch AO1),
# image_segmentation/pytorch/main.py 29-46 and data_loading/data_loader.py 79-100; fixed in
# 12555b6 (the sampler takes the shared shuffling seed).
UNET3D = """\
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler


def get_rank():
    return dist.get_rank() if dist.is_initialized() else 0


def get_data_loaders(flags, num_shards, global_rank):
    train_dataset = PytTrain(flags.data_dir)
    train_sampler = DistributedSampler(train_dataset, seed=flags.seed, drop_last=True) if num_shards > 1 else None
    return DataLoader(train_dataset, batch_size=flags.batch_size, sampler=train_sampler)


def main():
    flags = PARSER.parse_args()
    dist.init_process_group(backend="nccl")
    world_size = dist.get_world_size()
    local_rank = get_rank()
    worker_seeds, shuffling_seeds = setup_seeds(flags.seed, flags.epochs)
    worker_seed = worker_seeds[local_rank]
    seed_everything(worker_seed)
    flags.seed = worker_seed
    train_loader = get_data_loaders(flags, num_shards=world_size, global_rank=local_rank)
    for epoch in range(flags.epochs):
        train_loader.sampler.set_epoch(epoch)
        for batch in train_loader:
            pass
"""


def _ids(text: str) -> list[tuple[str, int]]:
    return [(f.id, f.line) for f in lint_source(text, "train.py")]


def test_a_sampler_seed_set_from_the_per_rank_worker_seed_is_found_at_the_sampler() -> None:
    found = [f for f in lint_source(UNET3D, "train.py") if f.id == "DDP-SAMPLER-SEED"]
    assert [f.line for f in found] == [11]
    assert "flags.seed" in found[0].summary


def test_the_shared_shuffling_seed_stays_silent() -> None:
    # the fix: the sampler's seed is the same on every rank
    fixed = UNET3D.replace("    flags.seed = worker_seed\n", "    flags.seed = shuffling_seeds[0]\n")
    assert "DDP-SAMPLER-SEED" not in {i for i, _ in _ids(fixed)}


# jolibrain/joliGEN @ 2c98b49cfb22638b8ae84d12e914e78531cd1429 (as handed in blind batch AO2),
# train.py 31-80, options/base_options.py 187 and models/base_model.py 167-173; fixed in
# 4954717 (`torch.cuda.set_device(opt.gpu_ids[rank])` at the top of the spawned worker).
JOLIGEN = """\
import os
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def parse_options(opt):
    if len(opt.gpu_ids) > 0:
        torch.cuda.set_device(opt.gpu_ids[0])
    return opt


def setup(rank, world_size, port):
    os.environ['MASTER_ADDR'] = 'localhost'
    os.environ['MASTER_PORT'] = port
    dist.init_process_group("nccl", rank=rank, world_size=world_size)


class ModulatedConv2d(torch.nn.Module):
    def forward(self, input, style):
        if style is None:
            style = torch.ones(input.shape[0], 1, input.shape[1], 1, 1).cuda()
        return input * style


class Model:
    def parallelize(self, rank):
        net = self.netG.to(self.gpu_ids[rank])
        net = torch.nn.SyncBatchNorm.convert_sync_batchnorm(net)
        self.netG = torch.nn.parallel.DistributedDataParallel(net, device_ids=[self.gpu_ids[rank]])


def train_gpu(rank, world_size, opt, dataset):
    setup(rank, world_size, opt.ddp_port)
    dataloader = create_dataloader(opt, rank, dataset)
    model = Model()
    model.parallelize(rank)
    if rank == 0 and opt.display_networks:
        data = next(iter(dataloader))
        model.save_networks_img(data)
    for epoch in range(opt.n_epochs):
        for i, data in enumerate(dataloader):
            model.set_input(data)
            model.optimize_parameters()


if __name__ == '__main__':
    opt = parse_options(TrainOptions().parse())
    world_size = len(opt.gpu_ids)
    mp.spawn(train_gpu, args=(world_size, opt, dataset), nprocs=world_size, join=True)
"""


def test_a_set_device_of_the_first_gpu_beside_per_rank_device_ids_is_found() -> None:
    found = [f for f in lint_source(JOLIGEN, "train.py") if f.id == "DDP-INIT-BEFORE-SET-DEVICE"]
    assert [f.line for f in found] == [16]
    assert "picks the first GPU" in found[0].summary
    assert "train.py:9" in found[0].summary
    # where work lands on GPU 0 while the model is on the rank's GPU: StyleGAN2's forward
    # (the same project at cdb571f, models/modules/stylegan_networks.py:309)
    assert [(p.line, p.label) for p in found[0].also] == [(22, "placed on the current GPU (0) at")]


def test_a_set_device_of_each_processs_own_gpu_stays_silent() -> None:
    fixed = JOLIGEN.replace(
        "    setup(rank, world_size, opt.ddp_port)\n",
        "    torch.cuda.set_device(opt.gpu_ids[rank])\n    setup(rank, world_size, opt.ddp_port)\n",
    )
    assert "DDP-INIT-BEFORE-SET-DEVICE" not in {i for i, _ in _ids(fixed)}


def test_a_name_the_loop_rebinds_is_not_bound_on_one_rank_only() -> None:
    # `data` is bound under `if rank == 0 ...` above, but the loop binds it before each read
    assert "DDP-RANK-ONLY-NAME" not in {i for i, _ in _ids(JOLIGEN)}


def test_a_read_after_the_loop_of_a_rank_only_name_is_still_found() -> None:
    # twin: read where the loop's binding does not reach (after a loop that may not run)
    twin = JOLIGEN.replace(
        "            model.optimize_parameters()\n",
        "            model.optimize_parameters()\n    model.set_input(data)\n",
    )
    assert ("DDP-RANK-ONLY-NAME", 39) in _ids(twin)


# raoyongming/GFNet @ 2de48b626ea805de82a7f389fed930af1ae0340d (a correct case of blind batch
# AP1), gfnet.py 150-262 and main_gfnet.py 244-360: `pre_logits` is built in `__init__` and never
# read, but it is an nn.Identity (no parameters) unless `representation_size` is given.
GFNET = """\
import os
from collections import OrderedDict
import torch
import torch.nn as nn
import torch.distributed as dist


class GFNet(nn.Module):
    def __init__(self, num_classes=1000, embed_dim=768, depth=12, representation_size=None):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(embed_dim, embed_dim) for i in range(depth)])
        self.norm = nn.LayerNorm(embed_dim)
        if representation_size:
            self.num_features = representation_size
            self.pre_logits = nn.Sequential(OrderedDict([
                ('fc', nn.Linear(embed_dim, representation_size)),
                ('act', nn.Tanh())
            ]))
        else:
            self.pre_logits = nn.Identity()
        self.head = nn.Linear(embed_dim, num_classes)

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x).mean(1)
        return self.head(x)


local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
torch.manual_seed(0)
model = GFNet(embed_dim=384, depth=12).cuda()
model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
"""


def test_a_layer_that_is_an_identity_unless_configured_is_no_unused_parameter_error() -> None:
    assert "DDP-FIND-UNUSED" not in {i for i, _ in _ids(GFNET)}


def test_a_layer_with_parameters_on_every_path_that_forward_never_reads_is_still_an_error() -> None:
    twin = GFNET.replace(
        "self.pre_logits = nn.Identity()", "self.pre_logits = nn.Linear(embed_dim, embed_dim)"
    )
    found = [f for f in lint_source(twin, "train.py") if f.id == "DDP-FIND-UNUSED"]
    assert [f.severity for f in found] == ["error"]
    assert "self.pre_logits" in found[0].summary


# goodfire-ai/spd @ 356f8cfedab14e621c70de460971d6d148f44e80 (blind batch AP2), spd/utils/
# general_utils.py 42-52 and spd/run_spd.py 63-71, written for Python 3.12: type parameters
# (PEP 695) made five of its modules "not valid Python" on 3.11, its data loop among them.
SPD_UTILS = """\
import random
import torch


def set_seed(seed: int | None) -> None:
    if seed is not None:
        torch.manual_seed(seed)
        random.seed(seed)


def replace_pydantic_model[BaseModelType: BaseModel](
    model: BaseModelType, *updates: dict[str, Any]
) -> BaseModelType:
    return model


class Box[T: (int, list[str])](Base):
    type Inner[K] = dict[K, T]


type Loader = DataLoader[int]


def loop_dataloader[T](dl: DataLoader[T]):
    dl_iter = iter(dl)
    while True:
        yield next(dl_iter)
"""


def test_python_312_type_parameters_parse_with_lines_and_names_kept() -> None:
    from ddptui.lint.project import parse

    tree = parse(SPD_UTILS, "general_utils.py")
    defs = {n.name: n.lineno for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    assert defs == {"set_seed": 5, "replace_pydantic_model": 11, "Box": 17, "loop_dataloader": 24}
    aliases = {t.id: n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets}
    assert aliases == {"Inner": 18, "Loader": 21, "dl_iter": 25}


def test_code_that_is_not_python_still_says_so() -> None:
    from ddptui.lint.model import LintInputError
    from ddptui.lint.project import parse

    with pytest.raises(LintInputError, match=r"bad\.py:1:.*not valid Python"):
        parse("def f[T](x) x\n", "bad.py")


# goodfire-ai/spd (the same commit), spd/run_spd.py 104-121, 175-219 and spd/losses.py 156-170:
# the step runs the DDP wrapper's forward first, then hands the module inside it to the loss
# helpers, two calls down; the reducer was prepared by that forward, the extra gradients are
# summed in before its hooks fire: no DDP-FORWARD-BYPASS.
SPD_STEP = """\
import os
import torch
import torch.distributed as dist


def calc_masked_recon_loss(model, batch, masks, target_out):
    out = model(batch, mode="components", masks=masks)
    return ((out - target_out) ** 2).mean()


def calculate_losses(model, batch, masks, target_out):
    return calc_masked_recon_loss(model, batch, masks, target_out)


def optimize(model, train_iterator, steps, device):
    local_rank = int(os.environ["LOCAL_RANK"])
    wrapped_model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
    component_model = wrapped_model.module
    opt = torch.optim.AdamW(component_model.parameters())
    for step in range(steps):
        batch = next(train_iterator).to(device)
        target_out, pre_weight_acts = wrapped_model(batch, mode="pre_forward_cache")
        masks = component_model.calc_causal_importances(pre_weight_acts)
        loss = calculate_losses(component_model, batch, masks, target_out)
        loss.backward()
        opt.step()
        opt.zero_grad()
"""


def test_the_module_run_two_calls_below_a_wrapper_forward_of_the_step_is_no_bypass() -> None:
    assert "DDP-FORWARD-BYPASS" not in {i for i, _ in _ids(SPD_STEP)}


def test_the_module_run_with_no_wrapper_forward_in_the_step_is_still_a_bypass() -> None:
    twin = SPD_STEP.replace(
        'target_out, pre_weight_acts = wrapped_model(batch, mode="pre_forward_cache")',
        'target_out, pre_weight_acts = component_model(batch, mode="pre_forward_cache")',
    )
    assert "DDP-FORWARD-BYPASS" in {i for i, _ in _ids(twin)}


# SeungjunNah/DeepDeblur-PyTorch @ 3b507555dcc0c3c5756f25d074d354cbd0404a4a (blind batch AP2),
# src/model/__init__.py 38-56; fixed in 26047f7 (the wrapping loop dedented out of `else:`).
DEBLUR = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DataParallel, DistributedDataParallel


class Model(torch.nn.Module):
    def parallelize(self):
        if self.args.device_type == 'cuda':
            if self.args.distributed:
                Parallel = DistributedDataParallel
                parallel_args = {
                    "device_ids": [self.args.rank],
                    "output_device": self.args.rank,
                }
            else:
                Parallel = DataParallel
                parallel_args = {
                    'device_ids': list(range(self.n_GPUs)),
                    'output_device': self.args.rank # always 0
                }

                for model_key in self.model:
                    if self.model[model_key] is not None:
                        self.model[model_key] = Parallel(self.model[model_key], **parallel_args)
"""


def test_a_ddp_alias_called_only_in_the_other_arm_is_a_wrap_that_never_happens() -> None:
    found = [f for f in lint_source(DEBLUR, "model.py") if f.id == "DDP-NOT-APPLIED"]
    assert [(f.line, f.severity) for f in found] == [(22, "error")]
    assert [(p.line, p.label) for p in found[0].also] == [(10, "bound to DistributedDataParallel at")]


def test_the_wrapping_loop_after_the_if_stays_silent() -> None:
    fixed = DEBLUR.replace(
        """
                for model_key in self.model:
                    if self.model[model_key] is not None:
                        self.model[model_key] = Parallel(self.model[model_key], **parallel_args)
""",
        """
            for model_key in self.model:
                if self.model[model_key] is not None:
                    self.model[model_key] = Parallel(self.model[model_key], **parallel_args)
""",
    )
    assert "DDP-NOT-APPLIED" not in {i for i, _ in _ids(fixed)}


# NVIDIA/tacotron2 @ 3973b3e495c204ecbb46b1e2141b00ae7f5917ef (blind batch AQ1), train.py 69-77,
# 122-146 and 175-240; fixed in 6e43055 ("val logger on gpu 0 only": the call under `rank == 0`).
TACOTRON = """\
import os
import torch
import torch.distributed as dist


def prepare_directories_and_logger(output_directory, log_directory, rank):
    if rank == 0:
        if not os.path.isdir(output_directory):
            os.makedirs(output_directory)
        logger = Tacotron2Logger(os.path.join(output_directory, log_directory))
    else:
        logger = None
    return logger


def validate(model, criterion, valset, iteration, logger, rank):
    model.eval()
    with torch.no_grad():
        y, y_pred = valset[0], model(valset[0])
        reduced_val_loss = criterion(y_pred, y).item()
    model.train()
    logger.log_validation(reduced_val_loss, model, y, y_pred, iteration)


def train(output_directory, log_directory, rank, hparams):
    dist.init_process_group("nccl", rank=rank, world_size=hparams.n_gpus)
    torch.cuda.set_device(rank % torch.cuda.device_count())
    model = torch.nn.parallel.DistributedDataParallel(Tacotron2(hparams).cuda())
    logger = prepare_directories_and_logger(output_directory, log_directory, rank)
    for iteration, batch in enumerate(train_loader):
        loss = criterion(model(batch), batch)
        loss.backward()
        if rank == 0:
            logger.log_training(loss.item(), iteration)
        if iteration % hparams.iters_per_checkpoint == 0:
            validate(model, criterion, valset, iteration, logger, rank)
"""


def test_a_logger_that_is_none_off_rank_0_used_on_every_rank_is_found_at_the_use() -> None:
    found = [f for f in lint_source(TACOTRON, "train.py") if f.id == "DDP-RANK-ONLY-NAME"]
    assert [(f.line, f.severity) for f in found] == [(22, "error")]
    assert "'NoneType' object has no attribute 'log_validation'" in found[0].summary
    assert [(p.line, p.label) for p in found[0].also] == [(12, "None on the other ranks at")]


def test_the_use_under_the_rank_test_or_a_none_test_stays_silent() -> None:
    fixed = TACOTRON.replace(
        "    logger.log_validation(", "    if rank == 0:\n        logger.log_validation("
    )
    assert "DDP-RANK-ONLY-NAME" not in {i for i, _ in _ids(fixed)}
    tested = TACOTRON.replace(
        "    logger.log_validation(", "    if logger is not None:\n        logger.log_validation("
    )
    assert "DDP-RANK-ONLY-NAME" not in {i for i, _ in _ids(tested)}
    # and a logger every rank gets (a no-op one off rank 0) is no finding
    every = TACOTRON.replace("        logger = None\n", "        logger = NullLogger()\n")
    assert "DDP-RANK-ONLY-NAME" not in {i for i, _ in _ids(every)}


def test_a_name_given_a_logger_again_on_every_rank_is_left_alone() -> None:
    # the reading does not follow statement order: a third binding makes it say nothing
    again = TACOTRON.replace(
        "    for iteration, batch in enumerate(train_loader):\n",
        "    logger = get_logger(rank)\n    for iteration, batch in enumerate(train_loader):\n",
    )
    assert "DDP-RANK-ONLY-NAME" not in {i for i, _ in _ids(again)}
    # and a use inside `x and x.f()` is tested, not the `x` of `x.f()` alone
    anded = TACOTRON.replace(
        "    logger.log_validation(", "    logger and logger.log_validation("
    )
    assert "DDP-RANK-ONLY-NAME" not in {i for i, _ in _ids(anded)}
    ored = TACOTRON.replace("    logger.log_validation(", "    x = logger.log_validation(")
    assert "DDP-RANK-ONLY-NAME" in {i for i, _ in _ids(ored)}
