"""Round 40: pitfalls with ids that blind batch AD1 missed, each on the real lines (cited
with repository and commit) beside a twin that must stay silent, and where the fix goes
for a write under an enabling `if`."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

# ethnhe/FFB6D @ 3693964383e705461523d32b0ea16e4cbe8f609b, ffb6d/train_ycb.py 130-155
# (`checkpoint_state` unwraps nn.DataParallel only), 295-330 (`Trainer.__init__` keeps the
# model with a tuple assignment), 558-595 (`nn.DataParallel(model)`, then DDP of it). The
# fix b2495c1 "Fix nn.DataParallel bug" removes the DataParallel and adds
# DistributedDataParallel to the isinstance test.
FFB6D = """\
import os
import torch
import torch.nn as nn
import torch.distributed as dist


def checkpoint_state(model=None, optimizer=None, epoch=None):
    optim_state = optimizer.state_dict() if optimizer is not None else None
    if model is not None:
        if isinstance(model, torch.nn.DataParallel):
            model_state = model.module.state_dict()
        else:
            model_state = model.state_dict()
    else:
        model_state = None
    return {"epoch": epoch, "model_state": model_state, "optimizer_state": optim_state}


def save_checkpoint(state, filename="checkpoint"):
    torch.save(state, "{}.pth.tar".format(filename))


def load_checkpoint(model=None, optimizer=None, filename="checkpoint"):
    checkpoint = torch.load(filename, map_location="cpu")
    model.load_state_dict(checkpoint["model_state"])


class Trainer(object):
    def __init__(self, model, optimizer, checkpoint_name="ckpt"):
        self.model, self.optimizer, self.checkpoint_name = (
            model,
            optimizer,
            checkpoint_name,
        )

    def train(self, loader, local_rank):
        for epoch in range(10):
            for batch in loader:
                self.optimizer.zero_grad()
                self.model(batch).sum().backward()
                self.optimizer.step()
            if local_rank == 0:
                save_checkpoint(checkpoint_state(self.model, self.optimizer, epoch), self.checkpoint_name)


def train(local_rank, resume):
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl", init_method="env://")
    model = nn.Linear(8, 8)
    device = torch.device("cuda:{}".format(local_rank))
    model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model = nn.DataParallel(model)
    if resume:
        load_checkpoint(model, optimizer, filename=resume)
    model = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[local_rank], output_device=local_rank
    )
    sampler = torch.utils.data.distributed.DistributedSampler(list(range(64)))
    loader = torch.utils.data.DataLoader(list(range(64)), sampler=sampler)
    Trainer(model, optimizer).train(loader, local_rank)


if __name__ == "__main__":
    train(int(os.environ["LOCAL_RANK"]), None)
"""


def test_dataparallel_then_ddp(tmp_path: Path) -> None:
    bad = lint_project(tmp_path / "bad", {"train.py": FFB6D})
    assert severities(bad, "DDP-DATAPARALLEL") == [("train.py", 53, "error")], bad
    # twin: the fix removes the DataParallel
    fixed = FFB6D.replace("    model = nn.DataParallel(model)\n", "")
    assert fixed != FFB6D
    assert (
        severities(lint_project(tmp_path / "fixed", {"train.py": fixed}), "DDP-DATAPARALLEL") == []
    )
    # twin: DataParallel as the single-process arm, DDP as the other
    fallback = FFB6D.replace(
        "    model = nn.DataParallel(model)\n",
        "    if not resume:\n        model = nn.DataParallel(model)\n",
    )
    found = lint_project(tmp_path / "fallback", {"train.py": fallback})
    assert [x for x in severities(found, "DDP-DATAPARALLEL") if x[2] == "error"] == []


def test_unwrap_of_dataparallel_only(tmp_path: Path) -> None:
    bad = lint_project(tmp_path / "bad", {"train.py": FFB6D})
    hits = [f for f in bad if f.id == "DDP-SAVE-WRAPPER"]
    assert [(f.line, [p.line for p in f.also]) for f in hits] == [(13, [10, 43])], bad
    # twin: the fix names DistributedDataParallel in the test too
    fixed = FFB6D.replace(
        "isinstance(model, torch.nn.DataParallel)",
        "isinstance(model, (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel))",
    )
    assert fixed != FFB6D
    assert (
        severities(lint_project(tmp_path / "fixed", {"train.py": fixed}), "DDP-SAVE-WRAPPER") == []
    )


# SegmentationBLWX/sssegmentation @ 7a21b63a916dc2978113233159cc5c13e65118fb,
# ssseg/train.py 57-103 (`Trainer.__init__` starts the group, `start` runs dist.barrier()
# before torch.cuda.set_device). The fix 17b9e4a "fix unexpected GPU occupied errors"
# moves the barrier after set_device.
SSSEG = """\
import torch
import torch.nn as nn
import torch.distributed as dist


