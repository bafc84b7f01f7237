"""Round 22: an error means the reading is certain. Each demotion to a warning is shown on
real code of a blind batch (only the lines needed, cited with repository and commit) beside
a twin where the plain pitfall stays an error."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

# VMarsocci/pangaea-bench @ 3fdd72b232f6cda88e3f1bb58f31e5dd6dd9f7a0,
# pangaea/engine/trainer.py:221-232 (save_model): the ranks other than 0 wait in a barrier
# and return; rank 0 saves, then joins that same barrier: each rank reaches one.
PANGAEA = """\
import torch
import torch.distributed
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, model, rank):
        self.rank = rank
        self.model = DDP(model.cuda(rank), device_ids=[rank])

    def save_model(self, epoch):
        if self.rank != 0:
            {INSIDE}
            return
        checkpoint = self.model.module.state_dict()
        torch.save(checkpoint, f"checkpoint_{epoch}.pth")
        torch.distributed.barrier()
        return


def main():
    torch.distributed.init_process_group("nccl")
    rank = torch.distributed.get_rank()
    Trainer(build(), rank).save_model(0)
"""


def test_rank0_last_barrier_is_a_warning_a_lone_one_stays_an_error(tmp_path: Path) -> None:
    paired = PANGAEA.replace("{INSIDE}", "torch.distributed.barrier()")
    found = lint_project(tmp_path / "ok", {"train.py": paired})
    sev = severities(found, "DDP-RANK-DIVERGENCE")
    assert sev and all(s == "warning" for _, _, s in sev), sev
    assert any("each rank reaches one" in f.summary for f in found)
    # twin: the other ranks return without the barrier: rank 0 waits alone
    lone = PANGAEA.replace("{INSIDE}", "pass")
    sev = severities(lint_project(tmp_path / "bad", {"train.py": lone}), "DDP-RANK-DIVERGENCE")
    assert ("train.py", 17, "error") in sev, sev


# wenet-e2e/wenet @ f1b9d3fee7fdb6473aec73adfde26f0c8ded8e5a, wenet/utils/executor.py:32-40:
# `continue` when this rank's batch is empty: the code does not show whether that happens
# on one rank only (it is not a labelled pitfall there).
# Twin: Tencent/YOLO-Master @ f8cdaa4449e0acc20056f9a53c8a82d0f7a62676,
# ultralytics/engine/trainer.py:1045-1058: the non-finite branch all_reduces a skip flag
# alone and continues past the backward (a labelled pitfall): stays an error.
WENET = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def train(model, data_loader, optimizer, device):
    for batch_idx, batch in enumerate(data_loader):
        key, feats, target, feats_lengths, target_lengths = batch
        feats = feats.to(device)
        target_lengths = target_lengths.to(device)
        num_utts = target_lengths.size(0)
        if num_utts == 0:
            {BRANCH}
            continue
        loss = model(feats, feats_lengths, target, target_lengths)
        loss.backward()
        optimizer.step()


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    model = DDP(build().cuda(rank), device_ids=[rank])
    train(model, loader(), opt(model), rank)
"""


def test_exit_on_own_data_is_a_warning_unless_its_branch_runs_a_collective(
    tmp_path: Path,
) -> None:
    found = lint_project(tmp_path / "ok", {"train.py": WENET.replace("{BRANCH}", "pass")})
    assert severities(found, "DDP-RANK-DIVERGENCE") == [("train.py", 14, "warning")]
    skip = (
        "_skip_flag = torch.tensor(1, dtype=torch.int32, device=device)\n"
        "            dist.all_reduce(_skip_flag, op=dist.ReduceOp.MAX)"
    )
    found = lint_project(tmp_path / "bad", {"train.py": WENET.replace("{BRANCH}", skip)})
    assert ("train.py", 14, "error") in severities(found, "DDP-RANK-DIVERGENCE")


