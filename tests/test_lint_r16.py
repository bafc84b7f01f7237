"""Round 16 (blind batch AF): the loss all-reduced and divided before backward()
(DDP-LOSS-ALL-REDUCED), cut from yuxumin/PoinTr@d6b7f4d34cbff3f9d10ffbed7fe448d70cdcea6c
(utils/dist_utils.py:41-48 reduce_tensor, tools/runner.py:89-102); the fix (PoinTr's next
commit) reduces copies for the log and backpropagates the local losses."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

DIST_UTILS = """\
import torch


def reduce_tensor(tensor, args):
    '''
        for acc kind, get the mean in each gpu
    '''
    rt = tensor.clone()
    torch.distributed.all_reduce(rt, op=torch.distributed.ReduceOp.SUM)
    rt /= args.world_size
    return rt
"""

RUNNER = """\
import torch
from torch.nn.parallel import DistributedDataParallel

from utils import dist_utils


def run_net(args, base_model, train_dataloader, optimizer, gt):
    base_model = DistributedDataParallel(base_model.cuda(), device_ids=[args.local_rank])
    for idx, (taxonomy_ids, model_ids, partial) in enumerate(train_dataloader):
        ret = base_model(partial)
        sparse_loss, dense_loss = base_model.module.get_loss(ret, gt)

        sparse_loss = dist_utils.reduce_tensor(sparse_loss, args)
        dense_loss = dist_utils.reduce_tensor(dense_loss, args)

        _loss = sparse_loss + dense_loss
        _loss.backward()
        optimizer.step()
"""

# the fix: the local losses are backpropagated, reduced copies are logged
FIXED = RUNNER.replace(
    """        sparse_loss = dist_utils.reduce_tensor(sparse_loss, args)
        dense_loss = dist_utils.reduce_tensor(dense_loss, args)

        _loss = sparse_loss + dense_loss
        _loss.backward()
""",
    """        _loss = sparse_loss + dense_loss
        _loss.backward()
        sparse_loss = dist_utils.reduce_tensor(sparse_loss, args)
        dense_loss = dist_utils.reduce_tensor(dense_loss, args)
""",
)

MAIN = """\
import torch.distributed as dist

from tools.runner import run_net

dist.init_process_group("nccl")
run_net(None, None, None, None, None)
"""


def _lint(root: Path, runner: str, utils: str = DIST_UTILS) -> list[tuple[str, int, str]]:
    files = {
        "main.py": MAIN,
        "tools/__init__.py": "",
        "tools/runner.py": runner,
        "utils/__init__.py": "",
        "utils/dist_utils.py": utils,
    }
    return severities(lint_project(root, files, entry="main.py"), "DDP-LOSS-ALL-REDUCED")


def test_a_loss_reduced_by_a_dividing_helper_then_backpropagated_is_a_warning(
    tmp_path: Path,
) -> None:
    assert _lint(tmp_path, RUNNER) == [("runner.py", 13, "warning"), ("runner.py", 14, "warning")]


def test_the_fix_reducing_after_backward_for_the_log_is_silent(tmp_path: Path) -> None:
    assert _lint(tmp_path, FIXED) == []


def test_a_helper_that_averages_with_reduceop_avg_leaves_the_gradient_alone(
    tmp_path: Path,
) -> None:
    """No division autograd records: the gradient is the local one, DDP averages once."""
    avg = DIST_UTILS.replace("ReduceOp.SUM", "ReduceOp.AVG").replace(
        "    rt /= args.world_size\n", ""
    )
    assert _lint(tmp_path, RUNNER, avg) == []


def test_the_differentiable_all_reduce_of_torch_distributed_nn_is_silent(tmp_path: Path) -> None:
    nn = DIST_UTILS.replace(
        "torch.distributed.all_reduce(rt, op=torch.distributed.ReduceOp.SUM)",
        "torch.distributed.nn.functional.all_reduce(rt)",
    )
    assert _lint(tmp_path, RUNNER, nn) == []


def test_an_in_place_reduce_and_division_in_the_loop_itself_fires(tmp_path: Path) -> None:
    inline = RUNNER.replace(
        "        sparse_loss = dist_utils.reduce_tensor(sparse_loss, args)\n",
        "        torch.distributed.all_reduce(sparse_loss)\n"
        "        sparse_loss /= args.world_size\n",
    )
    assert _lint(tmp_path, inline) == [
        ("runner.py", 13, "warning"),
        ("runner.py", 15, "warning"),
    ]
