"""Round 29: what lint28 left of blind batch V, each on the real lines (cited with
repository and commit) beside a twin that must stay silent."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

# stanford-futuredata/ColBERT @ 501c29d9e0b7f7b393e36c4177ec2b141a253114: Examples.tolist
# (colbert/data/examples.py:34-46) keeps every nranks-th triple from 0 for every rank (issue
# #403; PR #405 starts at `rank`); called from colbert/training/lazy_batcher.py:27, the
# wrap from colbert/training/training.py:56.
COLBERT_EXAMPLES = """\
class Examples:
    def __init__(self, data=None):
        self.data = data

    def tolist(self, rank=None, nranks=None):
        if rank or nranks:
            assert rank in range(nranks), (rank, nranks)
            return [self.data[idx] for idx in range(0, len(self.data), nranks)]  # if line_idx % nranks == rank

        return list(self.data)
"""
COLBERT_TRAIN = """\
import torch
from examples import Examples


def train(config, triples):
    triples = Examples(triples).tolist(config.rank, config.nranks)
    colbert = config.model.to('cuda')
    colbert = torch.nn.parallel.DistributedDataParallel(colbert, device_ids=[config.rank])
    for batch in triples:
        colbert(batch).backward()
"""


def test_stride_shard_without_the_rank(tmp_path: Path) -> None:
    bad = lint_project(
        tmp_path / "bad", {"examples.py": COLBERT_EXAMPLES, "train.py": COLBERT_TRAIN}
    )
    assert severities(bad, "DDP-SAMPLER") == [("examples.py", 8, "error")], bad
    # twin: PR #405 starts each rank at its own index
    fixed = COLBERT_EXAMPLES.replace("range(0, len(self.data)", "range(rank, len(self.data)")
    ok = lint_project(tmp_path / "ok", {"examples.py": fixed, "train.py": COLBERT_TRAIN})
    assert severities(ok, "DDP-SAMPLER") == [], ok
    # twin: consecutive groups of `nranks` items (a batching: the index starts a slice)
    grouped = COLBERT_EXAMPLES.replace(
        "[self.data[idx] for idx", "[self.data[idx:idx + nranks] for idx"
    )
    ok2 = lint_project(tmp_path / "ok2", {"examples.py": grouped, "train.py": COLBERT_TRAIN})
    assert severities(ok2, "DDP-SAMPLER") == [], ok2


# mlfoundations/open_clip @ 6382b1017fdd41900841fe00f24ba469eb66b975,
# src/training/distributed.py:42-59 (world_info_from_env) and 80-108; 6e00e7f "prioritize
# LOCAL_RANK, RANK, WORLD_SIZE ... over SLURM world vars, in case torchrun running within
# SLURM env" moves LOCAL_RANK first.
OPENCLIP_DIST = """\
import os

import torch


def world_info_from_env():
    local_rank = 0
    for v in ('SLURM_LOCALID', 'MPI_LOCALRANKID', 'OMPI_COMM_WORLD_LOCAL_RANK', 'LOCAL_RANK'):
        if v in os.environ:
            local_rank = int(os.environ[v])
            break
    global_rank = 0
    for v in ('SLURM_PROCID', 'PMI_RANK', 'OMPI_COMM_WORLD_RANK', 'RANK'):
        if v in os.environ:
            global_rank = int(os.environ[v])
            break
    world_size = 1
    for v in ('SLURM_NTASKS', 'PMI_SIZE', 'OMPI_COMM_WORLD_SIZE', 'WORLD_SIZE'):
        if v in os.environ:
            world_size = int(os.environ[v])
            break
    return local_rank, global_rank, world_size


def init_distributed_device(args):
    args.local_rank, args.rank, args.world_size = world_info_from_env()
    torch.distributed.init_process_group(
        backend=args.dist_backend,
        init_method=args.dist_url,
        world_size=args.world_size,
        rank=args.rank,
    )
    device = 'cuda:%d' % args.local_rank
    torch.cuda.set_device(device)
    return device
"""
OPENCLIP_MAIN = """\
from distributed import init_distributed_device


def main(args):
    device = init_distributed_device(args)
    return device
