"""Round 20: DDP-EVAL-LOCAL-METRIC, an evaluation loop over a sharded loader that adds up its
figures on this rank only and uses them with no collective (a kind the blind batches have
held under NEW since round 5). The real lines first, then twins that must stay silent: the
fix, a loader that is not sharded, a collective in a helper or in the caller, a training
loop, a torchmetrics metric; and the same mistake through accelerate's `prepare`."""

from __future__ import annotations

from pathlib import Path

from ddptui.lint import lint_paths, lint_source

ID = "DDP-EVAL-LOCAL-METRIC"

# ryul99/pytorch-project-template @ 32bfbe1^ (the parent of 32bfbe174ceeb45c20c08c30a86bb251f848e2b4,
# "aggregate loss of all gpus in test_model", PR #11), cut down to the lines the reading
# needs: trainer.py 39-110, dataset/dataloader.py 23-52, utils/test_model.py 1-21 (whole).
TRAINER = """\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

from utils.test_model import test_model
from dataset.dataloader import create_dataloader, DataloaderMode


def train_loop(rank, hp, world_size=0):
    dist.init_process_group(hp.train.dist.mode, rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    train_loader = create_dataloader(hp, DataloaderMode.train, rank, world_size)
    test_loader = create_dataloader(hp, DataloaderMode.test, rank, world_size)
    model = Model(hp, DDP(Net().to(rank), device_ids=[rank]))
    for epoch in range(hp.train.num_epoch):
        train_loader.sampler.set_epoch(epoch)
        train_model(hp, model, train_loader)
        test_model(hp, model, test_loader, None, None)


def main(hp):
    mp.spawn(train_loop, args=(hp, hp.train.dist.gpus), nprocs=hp.train.dist.gpus, join=True)
"""
DATALOADER = """\
from torch.utils.data import Dataset, DataLoader
from torch.utils.data.distributed import DistributedSampler


def create_dataloader(hp, mode, rank, world_size):
    data_loader = DataLoader
    dataset = Dataset_(hp, mode, rank, world_size)
    train_use_shuffle = True
    sampler = None
    if world_size > 0 and hp.data.divide_dataset_per_gpu:
        sampler = DistributedSampler(dataset, world_size, rank)
        train_use_shuffle = False
    if mode is DataloaderMode.train:
        return data_loader(
            dataset=dataset,
            batch_size=hp.train.batch_size,
            shuffle=train_use_shuffle,
            sampler=sampler,
            drop_last=True,
        )
    elif mode is DataloaderMode.test:
        return data_loader(
            dataset=dataset,
            batch_size=hp.test.batch_size,
            shuffle=False,
            sampler=sampler,
            drop_last=True,
        )
"""
TEST_MODEL = """\
import torch


def test_model(hp, model, test_loader, writer, logger):
    model.net.eval()
    total_test_loss = 0
    test_loop_len = 0
    with torch.no_grad():
        for model_input, target in test_loader:
            model.feed_data(input=model_input, GT=target)
            output = model.run_network()
            loss_v = model.loss_f(output, model.GT)
            total_test_loss += loss_v.to("cpu").item()
            test_loop_len += 1

        total_test_loss /= test_loop_len

        if writer is not None:
            writer.logging_with_step(total_test_loss, model.step, "test_loss")
        if logger is not None:
            logger.info("Test Loss %.04f at step %d" % (total_test_loss, model.step))
"""
# the fix (32bfbe1): every batch's loss summed over the ranks before it is added up
FIX = """\
            loss_v = model.loss_f(output, model.GT)
            if hp.train.dist.gpus > 0:
                torch.distributed.all_reduce(loss_v)
                loss_v /= torch.tensor(float(hp.train.dist.gpus))
"""


def _project(root: Path, test_model: str = TEST_MODEL, loader: str = DATALOADER) -> Path:
    (root / "utils").mkdir()
    (root / "dataset").mkdir()
    (root / "utils" / "test_model.py").write_text(test_model)
    (root / "dataset" / "dataloader.py").write_text(loader)
    (root / "trainer.py").write_text(TRAINER)
    return root / "trainer.py"


def _found(entry: Path) -> list[tuple[str, int, list[tuple[str, int, str]]]]:
    return [
        (Path(f.file).name, f.line, [(Path(p.file).name, p.line, p.label) for p in f.also])
        for f in lint_paths([entry], root=entry.parent).findings
        if f.id == ID
    ]


