"""Round 13 (blind batch J). The code is the real projects' (only the lines needed, each
cited with its repository and commit): three correct projects on which ddptui raised an
error, each beside a twin with the pitfall, which keeps it."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project

from ddptui.lint.model import LintFinding


def _sev(found: list[LintFinding], fid: str) -> list[tuple[str, int, str]]:
    return [(Path(f.file).name, f.line, f.severity) for f in found if f.id == fid]


# jaywalnut310/vits @ 2e561ba58618d021b5b8323d3765880f7e0ecfdb, train.py (a correct
# project): `evaluate` moves its batch with `.cuda(0)`, and only rank 0 calls it (the
# other ranks run the same `train_and_evaluate` but skip the `if rank==0:` block).
VITS_TRAIN = """\
import os
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
  n_gpus = torch.cuda.device_count()
  os.environ['MASTER_ADDR'] = 'localhost'
  os.environ['MASTER_PORT'] = '80000'
  hps = get_hparams()
  mp.spawn(run, nprocs=n_gpus, args=(n_gpus, hps,))


def run(rank, n_gpus, hps):
  dist.init_process_group(backend='nccl', init_method='env://', world_size=n_gpus, rank=rank)
  torch.cuda.set_device(rank)
  net_g = SynthesizerTrn(**hps.model).cuda(rank)
  net_g = DDP(net_g, device_ids=[rank])
  for epoch in range(1, hps.train.epochs + 1):
    if rank==0:
      train_and_evaluate(rank, epoch, hps, net_g, [train_loader, eval_loader])
    else:
      train_and_evaluate(rank, epoch, hps, net_g, [train_loader, None])


def train_and_evaluate(rank, epoch, hps, net_g, loaders):
  train_loader, eval_loader = loaders
  for batch_idx, (x, x_lengths) in enumerate(train_loader):
    x, x_lengths = x.cuda(rank, non_blocking=True), x_lengths.cuda(rank, non_blocking=True)
    loss = net_g(x, x_lengths)
    loss.backward()
    if rank==0:
      if batch_idx % hps.train.eval_interval == 0:
        evaluate(hps, net_g, eval_loader)


def evaluate(hps, generator, eval_loader):
    generator.eval()
    with torch.no_grad():
      for batch_idx, (x, x_lengths, spec, spec_lengths) in enumerate(eval_loader):
        x, x_lengths = x.cuda(0), x_lengths.cuda(0)
        spec, spec_lengths = spec.cuda(0), spec_lengths.cuda(0)
        break
"""


def test_vits_gpu0_in_rank0_only_code_is_silent(tmp_path: Path) -> None:
    assert _sev(lint_project(tmp_path, {"train.py": VITS_TRAIN}), "DDP-HARDCODED-DEVICE") == []


def test_gpu0_on_every_rank_keeps_the_error(tmp_path: Path) -> None:
    # the twin: every rank evaluates, so every rank moves its batch to GPU 0
    text = VITS_TRAIN.replace(
        "    if rank==0:\n      if batch_idx", "    if True:\n      if batch_idx"
    )
    found = _sev(lint_project(tmp_path, {"train.py": text}), "DDP-HARDCODED-DEVICE")
    assert ("train.py", 43, "error") in found


# hkchengrex/XMem @ f3b841d50df058910bbf690229ddc15fb1aef7d6, train.py and
# model/trainer.py (a correct project, launched by torchrun on one node): the global rank
# is kept as `local_rank` and is the GPU index; nothing in the project reads a local rank
# or a node count.
XMEM_TRAIN = """\
import torch
import torch.distributed as distributed

from model.trainer import XMemTrainer

distributed.init_process_group(backend="nccl")
print(f'CUDA Device count: {torch.cuda.device_count()}')

local_rank = torch.distributed.get_rank()
world_size = torch.distributed.get_world_size()
torch.cuda.set_device(local_rank)

model = XMemTrainer(config, local_rank=local_rank, world_size=world_size).train()
train_sampler = torch.utils.data.distributed.DistributedSampler(dataset, rank=local_rank, shuffle=True)
for e in range(10):
    train_sampler.set_epoch(e)
    for data in train_loader:
        model.do_pass(data, e)
"""

XMEM_TRAINER = """\
import torch.nn as nn


class XMemTrainer:
    def __init__(self, config, logger=None, save_path=None, local_rank=0, world_size=1):
        self.local_rank = local_rank
        self.XMem = nn.parallel.DistributedDataParallel(
            XMem(config).cuda(),
            device_ids=[local_rank], output_device=local_rank, broadcast_buffers=False)

    def do_pass(self, data, it=0):
        out = self.XMem(data)
        out.backward()

    def train(self):
        self.XMem.train()
        return self
