"""Round 34: findings said at the line the fix changes. `local_rank = dist.get_rank()`
then handed to set_device / .cuda / device_ids: the uses are right for a local rank, the
assignment is what the fix changes, so the finding is said there, once."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

# yeyupiaoling/MASR @ eeb915450089312d309977a80bfcfe83794bd724, masr/trainer.py 198-204
# and 256-261 (PPASRTrainer.train); the fix 6fbd514 ("修复多卡训练") reads LOCAL_RANK on
# the assignment line.
MASR_TRAIN = """\
import torch
import torch.distributed as dist


def train(model):
    nranks = torch.cuda.device_count()
    local_rank = 0
    if nranks > 1:
        dist.init_process_group(backend='nccl')
        local_rank = dist.get_rank()
    optimizer = torch.optim.AdamW(params=model.parameters(), lr=1e-3)
    torch.cuda.set_device(local_rank)
    model.cuda(local_rank)
    if nranks > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
    return model, optimizer


if __name__ == "__main__":
    train(torch.nn.Linear(2, 2))
"""


def test_global_rank_named_local_is_said_at_its_assignment(tmp_path: Path) -> None:
    hits = severities(lint_project(tmp_path, {"train.py": MASR_TRAIN}), "DDP-HARDCODED-DEVICE")
    assert [(n, ln) for n, ln, _ in hits] == [("train.py", 10)]


def test_local_rank_from_the_launcher_stays_silent(tmp_path: Path) -> None:
    # the twin: the fix itself (LOCAL_RANK on that line)
    text = MASR_TRAIN.replace(
        "local_rank = dist.get_rank()", "local_rank = int(os.environ['LOCAL_RANK'])"
    ).replace("import torch\n", "import os\nimport torch\n", 1)
    assert severities(lint_project(tmp_path, {"train.py": text}), "DDP-HARDCODED-DEVICE") == []


def test_a_name_that_says_rank_keeps_its_uses(tmp_path: Path) -> None:
    # the twin: `rank = dist.get_rank()` is right as it stands; what changes is each use
    text = MASR_TRAIN.replace("local_rank", "rank")
    hits = severities(lint_project(tmp_path, {"train.py": text}), "DDP-HARDCODED-DEVICE")
    assert [ln for _, ln, _ in hits] == [12, 13, 15]