# facebookresearch/dlrm @ 728650ed53b83eebfd7ca9cb0e4c868b7a039f6b,
# extend_distributed.py:142-157: `for j in range(per_rank_split_lengths[i])` inside
# `for i in range(my_size)`: every rank walks the same list; the head names no rank.
# Twin: a loop strided by the rank itself stays an error.
DLRM = """\
import torch.distributed as dist
from torch.autograd import Function

my_size = 1
my_rank = -1


def init_distributed():
    global my_size, my_rank
    dist.init_process_group("nccl")
    my_size = dist.get_world_size()
    my_rank = dist.get_rank()


class All2All_ScatterList_Wait(Function):
    @staticmethod
    def backward(ctx, *grad_output):
        a2ai = ctx.a2ai
        grad_output = [t.contiguous() for t in grad_output]
        mb_split_lengths = a2ai.gNS if a2ai.gNS else [a2ai.lN] * my_size
        per_rank_split_lengths = a2ai.gSS if a2ai.gSS else [a2ai.lS] * my_size
        grad_inputs = [grad_output[0].new_empty([ctx.a2ai.N, ctx.a2ai.E]) for _ in range(a2ai.lS)]
        req_list = []
        ind = 0
        for i in range(my_size):
            for j in {HEAD}:
                gather_list = list(grad_inputs[j].split(mb_split_lengths, dim = 0)) if i == my_rank else None
                req = dist.gather(grad_output[ind], gather_list, dst = i, async_op=True)
                req_list.append(req)
                ind += 1
        return tuple(grad_output)
"""


def test_loop_bound_without_rank_in_its_head_is_a_warning(tmp_path: Path) -> None:
    head = DLRM.replace("{HEAD}", "range(per_rank_split_lengths[i])")
    sev = severities(lint_project(tmp_path / "ok", {"train.py": head}), "DDP-RANK-DIVERGENCE")
    assert sev == [("train.py", 26, "warning")], sev
    strided = DLRM.replace("{HEAD}", "range(my_rank, a2ai.lS, my_size)")
    sev = severities(lint_project(tmp_path / "bad", {"train.py": strided}), "DDP-RANK-DIVERGENCE")
    assert sev == [("train.py", 26, "error")], sev


# mozilla/TTS @ 9d0ae2bfb48aa7d95c6f236d8b9f841fb64a525f, TTS/bin/train_glow_tts.py:388-420
# and TTS/tts/utils/synthesis.py:73-82, 181-250: rank 0 synthesises test sentences; the
# model call that reads as a DDP forward is in `run_model_tf`, the TensorFlow backend's
# branch, two calls deep: not certain.
TTS_TRAIN = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from synthesis import synthesis


def evaluate(model, args, c, epoch):
    if args.rank == 0 and epoch >= c.test_delay_epochs:
        for idx, test_sentence in enumerate(c.test_sentences):
            wav = synthesis(model, test_sentence, c, True)


def main(args, c):
    dist.init_process_group("nccl")
    model = DDP(build().cuda(args.rank), device_ids=[args.rank])
    for epoch in range(c.epochs):
        loss = model(torch.randn(2).cuda())
        loss.backward()
        evaluate(model, args, c, epoch)
"""
TTS_SYNTH = """\
import torch


def run_model_tf(model, inputs, CONFIG, truncated, speaker_id=None, style_mel=None):
    if CONFIG.use_gst and style_mel is not None:
        raise NotImplementedError(' [!] GST inference not implemented for TF')
    if truncated:
        raise NotImplementedError(' [!] Truncated inference not implemented for TF')
    if speaker_id is not None:
        raise NotImplementedError(' [!] Multi-Speaker not implemented for TF')
    decoder_output, postnet_output, alignments, stop_tokens = model(inputs, training=False)
    return decoder_output, postnet_output, alignments, stop_tokens


def synthesis(model, text, CONFIG, use_cuda, backend='torch'):
    inputs = torch.tensor([[1, 2, 3]])
    if backend == 'tf':
        return run_model_tf(model, inputs, CONFIG, False)
    return model.module.inference(inputs)
