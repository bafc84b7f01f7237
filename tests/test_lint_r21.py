"""Round 21's lint readings, tuned on blind batches AT1/AT2 after scoring them once. Each
from real lines (cited), with a twin that must stay silent:

- a project function picked by name at run time, `getattr(common_utils, "init_dist_%s" %
  args.launcher)(...)`, is followed (OpenPCDet 1f5b787^), so its `world_size =
  torch.cuda.device_count()` with the rank from a `local_rank` parameter is found;
- `--local_rank` declared in another module's parser with default -1 and clamped
  (`max(args.local_rank, 0)`, Chinese-CLIP 94b2a30^) is said where the entry takes its GPU;
- a loss all-reduced and divided before backward() in a script's `__main__` loop (llm.c
  3476625^);
- a `break` under `if rank == 0:` leaves the epoch loop on rank 0 only, whatever test sits
  between (mace 8c77569^'s patience);
- a file a helper writes names where its path is made (llama-recipes 80a6ac4^);
- tuned on AU after its score: Lightning's `trainer.strategy.barrier()` is a collective,
  and a bare `return` nested under a rank test leaves early before it (sleap-nn PR #437)."""

from __future__ import annotations

from pathlib import Path

from ddptui.lint import lint_paths, lint_source


def _found(entry: Path, fid: str, root: Path) -> list[tuple[str, int, list[tuple[str, int, str]]]]:
    return [
        (Path(f.file).name, f.line, [(Path(p.file).name, p.line, p.label) for p in f.also])
        for f in lint_paths([entry], root=root).findings
        if f.id == fid
    ]


# OpenPCDet @ ec98288^ pcdet/utils/common_utils.py 161-174 and tools/train.py 58-67, cut down
COMMON_UTILS = """\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def init_dist_slurm(tcp_port, local_rank, backend='nccl'):
    dist.init_process_group(backend=backend)
    return dist.get_world_size(), dist.get_rank()


def init_dist_pytorch(tcp_port, local_rank, backend='nccl'):
    if mp.get_start_method(allow_none=True) is None:
        mp.set_start_method('spawn')

    num_gpus = torch.cuda.device_count()
    torch.cuda.set_device(local_rank % num_gpus)
    dist.init_process_group(
        backend=backend,
        init_method='tcp://127.0.0.1:%d' % tcp_port,
        rank=local_rank,
        world_size=num_gpus
    )
    rank = dist.get_rank()
    return num_gpus, rank
"""
TRAIN = """\
import argparse

from torch.nn.parallel import DistributedDataParallel

from pcdet.utils import common_utils


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm'], default='none')
    parser.add_argument('--tcp_port', type=int, default=18888)
    parser.add_argument('--local_rank', type=int, default=None)
    args = parser.parse_args()
    total_gpus, local_rank = getattr(common_utils, PICK)(
        args.tcp_port, args.local_rank, backend='nccl'
    )
    model = DistributedDataParallel(build(), device_ids=[local_rank])


if __name__ == '__main__':
    main()
"""


def _openpcdet(root: Path, pick: str) -> Path:
    (root / "pcdet" / "utils").mkdir(parents=True)
    (root / "pcdet" / "__init__.py").write_text("")
    (root / "pcdet" / "utils" / "__init__.py").write_text("")
    (root / "pcdet" / "utils" / "common_utils.py").write_text(COMMON_UTILS)
    (root / "tools").mkdir()
    (root / "tools" / "train.py").write_text(TRAIN.replace("PICK", pick))
    return root / "tools" / "train.py"


def test_a_function_picked_by_name_is_followed_and_its_world_size_found(tmp_path: Path) -> None:
    entry = _openpcdet(tmp_path, "'init_dist_%s' % args.launcher")
    found = _found(entry, "DDP-WORLD-FROM-DEVICE-COUNT", tmp_path)
    # said where the count is taken, with the argument it is given as
    assert found == [
        ("common_utils.py", 15, [("common_utils.py", 21, "given as the world size at")])
    ], found


def test_a_name_with_no_constant_start_picks_nothing(tmp_path: Path) -> None:
    entry = _openpcdet(tmp_path, "args.launcher")
    assert _found(entry, "DDP-WORLD-FROM-DEVICE-COUNT", tmp_path) == []


def test_a_rank_whose_name_says_nothing_is_left_alone() -> None:
    text = COMMON_UTILS.replace("local_rank", "which") + "\n\ninit_dist_pytorch(1, 0)\n"
    assert [f for f in lint_source(text) if f.id == "DDP-WORLD-FROM-DEVICE-COUNT"] == []