class Trainer():
    def __init__(self, cmd_args):
        self.cmd_args = cmd_args
        dist.init_process_group(backend="nccl")

    def start(self):
        cmd_args = self.cmd_args
        segmentor = nn.Conv2d(3, 3, 1)
        dist.barrier()
        torch.cuda.set_device(cmd_args.local_rank)
        segmentor.cuda(cmd_args.local_rank)
        segmentor = nn.parallel.DistributedDataParallel(segmentor, device_ids=[cmd_args.local_rank])


def main(cmd_args):
    client = Trainer(cmd_args=cmd_args)
    client.start()
"""


def test_collective_before_the_only_set_device(tmp_path: Path) -> None:
    bad = lint_project(tmp_path / "bad", {"train.py": SSSEG})
    assert severities(bad, "DDP-INIT-BEFORE-SET-DEVICE") == [("train.py", 14, "warning")], bad
    fixed = SSSEG.replace(
        "        dist.barrier()\n        torch.cuda.set_device(cmd_args.local_rank)\n",
        "        torch.cuda.set_device(cmd_args.local_rank)\n        dist.barrier()\n",
    )
    assert fixed != SSSEG
    found = lint_project(tmp_path / "fixed", {"train.py": fixed})
    assert severities(found, "DDP-INIT-BEFORE-SET-DEVICE") == []


# fredzzhang/upt @ 0dd6d79e933d720667dd44390a1f50178dd5686c, main.py 24-41 and 120-126 (an
# mp.spawn worker that never calls set_device; fix 967cfe3 "Fix incorrect device" adds
# torch.cuda.set_device(rank)), utils.py 155 (`pocket.ops.relocate_to_cuda(batch[0])`)
# and detector.py 260-264 (`torch.load(args.pretrained)['model_state_dict']`; fix b56ca1f
# "Load pre-trained weights to cpu" adds map_location='cpu').
UPT = """\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import pocket


def main(rank, args):
    dist.init_process_group(
        backend="nccl",
        init_method="env://",
        world_size=args.world_size,
        rank=rank
    )
    torch.manual_seed(args.seed)
    detector = torch.nn.Linear(8, 8)
    detector.load_state_dict(torch.load(args.pretrained)['model_state_dict'])
    for batch in range(10):
        inputs = pocket.ops.relocate_to_cuda(batch)
        detector(inputs)


if __name__ == "__main__":
    args = None
    mp.spawn(main, nprocs=2, args=(args,))
"""


def test_spawned_worker_never_picks_its_gpu(tmp_path: Path) -> None:
    bad = lint_project(tmp_path / "bad", {"train.py": UPT})
    assert severities(bad, "DDP-HARDCODED-DEVICE") == [("train.py", 8, "warning")], bad
    assert severities(bad, "DDP-LOAD-MAP-LOCATION") == [("train.py", 16, "warning")], bad
    fixed = UPT.replace(
        "    torch.manual_seed(args.seed)\n",
        "    torch.manual_seed(args.seed)\n    torch.cuda.set_device(rank)\n",
    ).replace("torch.load(args.pretrained)", "torch.load(args.pretrained, map_location='cpu')")
    found = lint_project(tmp_path / "fixed", {"train.py": fixed})
    assert severities(found, "DDP-HARDCODED-DEVICE") == []
    assert severities(found, "DDP-LOAD-MAP-LOCATION") == []
    # twin: a gloo group needs no GPU per process
    gloo = UPT.replace('backend="nccl"', 'backend="gloo"')
    assert (
        severities(lint_project(tmp_path / "gloo", {"train.py": gloo}), "DDP-HARDCODED-DEVICE")
        == []
    )


# SegmentationBLWX/sssegmentation @ b9628bd0fbef1ee37e5e0c47caa8cbc03e0b73b0,
# ssseg/train.py 229-234 (evaluation results pickled to a file named by the local rank);
# the fix 252d485 "fix multi-machine bugs" names it by the global rank.
SSSEG_EVAL = """\
import os
import pickle
import torch
import torch.distributed as dist


def evaluate(cfg, cmd_args, all_preds, all_gts, ngpus_per_node):
    dist.init_process_group(backend="nccl")
    filename = cfg['resultsavepath'].split('.')[0] + f'_{cmd_args.local_rank}.' + cfg['resultsavepath'].split('.')[-1]
    with open(os.path.join(cfg['work_dir'], filename), 'wb') as fp:
        pickle.dump([all_preds, all_gts], fp)
    rank = torch.tensor([cmd_args.local_rank], device='cuda')
    rank_list = [rank.clone() for _ in range(ngpus_per_node)]
    dist.all_gather(rank_list, rank)
