"""Round 36: the false errors of blind batch AC on correct projects, each on the real
lines (cited with repository and commit) beside a twin that must still fire."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

from ddptui.lint.model import LintFinding

# sail-sg/poolformer @ a075575b8b3dc3c76ecc5c49985d156167372bfa, train.py 297 (the
# `--local_rank` flag torch.distributed.launch passes), 336-346 (`args.device = 'cuda:0'`
# replaced by `'cuda:%d' % args.local_rank` when WORLD_SIZE > 1), 476 (the DDP wrap).
POOL_TRAIN = """\
import argparse
import os

import torch
from torch.nn.parallel import DistributedDataParallel as NativeDDP

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", default=0, type=int)


def main():
    args = parser.parse_args()
    args.distributed = False
    if 'WORLD_SIZE' in os.environ:
        args.distributed = int(os.environ['WORLD_SIZE']) > 1
    args.device = 'cuda:0'
    args.world_size = 1
    args.rank = 0  # global rank
    if args.distributed:
        args.device = 'cuda:%d' % args.local_rank
        torch.cuda.set_device(args.local_rank)
        torch.distributed.init_process_group(backend='nccl', init_method='env://')
        args.world_size = torch.distributed.get_world_size()
        args.rank = torch.distributed.get_rank()
    model = torch.nn.Linear(8, 8)
    model.to(args.device)
    if args.distributed:
        model = NativeDDP(model, device_ids=[args.local_rank])


if __name__ == '__main__':
    main()
"""


def _errors(found: list[LintFinding], fid: str) -> list[tuple[str, int, str]]:
    return [x for x in severities(found, fid) if x[2] == "error"]


def test_single_process_default_replaced_by_the_local_rank(tmp_path: Path) -> None:
    ok = lint_project(tmp_path / "ok", {"train.py": POOL_TRAIN})
    assert _errors(ok, "DDP-HARDCODED-DEVICE") == [], ok
    # twin: the distributed branch keeps the constant, so every rank uses GPU 0
    kept = POOL_TRAIN.replace("        args.device = 'cuda:%d' % args.local_rank\n", "")
    assert kept != POOL_TRAIN
    bad = lint_project(tmp_path / "kept", {"train.py": kept})
    assert ("train.py", 16, "error") in severities(bad, "DDP-HARDCODED-DEVICE"), bad
    # twin: the default is read before the rank's value replaces it
    early = POOL_TRAIN.replace(
        "    args.world_size = 1\n",
        "    torch.cuda.set_device(args.device)\n    args.world_size = 1\n",
    )
    assert early != POOL_TRAIN
    read = lint_project(tmp_path / "read", {"train.py": early})
    assert ("train.py", 16, "error") in severities(read, "DDP-HARDCODED-DEVICE"), read


# wenet-e2e/wenet @ 015469960db73eb19c49a48c020d5ac9db69bae5, wenet/utils/train_utils.py
# (wrap_cuda_model: DDP for torch_ddp, FSDP for torch_fsdp; save_model 608-631: the FSDP
# arm saves on every rank, the rank-0 arm after it is the torch_ddp one) and
# wenet/utils/checkpoint.py 60-71 (save_checkpoint reads model.state_dict()).
WENET_TRAIN = """\
import os

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def wrap_cuda_model(args, model):
    if args.train_engine == "torch_ddp":
        model.cuda()
        model = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=False)
    elif args.train_engine == "torch_fsdp":
        model = FSDP(model, device_id=int(os.environ.get('LOCAL_RANK', 0)))
    return model


def save_checkpoint(model, path):
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        state_dict = model.module.state_dict()
    else:
        state_dict = model.state_dict()
    torch.save(state_dict, path)


def fsdp_save_model(model, path):
    state_dict = model.state_dict()
    if int(os.environ.get('RANK', 0)) == 0:
        torch.save(state_dict, path)


def save_model(model, info_dict):
    rank = int(os.environ.get('RANK', 0))
    save_model_path = os.path.join(info_dict["model_dir"], '{}.pt'.format(info_dict["tag"]))
    if info_dict["train_engine"] == "deepspeed":
        model.save_checkpoint(save_dir=info_dict["model_dir"], tag=info_dict["tag"])
    elif info_dict['train_engine'] == "torch_fsdp":
        fsdp_save_model(model, save_model_path)
    elif rank == 0:
        save_checkpoint(model, save_model_path)


def main(args, info_dict):
    torch.distributed.init_process_group('nccl')
    torch.cuda.set_device(int(os.environ['LOCAL_RANK']))
    model = wrap_cuda_model(args, torch.nn.Linear(8, 8))
    for epoch in range(10):
        loss = model(torch.randn(4, 8)).sum()
        loss.backward()
        save_model(model, info_dict)