"""

# FareedKhan-dev/train-llm-from-scratch @ 2f995f87ddda6a90b86bb2d1bc882cb900ca906d,
# scripts/train_sft.py:113-114 (a labelled pitfall): `if ctx.is_main: eval_dev(model, ...)`
# with the DDP forward in eval_dev in the same file (its @torch.no_grad() left out here: the
# real model's buffers made that forward a broadcast): stays an error.
SFT = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def eval_dev(model, batches):
    total = 0.0
    for x, y in batches:
        total += model(x, y).item()
    return total


def main(ctx, batches):
    dist.init_process_group("nccl")
    model = DDP(build().cuda(ctx.local_rank), device_ids=[ctx.local_rank])
    for x, y in batches:
        model(x, y).backward()
    if ctx.is_main:
        print(eval_dev(model, batches))
"""


def test_collective_two_calls_deep_is_a_warning_one_call_away_an_error(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "ok", {"train.py": TTS_TRAIN, "synthesis.py": TTS_SYNTH})
    sev = severities(found, "DDP-RANK-DIVERGENCE")
    assert sev and all(s == "warning" for _, _, s in sev), sev
    # twin: the DDP forward one call away, in the same file, under a plain rank test
    assert ("train.py", 19, "error") in severities(
        lint_project(tmp_path / "bad", {"train.py": SFT}), "DDP-RANK-DIVERGENCE"
    )


# ultralytics/yolov5 @ 9c31a66f5dfdf5b7f465ef20a470ad7e2a199354, train.py:245-279: after
# `model = DDP(model, ...)` the script attaches `model.class_weights = ...` to the wrapper
# and reads it back there (found there: a warning); `model.model[-1].nl` at line 249 reads
# the inner model's attribute on the wrapper (PR #5332, the labelled pitfall): an error.
YOLOV5 = """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP


def train(hyp, opt, device, dataset, nc, maps, cuda, RANK, LOCAL_RANK):
    model = Model(opt.cfg, ch=3, nc=nc).to(device)
    if cuda and RANK != -1:
        model = DDP(model, device_ids=[LOCAL_RANK], output_device=LOCAL_RANK)
    nl = model.model[-1].nl  # number of detection layers (to scale hyps)
    hyp['box'] *= 3. / nl  # scale to layers
    model.nc = nc  # attach number of classes to model
    model.hyp = hyp  # attach hyperparameters to model
    model.class_weights = labels_to_class_weights(dataset.labels, nc).to(device) * nc
    for epoch in range(opt.epochs):
        model.train()
        if opt.image_weights:
            cw = model.class_weights.cpu().numpy() * (1 - maps) ** 2 / nc  # class weights
"""


def test_attribute_stored_on_the_wrapper_before_the_read_is_a_warning(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "p", {"train.py": YOLOV5})
    assert severities(found, "DDP-WRAPPER-ATTR") == [
        ("train.py", 9, "error"),
        ("train.py", 17, "warning"),
    ]


