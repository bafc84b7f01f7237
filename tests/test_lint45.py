"""Round 45: readings from blind batch AF1, each on the real lines (cited with repository
and commit) beside a twin that must stay silent."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

# ltkong218/IFRNet @ 8fe06d6c26acc6e59b43318b9fa03f6eed563bd9: train_vimeo90k.py 105-110
# (saves ddp_model.state_dict()) and 180-187 (resumes into the wrapper); demo_2x.py 1-10
# (the same Model, unwrapped, loads a checkpoint). Fixed in 77a7d4c: saves
# ddp_model.module.state_dict(), loads the resume into `model` before DDP.
IFRNET_TRAIN = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def train(args, ddp_model, log_path):
    for epoch in range(args.resume_epoch, args.epochs):
        if (epoch+1) % args.eval_interval == 0 and args.local_rank == 0:
            torch.save(ddp_model.state_dict(), '{}/{}_{}.pth'.format(log_path, args.model_name, 'best'))
        dist.barrier()


if __name__ == '__main__':
    dist.init_process_group(backend='nccl', world_size=args.world_size)
    if args.model_name == 'IFRNet':
        from models.IFRNet import Model
    elif args.model_name == 'IFRNet_L':
        from models.IFRNet_L import Model
    model = Model().to(args.device)
    ddp_model = DDP(model, device_ids=[args.local_rank], output_device=args.local_rank)
    if args.resume_epoch != 0:
        ddp_model.load_state_dict(torch.load(args.resume_path, map_location='cpu'))
    train(args, ddp_model, args.log_path)
"""

IFRNET_DEMO = """\
import torch
from models.IFRNet import Model


model = Model().cuda().eval()
model.load_state_dict(torch.load('./checkpoints/IFRNet/IFRNet_Vimeo90K.pth'))
"""

MODEL = """\
import torch.nn as nn


class Model(nn.Module):
    pass
"""


def _ifrnet(tmp: Path, demo: str | None) -> list[tuple[str, int, str, str]]:
    files = {"train.py": IFRNET_TRAIN, "models/IFRNet.py": MODEL, "models/IFRNet_L.py": MODEL}
    if demo is not None:
        files["demo_2x.py"] = demo
    found = lint_project(tmp, files)
    return [
        (*hit, fid)
        for fid in ("DDP-SAVE-WRAPPER", "DDP-LOAD-INTO-WRAPPER")
        for hit in severities(found, fid)
    ]


def test_wrapper_saves_and_resume_when_a_demo_reads_plain_weights(tmp_path: Path) -> None:
    assert _ifrnet(tmp_path, IFRNET_DEMO) == [
        ("train.py", 9, "warning", "DDP-SAVE-WRAPPER"),
        ("train.py", 22, "warning", "DDP-LOAD-INTO-WRAPPER"),
    ]


def test_consistent_pair_without_a_plain_reader_is_silent(tmp_path: Path) -> None:
    # no stand-alone script: the wrapper's keys are saved and resumed alike
    assert _ifrnet(tmp_path / "none", None) == []
    # the demo strips the prefix itself: it reads the wrapper's keys
    strips = IFRNET_DEMO.replace(
        "torch.load('./checkpoints/IFRNet/IFRNet_Vimeo90K.pth')",
        "{k.replace('module.', ''): v for k, v in torch.load('./ckpt/best.pth').items()}",
    )
    assert _ifrnet(tmp_path / "strips", strips) == []
    # the demo builds another class: nothing ties it to what the training wraps
    other = IFRNET_DEMO.replace("from models.IFRNet import Model", "from baseline import Model")
    assert _ifrnet(tmp_path / "other", other) == []