def test_the_test_loss_summed_on_one_shard_is_found_where_it_is_used(tmp_path: Path) -> None:
    found = _found(_project(tmp_path))
    assert found == [
        (
            "test_model.py",
            16,
            [("test_model.py", 13, "summed on this rank at"), ("dataloader.py", 11, "sharded by")],
        )
    ]
    finding = next(f for f in lint_paths([tmp_path / "trainer.py"]).findings if f.id == ID)
    assert finding.severity == "warning"
    assert "`total_test_loss`, `test_loop_len`" in finding.summary
    assert "DistributedSampler" in finding.summary
    assert "dist.all_reduce(totals)" in finding.fix


def test_the_fix_all_reduces_each_batch_and_is_silent(tmp_path: Path) -> None:
    fixed = TEST_MODEL.replace("            loss_v = model.loss_f(output, model.GT)\n", FIX)
    assert _found(_project(tmp_path, test_model=fixed)) == []


def test_a_test_loader_that_is_not_sharded_is_silent(tmp_path: Path) -> None:
    # every rank evaluates the whole set: redundant, but every figure is the whole set's
    whole = DATALOADER.replace(
        "        sampler = DistributedSampler(dataset, world_size, rank)\n", ""
    )
    assert _found(_project(tmp_path, loader=whole)) == []


def test_a_project_helper_that_all_reduces_in_the_caller_is_silent(tmp_path: Path) -> None:
    returned = TEST_MODEL.replace(
        "        total_test_loss /= test_loop_len\n",
        "        total_test_loss /= test_loop_len\n        return total_test_loss\n",
    )
    entry = _project(tmp_path, test_model=returned)
    entry.write_text(
        TRAINER.replace(
            "        test_model(hp, model, test_loader, None, None)\n",
            "        loss = test_model(hp, model, test_loader, None, None)\n"
            "        loss = reduce_mean(torch.tensor(loss).cuda(), world_size)\n",
        )
        + "\n\ndef reduce_mean(t, n):\n    rt = t.clone()\n    dist.all_reduce(rt)\n    return rt / n\n"
    )
    assert _found(entry) == []


SCRIPT = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    correct, seen = 0, 0
    for x, y in loader:
        torch.cuda.synchronize()
        correct += (model(x.cuda()).argmax(1) == y.cuda()).sum().item()
        seen += y.numel()
    return correct / seen


def train(model, loader, opt):
    model.train()
    total = 0.0
    for x, y in loader:
        loss = model(x.cuda()).sum()
        loss.backward()
        opt.step()
        total += loss.item()
    return total / len(loader)


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank % 8)
    model = DDP(Net().cuda(), device_ids=[rank % 8])
    train_loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
    val_loader = DataLoader(val_set, batch_size=32, sampler=DistributedSampler(val_set, shuffle=False))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(10):
        train_loader.sampler.set_epoch(epoch)
        train(model, train_loader, opt)
        acc = evaluate(model, val_loader)
        if rank == 0:
            print(epoch, acc)
"""


def _script_hits(text: str) -> list[int]:
    return [f.line for f in lint_source(text, "train.py") if f.id == ID]


def test_an_accuracy_on_the_sharded_validation_set_is_found_and_the_training_sum_is_not() -> None:
    # line 15: `return correct / seen`; the training loop's `total` (a backward in the loop)
    # is no evaluation; torch.cuda.synchronize() (timing) combines nothing
    assert _script_hits(SCRIPT) == [15]


def test_a_gather_or_a_torchmetrics_compute_is_silent() -> None:
    reduced = SCRIPT.replace(
        "    return correct / seen\n",
        "    t = torch.tensor([correct, seen], device='cuda')\n"
        "    dist.all_reduce(t)\n"
        "    return (t[0] / t[1]).item()\n",
    )
    assert _script_hits(reduced) == []
    metric = SCRIPT.replace(
        "    correct, seen = 0, 0\n", "    acc = torchmetrics.Accuracy().cuda()\n"
    )
    metric = metric.replace(
        "        correct += (model(x.cuda()).argmax(1) == y.cuda()).sum().item()\n"
        "        seen += y.numel()\n"
        "    return correct / seen\n",
        "        acc.update(model(x.cuda()), y.cuda())\n    return acc.compute()\n",
    )
    assert "acc.compute()" in metric
    assert _script_hits(metric) == []


def test_a_validation_loader_without_a_sampler_is_silent() -> None:
    plain = SCRIPT.replace(", sampler=DistributedSampler(val_set, shuffle=False))", ")")
    assert _script_hits(plain) == []


ACCELERATE = """\
import torch
from accelerate import Accelerator