# ultralytics/yolov3 @ eb4acecbb55368f898fab8f52709db5534bdb098, train.py:120-146, 223,
# test.py:11-73 and utils/utils.py:243-254: train.py attaches `model.hyp = hyp` to the DDP
# wrapper and hands the wrapper to `test.test(model=model)`, which passes it on to
# `compute_loss(train_out, targets, model)`, which reads `model.hyp`: found there (a
# warning). Twin: the attribute set only by the model's class (`self.hyp` in __init__):
# the wrapper has none, an error. Left out: `model, optimizer = amp.initialize(model,
# optimizer, ...)` at train.py:142 under `if mixed_precision:`; with it the real project's
# finding stays an error (a re-binding through a call is not followed to the wrapper).
YOLOV3_TRAIN = """\
import torch
import torch.distributed as dist
import test
from models import Darknet


def train(hyp, opt, loader, dataloader, optimizer, device):
    model = Darknet(opt.cfg).to(device)
    if torch.cuda.device_count() > 1:
        dist.init_process_group(backend=opt.backend, init_method=opt.dist_url)
        model = torch.nn.parallel.DistributedDataParallel(model)
    {ATTACH}
    for epoch in range(opt.epochs):
        for imgs, targets in loader:
            pred = model(imgs.to(device))
            pred.sum().backward()
            optimizer.step()
        results = test.test(opt.cfg, dataloader, model=model)
"""
YOLOV3_TEST = """\
import torch
from utils import compute_loss


def test(cfg, dataloader, model=None):
    device = next(model.parameters()).device
    loss = torch.zeros(3)
    for batch_i, (imgs, targets) in enumerate(dataloader):
        inf_out, train_out = model(imgs.to(device))
        loss_i, _ = compute_loss(train_out, targets.to(device), model)
        loss += loss_i.item()
    return loss
"""
YOLOV3_MODELS = """\
import torch.nn as nn


class Darknet(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.hyp = {"giou": 3.54}
        self.layer = nn.Linear(4, 4)

    def forward(self, x):
        return self.layer(x)
"""
YOLOV3_UTILS = """\
import torch


def compute_loss(p, targets, model):  # predictions, targets, model
    ft = torch.cuda.FloatTensor if p[0].is_cuda else torch.Tensor
    lcls, lbox, lobj = ft([0]), ft([0]), ft([0])
    h = model.hyp  # hyperparameters
    return (lcls + lbox + lobj) * h["giou"], torch.cat((lbox, lobj, lcls)).detach()
"""


def test_attribute_the_project_attaches_from_outside_is_a_warning(tmp_path: Path) -> None:
    files = {"models.py": YOLOV3_MODELS, "utils.py": YOLOV3_UTILS, "test.py": YOLOV3_TEST}
    attached = YOLOV3_TRAIN.replace("{ATTACH}", "model.hyp = hyp  # attach hyperparameters")
    found = lint_project(tmp_path / "ok", {"train.py": attached, **files})
    assert severities(found, "DDP-WRAPPER-ATTR") == [("utils.py", 7, "warning")]
    plain = YOLOV3_TRAIN.replace("{ATTACH}", "pass")
    found = lint_project(tmp_path / "bad", {"train.py": plain, **files})
    assert severities(found, "DDP-WRAPPER-ATTR") == [("utils.py", 7, "error")]


# ACEsuit/mace @ a8e279a03985365af2ed6bd8c1cda3341230e0db, mace/tools/train.py:466-513
# (take_step_lbfgs): inside the LBFGS closure rank 0 broadcasts a signal; the other ranks
# wait in a loop on the same `broadcast(signal, src=0)` and run the closure when told: they
# pair up (a warning). Twin: no rank listens, rank 0 broadcasts alone (an error).
MACE = """\
import torch
import torch.distributed


def take_step_lbfgs(model, loss_fn, data_loader, optimizer, device, distributed, rank):
    signal = torch.zeros(1, device=device) if distributed else None

    def closure():
        if distributed:
            if rank == 0:
                signal.fill_(1)
                torch.distributed.broadcast(signal, src=0)
        optimizer.zero_grad(set_to_none=True)
        total_loss = torch.tensor(0.0, device=device)
        for batch in data_loader:
            batch_loss = loss_fn(pred=model(batch.to(device)), ref=batch)
            batch_loss.backward()
            total_loss += batch_loss
        return total_loss

    if distributed:
        if rank == 0:
            loss = optimizer.step(closure)
{REST}
    return loss


def main(model, loss_fn, loader, optimizer):
    torch.distributed.init_process_group("nccl")
    rank = torch.distributed.get_rank()
    model = torch.nn.parallel.DistributedDataParallel(model.cuda(), device_ids=[rank])
    take_step_lbfgs(model, loss_fn, loader, optimizer, "cuda", True, rank)
"""
MACE_LISTEN = """\
            signal.fill_(0)
            torch.distributed.broadcast(signal, src=0)
        else:
            while True:
                # Other ranks wait for signals from rank 0
                torch.distributed.broadcast(signal, src=0)
                if signal.item() == 0:
                    break
                if signal.item() == 1:
                    loss = closure()"""
