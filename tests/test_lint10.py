"""DDP-FIND-UNUSED where the graph to the model is cut on some batches only, followed
across the project's files: a loss that sets a term to a fresh constant tensor on a
branch the batch decides (YOLOv6), a layer of the wrapped model whose forward returns a
constant tensor for a batch (GNNFlow). The code is the real projects' (only the lines
needed), each at the commit before its fix; the fixed code and the same shapes decided by
a setting get no finding."""

from __future__ import annotations

from pathlib import Path

from ddptui.lint import lint_paths
from ddptui.lint.model import LintFinding

# meituan/YOLOv6 @ 1563345ef72b26ab011627d97bfb74fcbea17914, yolov6/models/loss.py
# (BboxLoss.forward); fixed by 5738ccf "fix ddp unused param bug" (pred_dist.sum() * 0.)
YOLOV6_LOSS = """\
import torch
import torch.nn as nn


class BboxLoss(nn.Module):
    def __init__(self, num_classes, reg_max, use_dfl=False, iou_type='giou'):
        super(BboxLoss, self).__init__()
        self.num_classes = num_classes
        self.iou_loss = IOUloss(box_format='xyxy', iou_type=iou_type, eps=1e-10)
        self.reg_max = reg_max
        self.use_dfl = use_dfl

    def forward(self, pred_dist, pred_bboxes, anchor_points,
                target_bboxes, target_scores, target_scores_sum, fg_mask):

        # select positive samples mask
        num_pos = fg_mask.sum()
        if num_pos > 0:
            # iou loss
            bbox_mask = fg_mask.unsqueeze(-1).repeat([1, 1, 4])
            pred_bboxes_pos = torch.masked_select(pred_bboxes,
                                                  bbox_mask).reshape([-1, 4])
            target_bboxes_pos = torch.masked_select(
                target_bboxes, bbox_mask).reshape([-1, 4])
            bbox_weight = torch.masked_select(
                target_scores.sum(-1), fg_mask).unsqueeze(-1)
            loss_iou = self.iou_loss(pred_bboxes_pos,
                                     target_bboxes_pos) * bbox_weight
            if target_scores_sum == 0:
                loss_iou = loss_iou.sum()
            else:
                loss_iou = loss_iou.sum() / target_scores_sum

            # dfl loss
            if self.use_dfl:
                loss_dfl = self._df_loss(pred_dist, target_bboxes) * bbox_weight
            else:
                loss_dfl = torch.tensor(0.).to(pred_dist.device)

        else:
            loss_iou = torch.tensor(0.).to(pred_dist.device)
            loss_dfl = torch.tensor(0.).to(pred_dist.device)

        return loss_iou, loss_dfl
"""
YOLOV6_CONSTANT_LINE = 1 + YOLOV6_LOSS.splitlines().index(
    "            loss_iou = torch.tensor(0.).to(pred_dist.device)"
)

# yolov6/core/engine.py of the same commit: the loss is built in the trainer, DDP at 392
YOLOV6_TRAIN = """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from loss import BboxLoss


class Trainer:
    def __init__(self, args, model):
        self.bbox_loss = BboxLoss(80, 16)
        if args.rank != -1:
            model = DDP(model, device_ids=[args.local_rank], output_device=args.local_rank)
        self.model = model

    def step(self, images, targets):
        pred_dist, pred_bboxes = self.model(images)
        loss_iou, loss_dfl = self.bbox_loss(pred_dist, pred_bboxes, None, targets, None, 1, None)
        (loss_iou + loss_dfl).backward()
"""