def main():
    accelerator = Accelerator()
    model = build()
    train_dl = torch.utils.data.DataLoader(ds, batch_size=8, shuffle=True)
    eval_dl = torch.utils.data.DataLoader(ds2, batch_size=8)
    model, optimizer, train_dl, eval_dl = accelerator.prepare(model, optimizer, train_dl, eval_dl)
    for epoch in range(3):
        model.train()
        for batch in train_dl:
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
        model.eval()
        correct = 0
        total = 0
        for batch in eval_dl:
            with torch.no_grad():
                out = model(**batch)
            correct += (out.logits.argmax(-1) == batch["labels"]).sum().item()
            total += len(batch["labels"])
        accelerator.print(f"epoch {epoch}: {correct / total:.3f}")
"""


def test_a_loader_accelerate_prepared_is_sharded_too() -> None:
    found = [f for f in lint_source(ACCELERATE, "train.py") if f.id == ID]
    assert [f.line for f in found] == [25]
    assert "accelerator.prepare" in found[0].summary
    gathered = ACCELERATE.replace(
        "            correct += (out.logits",
        "            preds, labels = accelerator.gather_for_metrics((out.logits, batch['labels']))\n"
        "            correct += (out.logits",
    )
    assert [f.line for f in lint_source(gathered, "train.py") if f.id == ID] == []


SOLO = "DDP-SOLO-PASS-TIMEOUT"

# nnaisense/bayesian-flow-networks @ b62568e (train.py 69-168, cut down to the lines the reading
# needs; PR #6: "since validation only runs on the main process and gpu, the other gpus timeout
# (nccl) waiting for it", the maintainer: "IIRC the default timeout is 30 mins so if the val takes
# longer than that nccl will throw an error" and "increasing the timeout ... is a simpler solution")
BFN = """\
import math

import torch
from accelerate import Accelerator


@torch.no_grad()
def validate(cfg, model, ema_model, val_dataloader, step, accelerator):
    model_to_eval = ema_model if ema_model is not None else model
    model_to_eval.eval()
    loss, count = 0.0, 0
    for i in range(cfg.val_repeats):
        for idx, eval_batch in enumerate(val_dataloader):
            with torch.inference_mode():
                loss += model_to_eval(eval_batch.to(accelerator.device)).item()
                count += 1
    loss /= count
    model.train()
    return loss


def train(cfg, accelerator, model, ema_model, dataloaders, optimizer):
    is_main = accelerator.is_main_process
    best_val_loss = math.inf
    train_iter = make_infinite(dataloaders["train"])
    model.train()
    for step in range(cfg.start_step, cfg.n_training_steps + 1):
        for _ in range(cfg.accumulate):
            with accelerator.accumulate(model):
                train_batch = next(train_iter)
                loss = model(train_batch)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        if is_main and (step % cfg.val_interval == 0) and "val" in dataloaders:
            val_loss = validate(
                cfg=cfg,
                model=model,
                ema_model=ema_model,
                val_dataloader=dataloaders["val"],
                step=step,
                accelerator=accelerator,
            )
            best_val_loss = min(val_loss, best_val_loss)


def main(cfg):
    acc = Accelerator(gradient_accumulation_steps=cfg.training.accumulate)
    model, dataloaders, optimizer = setup(cfg)
    model, optimizer, dataloaders["train"] = acc.prepare(model, optimizer, dataloaders["train"])
    train(cfg.training, acc, model, None, dataloaders, optimizer)