MACE_ALONE = """\
        else:
            loss = closure()"""


def test_collective_joined_outside_its_rank_test_is_a_warning(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "ok", {"train.py": MACE.replace("{REST}", MACE_LISTEN)})
    assert ("train.py", 12, "warning") in severities(found, "DDP-RANK-DIVERGENCE")
    found = lint_project(tmp_path / "bad", {"train.py": MACE.replace("{REST}", MACE_ALONE)})
    assert ("train.py", 12, "error") in severities(found, "DDP-RANK-DIVERGENCE")


# karpathy/llm.c @ be0e10b5182e0309e534e10445a1e5d1f7f9a27b, train_gpt2.py:592-597 and
# 684-689: the PyTorch -> C bridge's one forward/backward runs only on the master process
# and only with `--write_tensors` (a setting for the C tests): a warning (there the wrap
# even comes later, at line 711; here it comes first, so the rule reads a DDP forward).
# Twins: the master alone, or the master every 100 steps, keep the error.
LLMC = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(args, model, train_loader):
    ddp_rank = int(os.environ['RANK'])
    ddp_local_rank = int(os.environ['LOCAL_RANK'])
    dist.init_process_group(backend='nccl')
    device = f'cuda:{ddp_local_rank}'
    master_process = ddp_rank == 0 # this process will do logging, checkpointing etc.
    model = DDP(model.to(device), device_ids=[ddp_local_rank])
    for step in range(args.num_iterations):
        if {TEST}:
            x, y = train_loader.next_batch()
            x, y = x.to(device), y.to(device)
            logits, loss = model(x, y)
            loss.backward()
"""


def test_rank_test_with_a_bare_setting_is_a_warning(tmp_path: Path) -> None:
    flag = LLMC.replace(
        "{TEST}", "master_process and args.write_tensors and (not args.inference_only)"
    )
    found = severities(lint_project(tmp_path / "ok", {"train.py": flag}), "DDP-RANK-DIVERGENCE")
    assert found and all(s == "warning" for _, _, s in found), found
    for i, test in enumerate(("master_process", "master_process and step % 100 == 0")):
        plain = LLMC.replace("{TEST}", test)
        found = severities(
            lint_project(tmp_path / f"bad{i}", {"train.py": plain}), "DDP-RANK-DIVERGENCE"
        )
        assert ("train.py", 18, "error") in found, (test, found)


# mlfoundations/open_clip @ a9ad60c2951d941cdb4adfa0bdcf71ac1954e1ac,
# src/open_clip_train/train.py:99-101 and 251-281 (a labelled pitfall): `evaluate` returns
# at once on every rank but the master, which then runs the DDP forward `model(images,
# texts)`; the training loop's `model(images, texts)` is no partner of it (a DDP forward is
# no explicit collective another call could pair with): stays an error.
OPENCLIP = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def is_master(args):
    return args.rank == 0


def train_one_epoch(model, loader, optimizer, args):
    for images, texts in loader:
        model_out = model(images, texts)
        model_out["loss"].backward()
        optimizer.step()


def evaluate(model, loader, args):
    metrics = {}
    if not is_master(args):
        return metrics
    model.eval()
    for images, texts in loader:
        model_out = model(images, texts)
        metrics["loss"] = model_out["loss"].item()
    return metrics


def main(args, net, loader, optimizer):
    dist.init_process_group("nccl")
    args.rank = dist.get_rank()
    model = DDP(net.cuda(args.local_rank), device_ids=[args.local_rank], broadcast_buffers=True)
    for epoch in range(args.epochs):
        train_one_epoch(model, loader, optimizer, args)
        evaluate(model, loader, args)
"""


def test_a_ddp_forward_elsewhere_is_no_partner(tmp_path: Path) -> None:
    found = lint_project(tmp_path / "bad", {"train.py": OPENCLIP})
    assert ("train.py", 23, "error") in severities(found, "DDP-RANK-DIVERGENCE")