"""


def test_rank0_save_in_the_arm_after_the_fsdp_arm(tmp_path: Path) -> None:
    ok = lint_project(tmp_path / "ok", {"train.py": WENET_TRAIN})
    assert _errors(ok, "DDP-RANK-DIVERGENCE") == [], ok
    # twin: no FSDP arm before it, so an FSDP model gathers its state_dict on rank 0 only
    bad_text = WENET_TRAIN.replace(
        "    elif info_dict['train_engine'] == \"torch_fsdp\":\n"
        "        fsdp_save_model(model, save_model_path)\n",
        "",
    )
    assert bad_text != WENET_TRAIN
    bad = lint_project(tmp_path / "bad", {"train.py": bad_text})
    assert ("train.py", 36, "error") in severities(bad, "DDP-RANK-DIVERGENCE"), bad


# sshaoshuai/MTR @ a5ba7bdafa09a1a355cc34f8a895499a2b14ddb3, tools/train.py 212-213 (the
# DDP wrap), 271-275 (`repeat_eval_ckpt(model.module if dist_train else model, ...)`);
# tools/test.py 96, 125 (`model.load_params_from_file(...)` on what the caller gives).
MTR_TRAIN = """\
import torch
import torch.nn as nn

from mtr.models import MotionTransformer


def main(cfg, dist_train, ckpt_dir):
    model = MotionTransformer(cfg).cuda()
    if dist_train:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[cfg.LOCAL_RANK])
    from evaluate import repeat_eval_ckpt
    repeat_eval_ckpt(
        model.module if dist_train else model,
        ckpt_dir,
        dist_test=dist_train
    )
"""

MTR_EVAL = """\
def repeat_eval_ckpt(model, ckpt_dir, dist_test=False):
    it, epoch = model.load_params_from_file(filename=ckpt_dir, to_cpu=dist_test)
    model.cuda()
"""

MTR_MODEL = """\
import torch


class MotionTransformer(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.net = torch.nn.Linear(8, 8)

    def load_params_from_file(self, filename, to_cpu=False):
        self.load_state_dict(torch.load(filename, map_location='cpu'))
        return 0, 0
"""


def test_caller_passes_the_unwrapped_model(tmp_path: Path) -> None:
    files = {"train.py": MTR_TRAIN, "evaluate.py": MTR_EVAL, "mtr/models.py": MTR_MODEL,
             "mtr/__init__.py": ""}  # fmt: skip
    ok = lint_project(tmp_path / "ok", files)
    assert severities(ok, "DDP-WRAPPER-ATTR") == [], ok
    # twin: the wrapper itself is passed
    bad_text = MTR_TRAIN.replace("model.module if dist_train else model,", "model,")
    assert bad_text != MTR_TRAIN
    bad = lint_project(tmp_path / "bad", {**files, "train.py": bad_text})
    assert ("evaluate.py", 2, "error") in severities(bad, "DDP-WRAPPER-ATTR"), bad


# hirofumi0810/neural_sp @ 17ffccc6d25b874f3e7932dd8fa12a469eeae8ca,
# neural_sp/bin/asr/train.py 480-484 (`if args.local_rank == 0 and ...:
# model.module.plot_attention()`), neural_sp/models/seq2seq/speech2text.py 492-495 (which
# calls `self.enc._plot_attention(...)`), neural_sp/models/seq2seq/encoders/
# encoder_base.py 75-112 (clears the folder and saves one figure per layer).
NSP_TRAIN = """\
import torch
import torch.distributed as dist

from models.speech2text import Speech2Text


def main(args, loader):
    dist.init_process_group('nccl')
    torch.cuda.set_device(args.local_rank)
    model = Speech2Text(args).cuda()
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.local_rank])
    for step, batch in enumerate(loader):
        loss = model(batch)
        loss.backward()
        if args.local_rank == 0 and step > 0 and step % 100 == 0:
            model.module.plot_attention()
"""

NSP_MODEL = """\
import torch

from models.encoder import TransformerEncoder


class Speech2Text(torch.nn.Module):
    def __init__(self, args):
        super().__init__()
        self.save_path = args.save_path
        self.enc = TransformerEncoder()

    def forward(self, xs):
        return self.enc(xs).sum()

    def plot_attention(self):
        self.enc._plot_attention(self.save_path + '/enc_att_weights')
"""

NSP_ENCODER = """\
import os
import shutil

import torch
from matplotlib import pyplot as plt


class TransformerEncoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 8)
        self.aws = {}

    def forward(self, xs):
        return self.layer(xs)

    def _plot_attention(self, save_path=None):
        if save_path is not None and os.path.isdir(save_path):
            shutil.rmtree(save_path)
            os.mkdir(save_path)
        for k, aw in self.aws.items():
            fig, ax = plt.subplots()
            ax.imshow(aw[-1, 0], aspect="auto")
            if save_path is not None:
                fig.savefig(os.path.join(save_path, '%s.png' % k))
            plt.close()
"""


def test_model_plot_reached_only_from_rank_zero(tmp_path: Path) -> None:
    files = {
        "train.py": NSP_TRAIN,
        "models/__init__.py": "",
        "models/speech2text.py": NSP_MODEL,
        "models/encoder.py": NSP_ENCODER,
    }
    ok = lint_project(tmp_path / "ok", files)
    assert [x for x in severities(ok, "DDP-ALL-RANKS-IO") if x[0] == "encoder.py"] == [], ok
    # twin: the plot runs on every rank
    bad_text = NSP_TRAIN.replace(
        "        if args.local_rank == 0 and step > 0 and step % 100 == 0:\n"
        "            model.module.plot_attention()\n",
        "        if step % 100 == 0:\n            model.module.plot_attention()\n",
    )
    assert bad_text != NSP_TRAIN
    bad = lint_project(tmp_path / "bad", {**files, "train.py": bad_text})
    assert [x[0] for x in severities(bad, "DDP-ALL-RANKS-IO")].count("encoder.py") >= 1, bad