"""


def _solo(text: str) -> list[tuple[int, list[tuple[int, str]]]]:
    return [
        (f.line, [(p.line, p.label) for p in f.also])
        for f in lint_source(text, "train.py")
        if f.id == SOLO
    ]


def test_a_validation_pass_on_the_main_process_alone_is_found_at_its_test() -> None:
    assert _solo(BFN) == [
        (
            35,
            [
                (13, "pass over the loader at"),
                (28, "the other ranks wait at"),
                (48, "set timeout= at"),
            ],
        )
    ]
    finding = next(f for f in lint_source(BFN, "train.py") if f.id == SOLO)
    assert finding.severity == "warning"
    assert "timeout=datetime.timedelta" in finding.fix
    assert "Watchdog caught collective operation timeout" in finding.why


def test_a_timeout_given_to_the_process_group_is_silent() -> None:
    given = BFN.replace(
        "    acc = Accelerator(gradient_accumulation_steps=cfg.training.accumulate)\n",
        "    kw = InitProcessGroupKwargs(timeout=datetime.timedelta(hours=3))\n"
        "    acc = Accelerator(kwargs_handlers=[kw])\n",
    )
    assert _solo(given) == []


def test_one_batch_then_break_is_a_sample_not_a_pass() -> None:
    sample = BFN.replace(
        "                count += 1\n", "                count += 1\n            break\n"
    )
    assert _solo(sample) == []


TORCH_SOLO = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def evaluate(model, loader):
    model.eval()
    with torch.no_grad():
        for x, y in loader:
            model(x.cuda())


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    model = DDP(Net().cuda(rank), device_ids=[rank])
    for epoch in range(10):
        train_one_epoch(model, train_loader)
        if rank == 0:
            evaluate(model.module, val_loader)
        dist.barrier()
"""


def test_a_rank_zero_evaluation_before_a_barrier_is_found_and_its_twins_are_not() -> None:
    assert [line for line, _ in _solo(TORCH_SOLO)] == [19]
    # every rank evaluates: nobody waits
    every = TORCH_SOLO.replace(
        "        if rank == 0:\n            evaluate(model.module, val_loader)\n",
        "        evaluate(model.module, val_loader)\n",
    )
    assert _solo(every) == []
    # the wrapper's forward under no_grad syncs nothing: still a wait
    wrapped = TORCH_SOLO.replace(
        "evaluate(model.module, val_loader)", "evaluate(model, val_loader)"
    )
    assert [line for line, _ in _solo(wrapped)] == [19]
    # the evaluation all-reduces on rank 0 alone: a hang, said elsewhere
    hang = TORCH_SOLO.replace(
        "            model(x.cuda())\n", "            dist.all_reduce(model(x.cuda()))\n"
    )
    assert _solo(hang) == []
    assert "DDP-RANK-DIVERGENCE" in {f.id for f in lint_source(hang, "train.py")}
    # nothing after the test waits for rank 0 (no barrier, no further step)
    last = TORCH_SOLO.replace("    for epoch in range(10):\n", "    for epoch in range(1):\n")
    last = last.replace("        dist.barrier()\n", "")
    last = last.replace("        train_one_epoch(model, train_loader)\n", "")
    assert _solo(last) == []
    timed = TORCH_SOLO.replace(
        'dist.init_process_group("nccl")',
        'dist.init_process_group("nccl", timeout=datetime.timedelta(hours=2))',
    )
    assert _solo(timed) == []


# Project-MONAI/tutorials @ 6d4182f770f97fcc516c4f02eb8cd5c75fb6d0a2 (as handed in blind batch AR2),
# generative/3d_ldm/train_diffusion.py 52-56 and 216-247, utils.py 36-44 and 118-131, cut down;
# fixed in d0de28e (the validation loss all-reduced). The evaluation loop sits in main() beside
# the setup helper's `dist.barrier()`: a barrier moves no figure between the ranks, and a call
# above the loop cannot combine what the loop adds up.
MONAI = """\
import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader


def setup_ddp(rank, world_size):
    dist.init_process_group(
        backend="nccl", init_method="env://", timeout=timedelta(seconds=36000), rank=rank, world_size=world_size
    )  # gloo, nccl
    dist.barrier()
    device = torch.device(f"cuda:{rank}")
    return dist, device


def prepare_dataloader(args, batch_size, rank=0, world_size=1):
    ddp_bool = world_size > 1
    if ddp_bool:
        train_sampler = torch.utils.data.distributed.DistributedSampler(train_ds, num_replicas=world_size, rank=rank)
        val_sampler = torch.utils.data.distributed.DistributedSampler(val_ds, num_replicas=world_size, rank=rank)
    else:
        train_sampler = None
        val_sampler = None
    train_loader = DataLoader(train_ds, batch_size=batch_size, shuffle=(not ddp_bool), sampler=train_sampler)
    val_loader = DataLoader(val_ds, batch_size=batch_size, shuffle=False, sampler=val_sampler)
    return train_loader, val_loader


def main():
    rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    dist, device = setup_ddp(rank, world_size)
    torch.cuda.set_device(device)
    train_loader, val_loader = prepare_dataloader(args, 2, rank=rank, world_size=world_size)
    unet = DDP(build().to(device), device_ids=[device])
    for epoch in range(100):
        train_loader.sampler.set_epoch(epoch)
        for step, batch in enumerate(train_loader):
            loss = F.mse_loss(unet(batch["image"].to(device)), batch["target"].to(device))
            loss.backward()
        if epoch % val_interval == 0:
            unet.eval()
            val_recon_epoch_loss = 0
            with torch.no_grad():
                for step, batch in enumerate(val_loader):
                    images = batch["image"].to(device)
                    val_loss = F.mse_loss(unet.module(images).float(), images.float())
                    val_recon_epoch_loss += val_loss.item()
                val_recon_epoch_loss = val_recon_epoch_loss / (step + 1)
                if rank == 0:
                    print(f"Epoch {epoch} val_diffusion_loss: {val_recon_epoch_loss}")
"""