# jasperzhong/GNNFlow @ 4d6148f8562445cc67acaf2e5e25cfdbef3a17ca: gnnflow/models/
# modules/layers.py (TransfomerAttentionLayer), gnnflow/models/dgnn.py (DGNN holds one per
# layer in a ModuleDict), scripts/offline_edge_prediction_multi_node_kvstore.py:279 (DDP
# with find_unused_parameters=False; the fix, 1fa07bd, turns it on)
GNNFLOW_LAYERS = """\
import torch


class TransfomerAttentionLayer(torch.nn.Module):
    def __init__(self, dim_node, dim_edge, dim_time, dim_out, num_head, dropout, att_dropout):
        super(TransfomerAttentionLayer, self).__init__()
        self.dim_out = dim_out
        self.dropout = torch.nn.Dropout(dropout)
        self.w_q = torch.nn.Linear(dim_node + dim_time, dim_out)
        self.w_k = torch.nn.Linear(dim_node + dim_edge + dim_time, dim_out)
        self.w_v = torch.nn.Linear(dim_node + dim_edge + dim_time, dim_out)
        self.w_out = torch.nn.Linear(dim_node + dim_out, dim_out)
        self.layer_norm = torch.nn.LayerNorm(dim_out)

    def forward(self, b):
        num_edges = b.num_edges()
        num_dst_nodes = b.num_dst_nodes()
        device = b.device

        # sample nothing (no neighbors)
        if num_edges == 0:
            return torch.zeros((num_dst_nodes, self.dim_out), device=device)

        Q = self.w_q(b.srcdata['h'][:num_dst_nodes])
        K = self.w_k(b.edata['f'])
        V = self.w_v(b.edata['f'])
        rst = self.w_out(self.dropout(Q * K * V))
        return self.layer_norm(rst)
"""
GNNFLOW_DGNN = """\
import torch

from layers import TransfomerAttentionLayer


class DGNN(torch.nn.Module):
    def __init__(self, dim_node, dim_edge, dim_time, dim_embed, num_layers, num_snapshots,
                 att_head, dropout, att_dropout):
        super(DGNN, self).__init__()
        self.num_layers = num_layers
        self.num_snapshots = num_snapshots
        self.layers = torch.nn.ModuleDict()
        for l in range(num_layers):
            for h in range(num_snapshots):
                key = 'l' + str(l) + 'h' + str(h)
                self.layers[key] = TransfomerAttentionLayer(dim_node, dim_edge, dim_time,
                                                            dim_embed, att_head, dropout,
                                                            att_dropout)

    def forward(self, mfgs):
        out = list()
        for l in range(self.num_layers):
            for h in range(self.num_snapshots):
                key = 'l' + str(l) + 'h' + str(h)
                out.append(self.layers[key](mfgs[l][h]))
        return out[0]
"""
GNNFLOW_TRAIN = """\
import argparse

import torch
import torch.distributed

from dgnn import DGNN

args = argparse.ArgumentParser().parse_args()
torch.distributed.init_process_group('nccl')
device = torch.device('cuda:{}'.format(args.local_rank))
torch.cuda.set_device(device)
model = DGNN(100, 172, 100, 100, 1, 1, 2, 0.1, 0.1)
model.to(device)
if args.distributed:
    model = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[args.local_rank], find_unused_parameters=False)
"""


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / ".git").mkdir(parents=True)
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def _unused(tmp_path: Path, files: dict[str, str], entry: str) -> list[LintFinding]:
    root = _project(tmp_path, files)
    result = lint_paths([root / entry], root=root)
    # the findings of the cut graph (a literal find_unused_parameters=True has a rule
    # of its own: "the flag for nothing")
    return [f for f in result.findings if f.id == "DDP-FIND-UNUSED" and "batch where" in f.summary]


def test_yolov6_loss_constant_on_batches_without_targets(tmp_path: Path) -> None:
    (hit,) = _unused(tmp_path, {"loss.py": YOLOV6_LOSS, "train.py": YOLOV6_TRAIN}, "train.py")
    # at the constant, in the loss's own file, naming the test and the DDP call
    assert Path(hit.file).name == "loss.py" and hit.line == YOLOV6_CONSTANT_LINE
    assert "`loss_iou`" in hit.summary and "`num_pos > 0`" in hit.summary
    assert "is false" in hit.summary and "train.py:11" in hit.summary
    assert hit.severity == "warning"


def test_yolov6_fixed_or_flagged_gets_no_finding(tmp_path: Path) -> None:
    # the fix keeps the graph: pred_dist.sum() * 0.
    fixed = YOLOV6_LOSS.replace(
        "            loss_iou = torch.tensor(0.).to(pred_dist.device)\n"
        "            loss_dfl = torch.tensor(0.).to(pred_dist.device)\n",
        "            loss_iou = pred_dist.sum() * 0.\n            loss_dfl = pred_dist.sum() * 0.\n",
    )
    assert fixed != YOLOV6_LOSS
    assert _unused(tmp_path / "a", {"loss.py": fixed, "train.py": YOLOV6_TRAIN}, "train.py") == []
    # DDP told to look for unused parameters
    flagged = YOLOV6_TRAIN.replace(
        "output_device=args.local_rank)",
        "output_device=args.local_rank, find_unused_parameters=True)",
    )
    assert flagged != YOLOV6_TRAIN
    assert _unused(tmp_path / "b", {"loss.py": YOLOV6_LOSS, "train.py": flagged}, "train.py") == []