"""


def test_file_named_by_the_local_rank(tmp_path: Path) -> None:
    bad = lint_project(tmp_path / "bad", {"train.py": SSSEG_EVAL})
    assert ("train.py", 9, "warning") in severities(bad, "DDP-ALL-RANKS-IO"), bad
    fixed = SSSEG_EVAL.replace("cmd_args.local_rank", "dist.get_rank()")
    found = lint_project(tmp_path / "fixed", {"train.py": fixed})
    assert [x for x in severities(found, "DDP-ALL-RANKS-IO") if x[1] == 9] == []
    # twin: the node's rank is in the name as well
    node = SSSEG_EVAL.replace(
        "f'_{cmd_args.local_rank}.'", "f'_{cmd_args.node_rank}_{cmd_args.local_rank}.'"
    )
    found = lint_project(tmp_path / "node", {"train.py": node})
    assert [x for x in severities(found, "DDP-ALL-RANKS-IO") if x[1] == 9] == []


# Janspiry/Palette-Image-to-Image-Diffusion-Models @ f9264f61cab7357ac8a04f1e63e82c5d5461b174,
# core/logger.py 55-70 (`VisualWriter` opens a SummaryWriter under `if enabled:`); the fix
# 4906684 "Fix tensorboard bug in DDP" makes that `if enabled and rank == 0:`.
PALETTE = """\
import importlib
import torch.distributed as dist


class VisualWriter():
    def __init__(self, opt):
        log_dir = opt['path']['tb_logger']
        enabled = opt['train']['tensorboard']
        self.writer = None
        if enabled:
            log_dir = str(log_dir)
            for module in ["tensorboardX", "torch.utils.tensorboard"]:
                try:
                    self.writer = importlib.import_module(module).SummaryWriter(log_dir)
                    break
                except ImportError:
                    pass


def main_worker(gpu, opt):
    dist.init_process_group(backend="nccl", rank=gpu)
    VisualWriter(opt)
"""


def test_the_enabling_if_is_a_place(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "bad", {"train.py": PALETTE})
    hits = [f for f in found if f.id == "DDP-ALL-RANKS-IO" and f.line == 14]
    assert hits, found
    assert 10 in [p.line for p in hits[0].also], hits[0].also


# namisan/mt-dnn @ fd65643cf903b2a524b0b32273ae54bcaacd3899, train.py 357-368 (the init
# checkpoint loaded without map_location in each encoder's arm); the fix e152c5a "fix dup
# loading for dist" adds map_location=device to both.
MTDNN = """\
import os
import torch
import torch.distributed as dist


def main(args, encoder_type, device):
    dist.init_process_group("nccl")
    init_model = args.init_checkpoint
    state_dict = None
    if os.path.exists(init_model):
        if encoder_type == "bert":
            state_dict = torch.load(init_model)
            config = state_dict['config']
        elif encoder_type == "roberta":
            model_path = '{}/model.pt'.format(init_model)
            state_dict = torch.load(model_path)
            arch = state_dict['args'].arch
"""


def test_other_loads_of_the_function_are_places(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "bad", {"train.py": MTDNN})
    hits = [f for f in found if f.id == "DDP-LOAD-MAP-LOCATION"]
    assert [(f.line, [p.line for p in f.also]) for f in hits] == [(12, [16])], found
    fixed = MTDNN.replace("torch.load(init_model)", "torch.load(init_model, map_location=device)")
    fixed = fixed.replace("torch.load(model_path)", "torch.load(model_path, map_location=device)")
    assert (
        severities(lint_project(tmp_path / "fixed", {"train.py": fixed}), "DDP-LOAD-MAP-LOCATION")
        == []
    )


# hustvl/WeakTr @ 5bdceb83d685742a993bf5cb27fa263c2d97d9f4, OnlineRetraining/segm/utils/distributed.py 54-65
# (`sync_model` saves on rank 0 and loads on the others) and train.py 299-302 (called
# before `model = DDP(model, ...)`): the plain model's keys, nothing to unwrap. A twin
# that must stay silent for DDP-SAVE-WRAPPER beside the FFB6D reading.
WEAKTR = """\
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def sync_model(sync_dir, model):
    sync_path = Path(sync_dir).resolve() / "sync_model.pkl"
    if dist.get_rank() == 0 and dist.get_world_size() > 1:
        torch.save(model.state_dict(), sync_path)
    dist.barrier()
    if dist.get_rank() > 0:
        model.load_state_dict(torch.load(sync_path, map_location="cpu"))
    dist.barrier()
    return model


def main(log_dir):
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = torch.nn.Linear(8, 8).cuda()
    sync_model(log_dir, model)
    model = DDP(model, device_ids=[local_rank], output_device=local_rank)
"""


def test_helper_called_before_the_wrap_saves_the_plain_model(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "ok", {"train.py": WEAKTR})
    assert severities(found, "DDP-SAVE-WRAPPER") == [], found