def test_an_inline_validation_loss_beside_a_setup_barrier_is_found() -> None:
    found = [
        (f.line, [p.line for p in f.also]) for f in lint_source(MONAI, "train.py") if f.id == ID
    ]
    assert found == [(53, [52, 24])]


def test_the_monai_fix_all_reduces_the_validation_loss_and_is_silent() -> None:
    fixed = MONAI.replace(
        "                val_recon_epoch_loss = val_recon_epoch_loss / (step + 1)\n",
        "                val_recon_epoch_loss = val_recon_epoch_loss / (step + 1)\n"
        "                val_recon_epoch_loss = torch.tensor(val_recon_epoch_loss).to(device)\n"
        "                dist.all_reduce(val_recon_epoch_loss, op=dist.ReduceOp.AVG)\n",
    )
    assert [f for f in lint_source(fixed, "train.py") if f.id == ID] == []


# mlfoundations/open_clip @ a9ad60c2951d941cdb4adfa0bdcf71ac1954e1ac (as handed in blind batch AR2),
# src/open_clip_train/main.py 465-487 and train.py 251-281, cut down; fixed in bfd2f34 (a barrier
# after the rank-0-only evaluation). `evaluate()` returns at once on every rank but the master;
# the others go on into the next epoch's training and wait in its first all-reduce.
OPENCLIP = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def is_master(args):
    return args.rank == 0


def evaluate(model, data, epoch, args):
    metrics = {}
    if not is_master(args):
        return metrics
    model.eval()
    dataloader = data["val"].dataloader
    with torch.inference_mode():
        for i, batch in enumerate(dataloader):
            images, texts = batch
            model_out = model.module(images.cuda(), texts.cuda())
    return metrics


def train_one_epoch(model, data, loss, optimizer):
    for images, texts in data["train"].dataloader:
        total_loss = loss(**model(images.cuda(), texts.cuda()))
        total_loss.backward()
        optimizer.step()


def main(args):
    dist.init_process_group(backend="nccl", init_method="env://")
    model = DDP(create_model().cuda(args.local_rank), device_ids=[args.local_rank])
    if "train" not in data:
        evaluate(model, data, start_epoch, args)
        return
    for epoch in range(start_epoch, args.epochs):
        train_one_epoch(model, data, loss, optimizer)
        completed_epoch = epoch + 1
        if any(v in data for v in ("val", "imagenet-val", "imagenet-v2")):
            evaluate(model, data, completed_epoch, args)
"""


def test_an_evaluation_that_returns_early_off_the_master_is_found_at_its_call() -> None:
    found = [(f.line, f.summary) for f in lint_source(OPENCLIP, "train.py") if f.id == SOLO]
    # the call in the epoch loop (line 40); the evaluation-only call at line 34 is followed by
    # `return` on every rank: nobody waits there
    assert [line for line, _ in found] == [40]
    assert "if not is_master(args):" in found[0][1]
    fixed = OPENCLIP.replace(
        "            evaluate(model, data, completed_epoch, args)\n",
        "            evaluate(model, data, completed_epoch, args)\n        dist.barrier()\n",
    )
    fixed = fixed.replace('init_method="env://")', 'init_method="env://", timeout=timeout)')
    assert [f for f in lint_source(fixed, "train.py") if f.id == SOLO] == []


# facebookresearch/barlowtwins @ 6f91e07150654ec1eb233cedb3b826ba0b32589c (as handed in blind
# batch AR1), evaluate.py 81-98, cut down; fixed in a7a74fc (the backbone wrapped too). Only the
# linear classifier is wrapped; with --weights finetune the ResNet's parameters join the same
# optimizer through a parameter group, and its gradients are never all-reduced.
BARLOW = """\
import torch
import torch.distributed as dist
from torch import nn, optim
import torchvision.models as models