def test_a_setting_decides_the_branch_not_the_batch(tmp_path: Path) -> None:
    # `if self.use_dfl:` ... else constant: the same on every step and rank (the other
    # branch of the real code, line 251), and no data-decided test left: no finding
    only_setting = YOLOV6_LOSS.replace("        if num_pos > 0:", "        if self.use_dfl:")
    assert only_setting != YOLOV6_LOSS
    files = {"loss.py": only_setting, "train.py": YOLOV6_TRAIN}
    assert _unused(tmp_path, files, "train.py") == []


def test_gnnflow_layer_returns_zeros_for_a_batch_without_edges(tmp_path: Path) -> None:
    files = {
        "layers.py": GNNFLOW_LAYERS,
        "dgnn.py": GNNFLOW_DGNN,
        "train.py": GNNFLOW_TRAIN,
    }
    (hit,) = _unused(tmp_path, files, "train.py")
    # at the DDP call (the fix place), naming the layer, where it is held and the test
    ddp_line = 1 + next(
        i for i, x in enumerate(GNNFLOW_TRAIN.splitlines()) if "DistributedDataParallel(" in x
    )
    test_line = 1 + GNNFLOW_LAYERS.splitlines().index("        if num_edges == 0:")
    assert Path(hit.file).name == "train.py" and hit.line == ddp_line
    assert "`TransfomerAttentionLayer.forward`" in hit.summary
    assert "`layers[key]` of `DGNN`" in hit.summary
    assert "`num_edges == 0`" in hit.summary and f"layers.py:{test_line}" in hit.summary
    assert "`self.w_k`" in hit.summary and "`self.dropout`" not in hit.summary  # no parameters


def test_gnnflow_fixed_or_guard_on_a_setting_gets_no_finding(tmp_path: Path) -> None:
    fixed = GNNFLOW_TRAIN.replace("find_unused_parameters=False", "find_unused_parameters=True")
    files = {"layers.py": GNNFLOW_LAYERS, "dgnn.py": GNNFLOW_DGNN, "train.py": fixed}
    assert _unused(tmp_path / "a", files, "train.py") == []
    setting = GNNFLOW_LAYERS.replace("if num_edges == 0:", "if self.dim_out == 0:")
    files = {"layers.py": setting, "dgnn.py": GNNFLOW_DGNN, "train.py": GNNFLOW_TRAIN}
    assert _unused(tmp_path / "b", files, "train.py") == []


# Shark-NLP/DiffuSeq @ bfd0ffd0a914c2afd5720f7bc36cfd1d0d8995ce, basic_utils.py
# (load_model_emb); fixed by a21fa64 "Fix race condiction" (a marker written after the save)
DIFFUSEQ = """\
import os
import time

import torch
import torch.distributed as dist


def load_model_emb(args, tokenizer):
    model = torch.nn.Embedding(tokenizer.vocab_size, args.hidden_dim)
    path_save = '{}/random_emb.torch'.format(args.checkpoint_path)
    if int(os.environ['LOCAL_RANK']) == 0:
        if os.path.exists(path_save):
            print('reload the random embeddings', model)
            model.load_state_dict(torch.load(path_save))
        else:
            print('initializing the random embeddings', model)
            torch.nn.init.normal_(model.weight)
            torch.save(model.state_dict(), path_save)
    else:
        while not os.path.exists(path_save):
            time.sleep(1)
        print('reload the random embeddings', model)
        model.load_state_dict(torch.load(path_save))

    return model, tokenizer


def main(args, tokenizer):
    dist.init_process_group('nccl')
    model_weight, tokenizer = load_model_emb(args, tokenizer)
"""


def _barrier_findings(tmp_path: Path, text: str) -> list[LintFinding]:
    root = _project(tmp_path, {"train.py": text})
    result = lint_paths([root / "train.py"], root=root)
    return [f for f in result.findings if f.id == "DDP-CKPT-BARRIER"]


def test_diffuseq_other_ranks_poll_for_the_file_and_load_it_half_written(tmp_path: Path) -> None:
    (hit,) = _barrier_findings(tmp_path, DIFFUSEQ)
    lines = DIFFUSEQ.splitlines()
    assert hit.line == 1 + lines.index("        model.load_state_dict(torch.load(path_save))")
    assert hit.severity == "error"
    assert "`path_save`" in hit.summary and "is false" in hit.summary
    assert "until the file exists" in hit.summary
    assert f"line {1 + lines.index('            torch.save(model.state_dict(), path_save)')}" in (
        hit.summary
    )