"""


def test_scheduler_local_id_before_local_rank(tmp_path: Path) -> None:
    bad = lint_project(
        tmp_path / "bad", {"distributed.py": OPENCLIP_DIST, "train.py": OPENCLIP_MAIN}
    )
    assert severities(bad, "DDP-HARDCODED-DEVICE") == [("distributed.py", 8, "warning")], bad
    # twin: the fix's order (the launcher's variable first)
    fixed = OPENCLIP_DIST.replace(
        "('SLURM_LOCALID', 'MPI_LOCALRANKID', 'OMPI_COMM_WORLD_LOCAL_RANK', 'LOCAL_RANK')",
        "('LOCAL_RANK', 'MPI_LOCALRANKID', 'SLURM_LOCALID', 'OMPI_COMM_WORLD_LOCAL_RANK')",
    )
    ok = lint_project(tmp_path / "ok", {"distributed.py": fixed, "train.py": OPENCLIP_MAIN})
    assert severities(ok, "DDP-HARDCODED-DEVICE") == [], ok


# Jingkang50/OpenOOD @ 3de61c4ea68da2084a74883fce68e39c3493815c: the recorder comes from a
# registry dict (openood/recorders/utils.py get_recorder) and BaseRecorder.save_model
# (openood/recorders/base_recorder.py:26-29) saves the wrapper's keys; da6540b saves
# `net.module.state_dict()`. The wrap (openood/networks/utils.py:272-289) keeps a dict of
# wrappers or one wrapper, told apart by `type(net) is dict`.
OOD_RECORDERS = """\
import os

import torch


class BaseRecorder:
    def __init__(self, config) -> None:
        self.output_dir = config.output_dir

    def save_model(self, net, val_metrics):
        torch.save(
            net.state_dict(),
            os.path.join(self.output_dir, 'model_epoch{}.ckpt'.format(val_metrics['epoch_idx'])))


def get_recorder(config):
    recorders = {
        'base': BaseRecorder,
    }
    return recorders[config.recorder.name](config)
"""
OOD_NETWORKS = """\
import torch


def get_network(network_config):
    net = network_config.build()
    if network_config.num_gpus > 1:
        if type(net) is dict:
            for key, subnet in zip(net.keys(), net.values()):
                net[key] = torch.nn.parallel.DistributedDataParallel(
                    subnet, device_ids=[torch.cuda.current_device()])
        else:
            net = torch.nn.parallel.DistributedDataParallel(
                net.cuda(), device_ids=[torch.cuda.current_device()])
    if network_config.num_gpus > 0:
        if type(net) is dict:
            for subnet in net.values():
                subnet.cuda()
        else:
            net.cuda()
    return net
"""
OOD_MAIN = """\
from networks import get_network
from recorders import get_recorder


def run(config):
    net = get_network(config.network)
    recorder = get_recorder(config)
    for epoch_idx in range(config.num_epochs):
        recorder.save_model(net, {'epoch_idx': epoch_idx})
"""


def test_save_through_a_registry_built_recorder(tmp_path: Path) -> None:
    files = {"networks.py": OOD_NETWORKS, "main.py": OOD_MAIN}
    bad = lint_project(tmp_path / "bad", {**files, "recorders.py": OOD_RECORDERS}, "main.py")
    assert severities(bad, "DDP-SAVE-WRAPPER") == [("recorders.py", 11, "warning")], bad
    # the dict of wrappers read under `type(net) is dict`: not the wrapper's attribute
    assert severities(bad, "DDP-WRAPPER-ATTR") == [], bad
    # twin: da6540b strips the wrapper before saving
    fixed = OOD_RECORDERS.replace("net.state_dict()", "net.module.state_dict()")
    ok = lint_project(tmp_path / "ok", {**files, "recorders.py": fixed}, "main.py")
    assert severities(ok, "DDP-SAVE-WRAPPER") == [], ok


def test_wrapper_read_without_the_type_test_still_said(tmp_path: Path) -> None:
    """The twin of the `type(net) is dict` guard: the same read on the wrapper, untested."""
    unguarded = OOD_NETWORKS.replace(
        "        if type(net) is dict:\n            for subnet in net.values():\n"
        "                subnet.cuda()\n        else:\n            net.cuda()\n",
        "        for subnet in net.values():\n            subnet.cuda()\n",
    )
    files = {"networks.py": unguarded, "recorders.py": OOD_RECORDERS, "main.py": OOD_MAIN}
    bad = lint_project(tmp_path / "bad", files, "main.py")
    said = [(n, ln) for n, ln, _ in severities(bad, "DDP-WRAPPER-ATTR")]
    assert said == [("networks.py", 15)], bad