def main_worker(gpu, args):
    dist.init_process_group(backend="nccl", init_method=args.dist_url, world_size=args.world_size, rank=args.rank)
    torch.cuda.set_device(gpu)
    model = models.resnet50().cuda(gpu)
    model.fc = nn.Identity()
    if args.weights == "freeze":
        model.requires_grad_(False)
    classifier = nn.Linear(2048, 1000).cuda(gpu)
    classifier = torch.nn.parallel.DistributedDataParallel(classifier, device_ids=[gpu])
    param_groups = [dict(params=classifier.parameters(), lr=args.lr_classifier)]
    if args.weights == "finetune":
        param_groups.append(dict(params=model.parameters(), lr=args.lr_backbone))
    optimizer = optim.SGD(param_groups, 0, momentum=0.9, weight_decay=args.weight_decay)
    for epoch in range(args.epochs):
        for images, target in train_loader:
            loss = criterion(classifier(model(images.cuda(gpu))), target.cuda(gpu))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""


def test_a_backbone_trained_through_a_parameter_group_but_never_wrapped_is_found() -> None:
    found = [f for f in lint_source(BARLOW, "evaluate.py") if f.id == "DDP-NOT-APPLIED"]
    assert [(f.line, f.severity) for f in found] == [(15, "error")]
    assert "`model` is trained (its parameters go to the optimizer at line 19)" in found[0].summary


def test_the_backbone_wrapped_too_or_left_out_of_the_groups_is_silent() -> None:
    fixed = BARLOW.replace(
        "    model.fc = nn.Identity()\n",
        "    model.fc = nn.Identity()\n"
        "    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[gpu])\n",
    )
    assert [f for f in lint_source(fixed, "evaluate.py") if f.id == "DDP-NOT-APPLIED"] == []
    frozen = BARLOW.replace(
        "        param_groups.append(dict(params=model.parameters(), lr=args.lr_backbone))\n",
        "        pass\n",
    )
    assert [f for f in lint_source(frozen, "evaluate.py") if f.id == "DDP-NOT-APPLIED"] == []


# bytedance/ibot @ 3302b63fc7e287afc68601cb1dc2f0c311af8e3b (as handed in blind batch AR1;
# issue #15), main_ibot.py 356-360, cut down: two checkpoints written by every rank, the second
# only every saveckp_freq epochs; one finding per writer and file, with the later write named
# where the fix goes too.
IBOT = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def train_ibot(args):
    dist.init_process_group("nccl")
    student = DDP(build().cuda(), device_ids=[args.gpu])
    for epoch in range(args.epochs):
        train_one_epoch(student)
        save_dict = {"student": student.module.state_dict(), "epoch": epoch + 1}
        torch.save(save_dict, os.path.join(args.output_dir, "checkpoint.pth"))
        if args.saveckp_freq and (epoch % args.saveckp_freq == 0) and epoch:
            torch.save(save_dict, os.path.join(args.output_dir, f"checkpoint{epoch:04}.pth"))


if __name__ == "__main__":
    train_ibot(get_args())
"""


def test_every_write_of_one_writer_is_named_once_with_the_later_ones_as_second_places() -> None:
    found = [f for f in lint_source(IBOT, "main_ibot.py") if f.id == "DDP-ALL-RANKS-IO"]
    assert [f.line for f in found] == [14]
    assert (16, "also written at") in [(p.line, p.label) for p in found[0].also]


# MIC-DKFZ/nnUNet (as handed in blind batch AR2), nnunetv2/training/nnUNetTrainer/nnUNetTrainer.py
# 221 and 950-954, cut down: every rank writes debug.json with batchgenerators' `save_json`
# (guarded to rank 0 in e99caf5) and every rank deletes the shared latest checkpoint at the last
# epoch (the fix adds the rank test): the ranks race on one file.
NNUNET = """\
import os
from os.path import isfile, join

import torch.distributed as dist
from batchgenerators.utilities.file_and_folder_operations import save_json
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, output_folder, local_rank):
        self.output_folder = output_folder
        self.local_rank = local_rank
        self.network = DDP(build().cuda(local_rank), device_ids=[local_rank])

    def _save_debug_information(self):
        dct = {"network": str(self.network)}
        save_json(dct, join(self.output_folder, "debug.json"))

    def on_epoch_end(self, current_epoch):
        if current_epoch == self.num_epochs - 1:
            if isfile(join(self.output_folder, "checkpoint_latest.pth")):
                os.remove(join(self.output_folder, "checkpoint_latest.pth"))

    def run_training(self):
        dist.init_process_group("nccl")
        self._save_debug_information()
        for epoch in range(self.num_epochs):
            self.on_epoch_end(epoch)