"""


def test_xmem_global_rank_on_one_node_is_a_warning(tmp_path: Path) -> None:
    found = lint_project(tmp_path, {"train.py": XMEM_TRAIN, "model/trainer.py": XMEM_TRAINER})
    hits = _sev(found, "DDP-HARDCODED-DEVICE")
    # said once where `local_rank` is given the global rank (round 34: the line the fix
    # changes, not each of its uses); the trainer's `device_ids` gets it as a parameter
    assert ("train.py", 9, "warning") in hits and ("trainer.py", 9, "warning") in hits
    assert not [f for f in found if f.severity == "error"]
    assert any("one node only" in f.summary for f in found if f.id == "DDP-HARDCODED-DEVICE")


def test_global_rank_in_a_multi_node_project_keeps_the_error(tmp_path: Path) -> None:
    # the twin reads the launcher's LOCAL_RANK and still hands the global rank over
    text = XMEM_TRAIN.replace(
        "world_size = torch", "node_gpu = int(os.environ['LOCAL_RANK'])\nworld_size = torch"
    ).replace("import torch\n", "import os\nimport torch\n", 1)
    hits = _sev(lint_project(tmp_path, {"train.py": text}), "DDP-HARDCODED-DEVICE")
    assert ("train.py", 10, "error") in hits


# Vchitect/Latte @ b27c24a17487e3c33ae4e92364521303d0f14845, train.py (a correct
# project): the unfinished resume branch ("TODO, need to checkout") calls
# `model.load_state(...)`, an Accelerator method that no model class of the project has.
LATTE_TRAIN = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from models import get_models


def main(args):
    dist.init_process_group("nccl")
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    model = get_models(args)
    model = DDP(model.to(device), device_ids=[local_rank])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0)
    if args.resume_from_checkpoint:
        # TODO, need to checkout
        dirs = os.listdir(os.path.join(experiment_dir, 'checkpoints'))
        path = dirs[-1]
        model.load_state(os.path.join(dirs, path))
    for x in loader:
        loss = model(x.to(device)).mean()
        loss.backward()
        opt.step()
"""

LATTE_MODELS = """\
import torch.nn as nn


class Latte(nn.Module):
    def __init__(self, depth=28):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(depth)])

    def forward(self, x):
        return self.blocks[0](x)


def get_models(args):
    return Latte(depth=args.depth)
"""


def test_latte_attribute_no_class_defines_is_a_warning(tmp_path: Path) -> None:
    found = lint_project(tmp_path, {"train.py": LATTE_TRAIN, "models/__init__.py": LATTE_MODELS})
    assert _sev(found, "DDP-WRAPPER-ATTR") == [("train.py", 21, "warning")]
    assert not [f for f in found if f.severity == "error"]


def test_attribute_the_model_defines_keeps_the_error(tmp_path: Path) -> None:
    # the twin: the model class has `load_state`, the wrapper has not
    models = LATTE_MODELS.replace(
        "    def forward", "    def load_state(self, path):\n        pass\n\n    def forward"
    )
    found = lint_project(tmp_path, {"train.py": LATTE_TRAIN, "models/__init__.py": models})
    assert _sev(found, "DDP-WRAPPER-ATTR") == [("train.py", 21, "error")]


# omegalabsinc/omegalabs-anytoany-bittensor @ bf2bad3b5c676855f1a2a4211647b301f0a246d0,
# tune_recipes/lora_finetune_distributed.py (the pitfalls; fix 7bccc07): `self._model` is
# what `_setup_model` returns, the DDP wrapper of a model built by `config.instantiate` on
# the CPU and only cast (`.to(torch.bfloat16)`); the step reads `self._model.output`.
OMEGA_RECIPE = """\
import torch
from torch.distributed import init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torchtune import config, utils


class LoRAFinetuneRecipeDistributed:
    def setup(self, cfg):
        self._model = self._setup_model(cfg_model=cfg.model)

    def _setup_model(self, cfg_model):
        _, rank = utils.get_world_size_and_rank()
        with utils.set_default_dtype(self._dtype):
            model = config.instantiate(cfg_model)
        if self._dtype == torch.bfloat16:
            model = model.to(torch.bfloat16)
        model = DDP(model, device_ids=[rank], find_unused_parameters=True)
        return model

    def save_checkpoint(self, epoch):
        return self._model.module._transformer.state_dict()

    def train(self):
        for idx, batch in enumerate(self._dataloader):
            (input_ids, labels), mm_context = batch
            self._model.tok_embeddings.set_context(mm_context)
            self._model.output.set_context(mm_context)
            logits = self._model(input_ids)
            loss = self._loss_fn(logits, labels)
            if self._model.output._clip_projections:
                loss = loss + 1
            loss.backward()
            self._optimizer.step()


class MMEmbedding(torch.nn.Module):
    def set_context(self, context):
        self.context = context


class TransformerDecoder(torch.nn.Module):
    def __init__(self, tok_embeddings, output):
        super().__init__()
        self.tok_embeddings = tok_embeddings
        self.output = output


def recipe_main(cfg):
    init_process_group(backend="nccl")
    recipe = LoRAFinetuneRecipeDistributed()
    recipe.setup(cfg=cfg)
    recipe.train()


recipe_main(None)
"""