def test_diffuseq_with_a_barrier_on_both_branches_gets_none(tmp_path: Path) -> None:
    # rank 0 joins the barrier once its write is done, the others before they load
    fixed = DIFFUSEQ.replace(
        "            torch.save(model.state_dict(), path_save)\n",
        "            torch.save(model.state_dict(), path_save)\n        dist.barrier()\n",
    ).replace(
        "        while not os.path.exists(path_save):\n            time.sleep(1)\n",
        "        dist.barrier()\n",
    )
    assert fixed.count("dist.barrier()") == 2
    assert _barrier_findings(tmp_path, fixed) == []


# tier4/Diffusion-Planner @ 3726a569af55d0e5c641387358e9a36bf8917a14,
# diffusion_planner/model/module/encoder.py (LaneFusionEncoder, held by Encoder, held by
# Diffusion_Planner_Encoder, held by Diffusion_Planner) and train_predictor.py:256; fixed
# by 6f852bb "Fixed to find_unused_parameters=True"
PLANNER_ENCODER = """\
import torch
import torch.nn as nn


class LaneFusionEncoder(nn.Module):
    def __init__(self, lane_len, drop_path_rate=0.3, hidden_dim=192, depth=3,
                 tokens_mlp_dim=64, channels_mlp_dim=128):
        super().__init__()
        self._lane_len = lane_len
        self._channel = channels_mlp_dim
        self.speed_limit_emb = nn.Linear(1, channels_mlp_dim)
        self.traffic_emb = nn.Linear(4, channels_mlp_dim)

    def forward(self, x, speed_limit, has_speed_limit):
        traffic = x[:, :, 0, 8:]
        B, P, V, _ = x.shape
        speed_limit = speed_limit.view(B * P, 1)
        has_speed_limit = has_speed_limit.view(B * P, 1)
        traffic = traffic.view(B * P, -1)
        speed_limit_embedding = torch.zeros((speed_limit.shape[0], self._channel), device=x.device)

        if has_speed_limit.sum() > 0:
            speed_limit_with_limit = self.speed_limit_emb(
                speed_limit[has_speed_limit].unsqueeze(-1)
            )
            speed_limit_embedding[has_speed_limit] = speed_limit_with_limit

        traffic_light_embedding = self.traffic_emb(traffic)
        return speed_limit_embedding + traffic_light_embedding


class Encoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.lane_encoder = LaneFusionEncoder(config.lane_len)

    def forward(self, inputs):
        return self.lane_encoder(inputs['lanes'], inputs['lanes_speed_limit'],
                                 inputs['lanes_has_speed_limit'])


class Diffusion_Planner(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.encoder = Encoder(config)

    def forward(self, inputs):
        return self.encoder(inputs)
"""
PLANNER_TRAIN = """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from diffusion_planner import Diffusion_Planner


def model_training(args, rank):
    torch.distributed.init_process_group('nccl')
    diffusion_planner = Diffusion_Planner(args)
    diffusion_planner = diffusion_planner.to(rank if args.device == "cuda" else args.device)

    if args.ddp:
        diffusion_planner = DDP(diffusion_planner, device_ids=[rank], find_unused_parameters=False)
"""


def test_diffusion_planner_layer_run_only_when_the_batch_has_speed_limits(tmp_path: Path) -> None:
    files = {"diffusion_planner.py": PLANNER_ENCODER, "train.py": PLANNER_TRAIN}
    (hit,) = _unused(tmp_path, files, "train.py")
    assert Path(hit.file).name == "train.py"
    assert hit.line == 1 + PLANNER_TRAIN.splitlines().index(
        "        diffusion_planner = DDP(diffusion_planner, device_ids=[rank], "
        "find_unused_parameters=False)"
    )
    assert "`LaneFusionEncoder.forward` (`encoder.lane_encoder` of `Diffusion_Planner`)" in (
        hit.summary
    )
    assert "runs `self.speed_limit_emb` only" in hit.summary
    assert "`has_speed_limit.sum() > 0` is true" in hit.summary
    assert "traffic_emb" not in hit.summary  # run on every batch


def test_a_shape_test_is_not_a_batch_count(tmp_path: Path) -> None:
    # `if x.dim() == 4:` is decided by the code's shapes, the same on every batch
    shaped = PLANNER_ENCODER.replace("if has_speed_limit.sum() > 0:", "if x.dim() == 0:")
    assert shaped != PLANNER_ENCODER
    files = {"diffusion_planner.py": shaped, "train.py": PLANNER_TRAIN}
    assert _unused(tmp_path, files, "train.py") == []