if __name__ == "__main__":
    Trainer("out", int(os.environ["LOCAL_RANK"])).run_training()
"""


def test_every_rank_deleting_or_dumping_one_file_is_found() -> None:
    found = {
        (f.line, f.summary.split(":")[0], tuple((p.line, p.label) for p in f.also))
        for f in lint_source(NNUNET, "trainer.py")
        if f.id == "DDP-ALL-RANKS-IO"
    }
    # the dump is said at the run's call of the helper, with the write itself as a place
    assert (26, "`save_json` runs on every rank", ((17, "written at"),)) in found
    assert any(line == 22 and "`os.remove`" in said for line, said, _ in found)
    caught = NNUNET.replace(
        '                os.remove(join(self.output_folder, "checkpoint_latest.pth"))\n',
        "                try:\n"
        '                    os.remove(join(self.output_folder, "checkpoint_latest.pth"))\n'
        "                except FileNotFoundError:\n"
        "                    pass\n",
    )
    lines = {f.line for f in lint_source(caught, "trainer.py") if f.id == "DDP-ALL-RANKS-IO"}
    assert lines == {29}  # the dump only (three lines lower)


# devsus/deep-loglizer @ c8d86fcce955eb5a040b7884df836bf5b92c9992 (as handed in blind batch
# AR2; fixed in 350b60d), deeploglizer/common/utils.py 49-79 and demo/lstm_demo.py 66-74, cut
# down: `dump_params` writes params.json through a JSON helper on every rank; the finding is
# said at the run's call, and names the write and each call of the helper that holds it
# (utils.py:57 is where the fix went).
LOGLIZER_UTILS = """\
import json
import os


def dump_params(params):
    save_dir = os.path.join("./experiment_records", params["hash_id"])
    os.makedirs(save_dir, exist_ok=True)
    json_pretty_dump(params, os.path.join(save_dir, "params.json"))
    return save_dir


def dump_final_results(params, eval_results):
    json_pretty_dump(eval_results, os.path.join(params["save_dir"], "results.json"))


def json_pretty_dump(obj, filename):
    with open(filename, "w") as fw:
        json.dump(obj, fw, sort_keys=True, indent=4)
"""
LOGLIZER_DEMO = """\
import os

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from utils import dump_final_results, dump_params

if __name__ == "__main__":
    dist.init_process_group("nccl")
    params = {"hash_id": "abc"}
    model_save_path = dump_params(params)
    model = DDP(build().cuda(), device_ids=[int(os.environ["LOCAL_RANK"])])
    dump_final_results(params, model.module.evaluate())
"""


def test_a_helper_write_names_each_call_of_the_helper(tmp_path: Path) -> None:
    (tmp_path / "utils.py").write_text(LOGLIZER_UTILS)
    (tmp_path / "demo.py").write_text(LOGLIZER_DEMO)
    found = [
        f
        for f in lint_paths([tmp_path / "demo.py"], root=tmp_path).findings
        if f.id == "DDP-ALL-RANKS-IO" and "open" in f.summary
    ]
    assert [(Path(f.file).name, f.line) for f in found] == [("demo.py", 11)]
    places = {(Path(p.file).name, p.line, p.label) for p in found[0].also}
    assert {
        ("utils.py", 17, "written at"),
        ("utils.py", 8, "called from"),
        ("utils.py", 13, "called from"),
    } <= places


# snowflakedb/ArcticTraining @ 64cd018 (as handed in blind batch AS1; PR #132), config/base.py 41,
# config/utils.py 21-26 and config/trainer.py 136-140, cut down: the config's `global_rank` is a
# pydantic field filled by `default_factory=get_global_rank` (RANK), and its validator makes it
# the current GPU through DeepSpeed's accelerator: on a second node no GPU has that number.
ARCTIC = """\
import os

import deepspeed
from deepspeed.accelerator import get_accelerator
from pydantic import BaseModel, Field, model_validator


def get_local_rank() -> int:
    return int(os.getenv("LOCAL_RANK", 0))


def get_global_rank() -> int:
    return int(os.getenv("RANK", 0))