def test_omegalabs_wrapper_from_a_helper_and_a_cast_only(tmp_path: Path) -> None:
    found = lint_project(tmp_path, {"train.py": OMEGA_RECIPE})
    assert _sev(found, "DDP-WRAPPER-ATTR") == [
        ("train.py", 26, "error"),
        ("train.py", 27, "error"),
        ("train.py", 30, "error"),
    ]
    assert _sev(found, "DDP-WRAP-BEFORE-TO") == [("train.py", 17, "error")]


def test_omegalabs_fixed_is_silent(tmp_path: Path) -> None:
    # the fix (7bccc07): the model goes to its GPU before DDP, the step unwraps
    text = (
        OMEGA_RECIPE.replace("config.instantiate(cfg_model)", "config.instantiate(cfg_model).to(rank)")
        .replace("self._model.tok_embeddings", "self._model.module.tok_embeddings")
        .replace("self._model.output.", "self._model.module.output.")
    )
    found = lint_project(tmp_path, {"train.py": text})
    assert _sev(found, "DDP-WRAPPER-ATTR") == [] and _sev(found, "DDP-WRAP-BEFORE-TO") == []


# jpata/particleflow @ 8d2ee0b1e4def8bca59f0a6533b4451413a1111e, mlpf/model/PFDataset.py
# (the pitfall; fixed in PR #467): the sampler deals whole shards to the ranks.
PF_SAMPLER = """\
import random
import torch


class DistributedShardConsecutiveSampler(torch.utils.data.distributed.DistributedSampler):
    def __init__(self, dataset, world_size=None, rank=None, shuffle=True, seed=0, drop_last=False):
        super().__init__(dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last)

    def __iter__(self):
        rng = random.Random(self.seed + self.epoch)
        shard_ranges = []
        start_idx = 0
        for end_idx in self.dataset.cumulative_sizes:
            shard_ranges.append((start_idx, end_idx))
            start_idx = end_idx
        if self.shuffle:
            rng.shuffle(shard_ranges)
        my_shard_ranges = shard_ranges[self.rank :: self.num_replicas]
        indices = []
        for s_start, s_end in my_shard_ranges:
            shard_indices = list(range(s_start, s_end))
            indices.extend(shard_indices)
        return iter(indices)
"""

PF_TRAIN = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from sampler import DistributedShardConsecutiveSampler


def main(rank, world_size, model, ds):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    model = DDP(model.to(rank), device_ids=[rank])
    sampler = DistributedShardConsecutiveSampler(ds, world_size=world_size, rank=rank)
    loader = torch.utils.data.DataLoader(ds, batch_size=8, sampler=sampler)
    for batch in loader:
        model(batch).sum().backward()
"""

# the fix (PR #467): one global index list, padded to total_size, sliced per rank
PF_FIXED = PF_SAMPLER.replace(
    """        my_shard_ranges = shard_ranges[self.rank :: self.num_replicas]
        indices = []
        for s_start, s_end in my_shard_ranges:
            shard_indices = list(range(s_start, s_end))
            indices.extend(shard_indices)
        return iter(indices)
""",
    """        indices = [i for s_start, s_end in shard_ranges for i in range(s_start, s_end)]
        indices += indices[: self.total_size - len(indices)]
        return iter(indices[self.rank : self.total_size : self.num_replicas])
""",
)


def test_particleflow_shards_dealt_to_ranks_are_uneven(tmp_path: Path) -> None:
    found = lint_project(tmp_path, {"train.py": PF_TRAIN, "sampler.py": PF_SAMPLER})
    assert _sev(found, "DDP-UNEVEN-BATCH") == [("sampler.py", 18, "error")]


def test_particleflow_padded_sampler_is_silent(tmp_path: Path) -> None:
    assert PF_FIXED != PF_SAMPLER
    found = lint_project(tmp_path, {"train.py": PF_TRAIN, "sampler.py": PF_FIXED})
    assert _sev(found, "DDP-UNEVEN-BATCH") == []