# facebookresearch/ClassyVision @ bcc161cd4f7caeefde27fec3743e7a0011b3d015,
# classy_vision/generic/distributed_util.py (broadcast_object): the source rank saves into
# a buffer in memory and broadcasts it, the others load what they received: no file
CLASSY_BROADCAST = """\
import io
import tempfile

import torch


def get_rank():
    return torch.distributed.get_rank()


def broadcast(tensor, src=0):
    torch.distributed.broadcast(tensor, src)
    return tensor


def broadcast_object(obj, src=0, use_disk=True):
    if get_rank() == src:
        # Emit data
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        data_view = buffer.getbuffer()
        length_tensor = torch.LongTensor([len(data_view)])
        length_tensor = broadcast(length_tensor, src=src)
        data_tensor = torch.ByteTensor(data_view)
        data_tensor = broadcast(data_tensor, src=src)
    else:
        # Fetch from the source
        length_tensor = torch.LongTensor([0])
        length_tensor = broadcast(length_tensor, src=src)
        data_tensor = torch.empty([length_tensor.item()], dtype=torch.uint8)
        data_tensor = broadcast(data_tensor, src=src)
        if use_disk:
            with tempfile.TemporaryFile("r+b") as f:
                f.write(data_tensor.numpy())
                del data_tensor
                f.seek(0)
                obj = torch.load(f)
        else:
            buffer = io.BytesIO(data_tensor.numpy())
            obj = torch.load(buffer)
    return obj


torch.distributed.init_process_group('nccl')
state = broadcast_object({'epoch': 1})
"""


def test_an_object_broadcast_through_a_buffer_in_memory_gets_none(tmp_path: Path) -> None:
    assert _barrier_findings(tmp_path, CLASSY_BROADCAST) == []


# KempnerInstitute/KempnerForge @ 7f3e51900ab785d8d53d198318ee779824192253,
# kempnerforge/checkpoint/manager.py (CheckpointManager.save / .load); fixed by c36863b
# "Fix race in CheckpointManager save/load collectives" (a barrier at the end of save())
KEMPNER = """\
import json
from pathlib import Path

import torch
import torch.distributed as dist

_TRAIN_STATE_FILE = "train_state.pt"
_METADATA_FILE = "metadata.json"


class CheckpointManager:
    def __init__(self, config, model, optimizer):
        self.config = config
        self.model = model
        self.optimizer = optimizer
        self._rank = dist.get_rank() if dist.is_initialized() else 0

    def save(self, step, tokens_seen=0, extra=None):
        ckpt_dir = Path(self.config.dir) / f"step_{step}"
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        # Save non-distributed state (rank 0 only)
        if self._rank == 0:
            train_state = {"step": step, "tokens_seen": tokens_seen, "extra": extra}
            torch.save(train_state, ckpt_dir / _TRAIN_STATE_FILE)

            # Write human-readable metadata
            meta = {"step": step, "tokens_seen": tokens_seen}
            (ckpt_dir / _METADATA_FILE).write_text(json.dumps(meta, indent=2))

    def load(self, ckpt_dir):
        # Load non-distributed state
        train_state_path = ckpt_dir / _TRAIN_STATE_FILE
        if train_state_path.exists():
            train_state = torch.load(train_state_path, map_location="cpu", weights_only=False)

            # Broadcast from rank 0 to all ranks
            if dist.is_initialized():
                object_list = [train_state if self._rank == 0 else None]
                dist.broadcast_object_list(object_list, src=0)
                train_state = object_list[0]
            return train_state["step"]
        return 0


dist.init_process_group("nccl")
"""


def test_kempnerforge_save_returns_before_rank0_wrote_what_load_reads(tmp_path: Path) -> None:
    (hit,) = _barrier_findings(tmp_path, KEMPNER)
    lines = KEMPNER.splitlines()
    assert hit.line == 1 + lines.index(
        "            torch.save(train_state, ckpt_dir / _TRAIN_STATE_FILE)"
    )
    assert "`CheckpointManager.save` writes `ckpt_dir / _TRAIN_STATE_FILE`" in hit.summary
    load = 1 + next(i for i, x in enumerate(lines) if "torch.load(" in x)
    assert f"`CheckpointManager.load` loads it on every rank (line {load})" in hit.summary


def test_kempnerforge_with_the_barrier_of_the_fix_gets_none(tmp_path: Path) -> None:
    fixed = KEMPNER.replace(
        "            (ckpt_dir / _METADATA_FILE).write_text(json.dumps(meta, indent=2))\n",
        "            (ckpt_dir / _METADATA_FILE).write_text(json.dumps(meta, indent=2))\n\n"
        "        if dist.is_initialized():\n            dist.barrier()\n",
    )
    assert fixed.count("dist.barrier()") == 1
    assert _barrier_findings(tmp_path, fixed) == []