# Chinese-CLIP @ 94b2a30^ cn_clip/training/params.py 189-195 and main.py 47-55, cut down
PARAMS = """\
import argparse


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=None)
    # arguments for distributed training
    parser.add_argument(
        "--local_rank",
        type=int,
        default=-1,
        help="For distributed training: local_rank."
    )
    return parser.parse_args()
"""
MAIN = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from cn_clip.training.params import parse_args


def main():
    args = parse_args()

    # Set distributed group
    args.local_device_rank = max(args.local_rank, 0)
    torch.cuda.set_device(args.local_device_rank)
    args.device = torch.device("cuda", args.local_device_rank)

    dist.init_process_group(backend="nccl")
    model = DistributedDataParallel(build().cuda(args.local_device_rank), device_ids=[args.local_device_rank])
"""


def _clip(root: Path, main: str = MAIN) -> Path:
    (root / "cn_clip" / "training").mkdir(parents=True)
    for d in (root / "cn_clip", root / "cn_clip" / "training"):
        (d / "__init__.py").write_text("")
    (root / "cn_clip" / "training" / "params.py").write_text(PARAMS)
    (root / "cn_clip" / "training" / "main.py").write_text(main)
    return root / "cn_clip" / "training" / "main.py"


def test_a_local_rank_flag_of_another_modules_parser_is_said_where_the_gpu_is_taken(
    tmp_path: Path,
) -> None:
    found = _found(_clip(tmp_path), "DDP-HARDCODED-DEVICE", tmp_path)
    assert found == [("main.py", 12, [("params.py", 8, "the flag is declared at")])], found


def test_the_fix_reading_local_rank_is_silent(tmp_path: Path) -> None:
    fixed = MAIN.replace("max(args.local_rank, 0)", 'int(os.environ["LOCAL_RANK"])')
    assert _found(_clip(tmp_path, "import os\n" + fixed), "DDP-HARDCODED-DEVICE", tmp_path) == []


def test_minus_one_meaning_not_distributed_is_left_alone(tmp_path: Path) -> None:
    # older Hugging Face examples: -1 is a mode of its own, tested as such
    sentinel = MAIN.replace(
        "    dist.init_process_group", "    if args.local_rank != -1:\n        dist.init_process_group"
    )
    assert _found(_clip(tmp_path, sentinel), "DDP-HARDCODED-DEVICE", tmp_path) == []


# karpathy/llm.c @ 3476625^ train_gpt2.py 800-826, cut down: the loop is the script's own
# `if __name__ == "__main__":` block
LLMC = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def reduce_for_log(x):
    dist.all_reduce(x)
    x /= dist.get_world_size()
    return x.item()


if __name__ == "__main__":
    dist.init_process_group(backend="nccl")
    model = DDP(build(), device_ids=[0])
    for step in range(10):
        for micro_step in range(grad_accum_steps):
            x, y = train_loader.next_batch()
            _, loss = model(x, y, return_logits=False)
            loss = loss / grad_accum_steps
            dist.all_reduce(loss, op=dist.ReduceOp.SUM)
            loss /= dist.get_world_size()
            lossf += loss.item()
            loss.backward()
"""


def test_a_loss_all_reduced_before_backward_in_a_scripts_main_block() -> None:
    hits = [f for f in lint_source(LLMC) if f.id == "DDP-LOSS-ALL-REDUCED"]
    assert [f.line for f in hits] == [20], hits


def test_the_fix_reducing_a_detached_copy_for_the_log_is_silent() -> None:
    fixed = LLMC.replace(
        "            dist.all_reduce(loss, op=dist.ReduceOp.SUM)\n            loss /= dist.get_world_size()\n"
        "            lossf += loss.item()\n",
        "            lossf += reduce_for_log(loss.detach().clone())\n",
    )
    assert [f for f in lint_source(fixed) if f.id == "DDP-LOSS-ALL-REDUCED"] == []


# ACEsuit/mace @ 8c77569^ mace/tools/train.py 207-330, cut down
MACE = """\
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def train(model, loader, rank, patience, max_num_epochs):
    model = DDP(model)
    lowest_loss, patience_counter, epoch = float("inf"), 0, 0
    while epoch < max_num_epochs:
        for batch in loader:
            loss = model(batch).mean()
            loss.backward()
        valid_loss = evaluate(model)
        if rank == 0:
            if valid_loss >= lowest_loss:
                patience_counter += 1
                if patience_counter >= patience:
                    print("Stopping optimization")
                    break
            else:
                lowest_loss = valid_loss
        dist.barrier()
        epoch += 1
"""


def test_a_break_under_rank_zero_leaves_the_loop_on_rank_zero_alone() -> None:
    hits = [f for f in lint_source(MACE) if f.id == "DDP-RANK-DIVERGENCE"]
    assert [f.line for f in hits] == [18], hits