class TrainerConfig(BaseModel):
    local_rank: int = Field(default_factory=get_local_rank, exclude=True)
    global_rank: int = Field(default_factory=get_global_rank, exclude=True)

    @model_validator(mode="after")
    def init_dist(self):
        get_accelerator().set_device(self.global_rank)
        deepspeed.init_distributed()
        return self
"""


def test_a_config_field_filled_from_rank_and_made_the_gpu_is_found() -> None:
    found = [f for f in lint_source(ARCTIC, "trainer.py") if f.id == "DDP-HARDCODED-DEVICE"]
    assert [(f.line, f.severity) for f in found] == [(22, "error")]
    local = ARCTIC.replace("set_device(self.global_rank)", "set_device(self.local_rank)")
    assert [f for f in lint_source(local, "trainer.py") if f.id == "DDP-HARDCODED-DEVICE"] == []


# melihcatal/advsecurenet @ d437827 (as handed in blind batch AS2; fixed in ff101c5),
# cli/utils/trainer.py 174-185, cut down: the DDP worker hands the user's shuffle setting to the
# project's loader factory beside a DistributedSampler; with `shuffle_train: true` (the default
# config) the DataLoader refuses.
ADVSECURENET = """\
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


class DataLoaderFactory:
    @staticmethod
    def create_dataloader(dataset, batch_size=32, shuffle=False, **kwargs):
        return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, **kwargs)


class CLITrainer:
    def _ddp_training_fn(self, rank, world_size, train_data):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        train_data_loader = DataLoaderFactory.create_dataloader(
            train_data,
            batch_size=self.config_data.batch_size,
            shuffle=self.config_data.shuffle_train,
            sampler=DistributedSampler(train_data),
        )
        return train_data_loader
"""


def test_a_shuffle_setting_handed_on_beside_a_distributed_sampler_is_a_warning() -> None:
    found = [f for f in lint_source(ADVSECURENET, "trainer.py") if f.id == "DDP-SHUFFLE-SAMPLER"]
    assert [(f.line, f.severity) for f in found] == [(18, "warning")]
    fixed = ADVSECURENET.replace("shuffle=self.config_data.shuffle_train", "shuffle=False")
    assert [f for f in lint_source(fixed, "trainer.py") if f.id == "DDP-SHUFFLE-SAMPLER"] == []
    derived = ADVSECURENET.replace(
        "shuffle=self.config_data.shuffle_train", "shuffle=(sampler is None)"
    )
    assert [f for f in lint_source(derived, "trainer.py") if f.id == "DDP-SHUFFLE-SAMPLER"] == []


# mlfoundations/open_lm @ 66efccff9d13b877b802cef334662a82f2ec5c06 (as handed in blind batch
# AS2; fixed in 09d3561), open_lm/main.py 101-110 and 470-498, cut down: the resumed state
# dict's `module.` prefix is stripped, then loaded into the model main() wrapped in DDP.
OPENLM = """\
import torch
import torch.distributed as dist


def load_model(args, model):
    checkpoint = torch.load(args.resume, map_location="cpu")
    start_epoch = checkpoint["epoch"]
    sd = checkpoint["state_dict"]
    if next(iter(sd.items()))[0].startswith("module"):
        sd = {k[len("module.") :]: v for k, v in sd.items()}
    model.load_state_dict(sd)
    return start_epoch


def main(args):
    dist.init_process_group("nccl")
    model = create_model(args).cuda(args.local_rank)
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.local_rank])
    if args.resume is not None:
        start_epoch = load_model(args, model)
"""


def test_stripped_keys_loaded_into_the_wrapper_are_found() -> None:
    found = [f for f in lint_source(OPENLM, "main.py") if f.id == "DDP-LOAD-INTO-WRAPPER"]
    assert [(f.line, [(p.line, p.label) for p in f.also]) for f in found] == [
        (11, [(10, "prefix stripped at")])
    ]
    fixed = OPENLM.replace(
        "    model.load_state_dict(sd)\n", "    model.module.load_state_dict(sd)\n"
    )
    assert [f for f in lint_source(fixed, "main.py") if f.id == "DDP-LOAD-INTO-WRAPPER"] == []
    before = OPENLM.replace(
        "    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.local_rank])\n"
        "    if args.resume is not None:\n"
        "        start_epoch = load_model(args, model)\n",
        "    if args.resume is not None:\n"
        "        start_epoch = load_model(args, model)\n"
        "    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.local_rank])\n",
    )
    assert [f for f in lint_source(before, "main.py") if f.id == "DDP-LOAD-INTO-WRAPPER"] == []
