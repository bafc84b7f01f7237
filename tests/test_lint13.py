"""Round 13 (blind batch J). The code is the real projects' (only the lines needed, each
cited with its repository and commit): three correct projects on which ddptui raised an
error, each beside a twin with the pitfall, which keeps it."""

from __future__ import annotations

from pathlib import Path

from ddptui.lint import lint_paths
from ddptui.lint.model import LintFinding


def _lint(tmp_path: Path, files: dict[str, str], entry: str = "train.py") -> list[LintFinding]:
    (tmp_path / ".git").mkdir(exist_ok=True)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    return list(lint_paths([tmp_path / entry], root=tmp_path).findings)


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
    assert _sev(_lint(tmp_path, {"train.py": VITS_TRAIN}), "DDP-HARDCODED-DEVICE") == []


def test_gpu0_on_every_rank_keeps_the_error(tmp_path: Path) -> None:
    # the twin: every rank evaluates, so every rank moves its batch to GPU 0
    text = VITS_TRAIN.replace(
        "    if rank==0:\n      if batch_idx", "    if True:\n      if batch_idx"
    )
    found = _sev(_lint(tmp_path, {"train.py": text}), "DDP-HARDCODED-DEVICE")
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
    found = _lint(tmp_path, {"train.py": XMEM_TRAIN, "model/trainer.py": XMEM_TRAINER})
    hits = _sev(found, "DDP-HARDCODED-DEVICE")
    assert ("train.py", 11, "warning") in hits and ("trainer.py", 9, "warning") in hits
    assert not [f for f in found if f.severity == "error"]
    assert any("one node only" in f.summary for f in found if f.id == "DDP-HARDCODED-DEVICE")


def test_global_rank_in_a_multi_node_project_keeps_the_error(tmp_path: Path) -> None:
    # the twin reads the launcher's LOCAL_RANK and still hands the global rank over
    text = XMEM_TRAIN.replace(
        "world_size = torch", "node_gpu = int(os.environ['LOCAL_RANK'])\nworld_size = torch"
    ).replace("import torch\n", "import os\nimport torch\n", 1)
    hits = _sev(_lint(tmp_path, {"train.py": text}), "DDP-HARDCODED-DEVICE")
    assert ("train.py", 13, "error") in hits


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
    found = _lint(tmp_path, {"train.py": LATTE_TRAIN, "models/__init__.py": LATTE_MODELS})
    assert _sev(found, "DDP-WRAPPER-ATTR") == [("train.py", 21, "warning")]
    assert not [f for f in found if f.severity == "error"]


def test_attribute_the_model_defines_keeps_the_error(tmp_path: Path) -> None:
    # the twin: the model class has `load_state`, the wrapper has not
    models = LATTE_MODELS.replace(
        "    def forward", "    def load_state(self, path):\n        pass\n\n    def forward"
    )
    found = _lint(tmp_path, {"train.py": LATTE_TRAIN, "models/__init__.py": models})
    assert _sev(found, "DDP-WRAPPER-ATTR") == [("train.py", 21, "error")]