def test_the_same_patience_on_every_rank_is_silent() -> None:
    every = MACE.replace("        if rank == 0:\n", "        if True:\n")
    assert [f for f in lint_source(every) if f.id == "DDP-RANK-DIVERGENCE"] == []


# meta-llama/llama-recipes @ 80a6ac4^ src/llama_recipes/utils/train_utils.py 62, 207, 429-441
RECIPES = """\
import json
from datetime import datetime

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def train(model, loader, train_config):
    model = DDP(model)
    metrics_filename = f"{train_config.output_dir}/metrics_data_{datetime.now().strftime('%Y-%m-%d_%H-%M-%S')}.json"
    train_loss = []
    for epoch in range(train_config.num_epochs):
        for batch in loader:
            loss = model(**batch).loss
            loss.backward()
            train_loss.append(loss.item())
        save_to_json(metrics_filename, train_loss)


def save_to_json(output_filename, train_epoch_loss):
    metrics_data = {"train_epoch_loss": train_epoch_loss}
    with open(output_filename, "w") as f:
        json.dump(metrics_data, f)


if __name__ == "__main__":
    dist.init_process_group("nccl")
    train(build(), loader(), config())
"""


def test_a_helpers_write_names_where_its_path_is_made() -> None:
    hits = [f for f in lint_source(RECIPES) if f.id == "DDP-ALL-RANKS-IO"]
    assert len(hits) == 1, hits
    places = {(p.line, p.label) for p in hits[0].also}
    assert (10, "its path is made at") in places, places


def test_a_path_made_beside_the_write_is_not_repeated() -> None:
    beside = RECIPES.replace(
        '    with open(output_filename, "w") as f:',
        '    output_filename = output_filename + ".json"\n    with open(output_filename, "w") as f:',
    )
    hits = [f for f in lint_source(beside) if f.id == "DDP-ALL-RANKS-IO"]
    assert hits and not any(p.label == "its path is made at" for f in hits for p in f.also), hits


# talmolab/sleap-nn @ PR #437's parent, sleap_nn/training/callbacks.py 282-328 and 717-745,
# cut down: Lightning callbacks that leave early on some ranks, then sync every rank
SLEAP = """\
import lightning as L


class UnifiedVizCallback(L.Callback):
    def on_train_epoch_end(self, trainer, pl_module):
        if not trainer.is_global_zero:
            return

        epoch = trainer.current_epoch
        train_data = self._get_viz_data(next(self.train_pipeline))
        self._save_local_viz(train_data, "train", epoch)
        trainer.strategy.barrier()


class WandBVizCallback(L.Callback):
    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.is_global_zero:
            epoch = trainer.current_epoch
            wandb_logger = self._get_wandb_logger(trainer)
            if wandb_logger is None:
                return  # No wandb logger, skip visualization logging
            wandb_logger.experiment.log({"epoch": epoch}, commit=False)

        # Sync all processes
        trainer.strategy.barrier()
"""


def _divergence(text: str) -> list[tuple[int, list[tuple[int, str]]]]:
    return [
        (f.line, [(p.line, p.label) for p in f.also])
        for f in lint_source(text)
        if f.id == "DDP-RANK-DIVERGENCE"
    ]


def test_a_lightning_callback_that_leaves_early_off_rank_zero_then_syncs() -> None:
    found = _divergence(SLEAP)
    assert [line for line, _ in found] == [12, 25], found
    # the nested return is named where it leaves
    assert (21, "leaves early at") in found[1][1], found


def test_the_fix_syncing_before_the_rank_test_is_silent() -> None:
    fixed = SLEAP.replace(
        "        if not trainer.is_global_zero:\n            return\n",
        "        trainer.strategy.barrier()\n        if not trainer.is_global_zero:\n            return\n",
    ).replace(
        '        self._save_local_viz(train_data, "train", epoch)\n        trainer.strategy.barrier()\n',
        '        self._save_local_viz(train_data, "train", epoch)\n',
    )
    fixed = fixed.replace(
        "            if wandb_logger is None:\n                return  # No wandb logger, skip visualization logging\n"
        "            wandb_logger.experiment.log",
        "            if wandb_logger is not None:\n                wandb_logger.experiment.log",
    )
    assert _divergence(fixed) == [], _divergence(fixed)


def test_a_rank_zero_error_exit_with_a_value_is_not_a_skipped_sync() -> None:
    # open_clip's main: `if is_master(args): ... if exists: print(...); return -1`
    text = SLEAP.replace("return  # No wandb logger, skip visualization logging", "return -1")
    assert [line for line, _ in _divergence(text)] == [12]
