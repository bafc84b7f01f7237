"""Round 15, after blind batch AE: a project helper that returns `model, model_without_ddp`
(the plain model aliased above the DDP wrap) hands its callers the plain model in the
second element; reading it as the wrapper gave 9 false errors on a correct project."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

# jayleicn/singularity @ 10a7f7062ab8af187b3a47803851b4e462191492: tasks/shared_utils.py
# setup_model (lines 14-29 and its return), tasks/retrieval.py 114-144 (the plain model is
# evaluated), tasks/retrieval_utils.py 30 (`model.encode_text`). Cut to the lines needed.
SHARED = """\
import copy

import torch


def setup_model(config, model_cls, find_unused_parameters=False):
    config = copy.deepcopy(config)
    model = model_cls(config=config)

    model = model.to(torch.device(config.device))
    model_without_ddp = model
    if config.distributed:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[config.gpu],
            find_unused_parameters=find_unused_parameters
        )

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return model, model_without_ddp, optimizer
"""

UTILS = """\
import torch


@torch.no_grad()
def evaluation(model, data_loader, device):
    text_feats = []
    for text_input in data_loader:
        text_feat = model.encode_text(text_input.to(device))[0]
        text_feats.append(text_feat)
    return torch.cat(text_feats)
"""

RETRIEVAL = """\
import torch
import torch.distributed as dist

from tasks.shared_utils import setup_model
from tasks.retrieval_utils import evaluation


class Singularity(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.text = torch.nn.Linear(8, 8)

    def encode_text(self, x):
        return (self.text(x),)

    def forward(self, x):
        return self.text(x)


def main(config, train_loader, test_loader):
    dist.init_process_group("nccl")
    torch.manual_seed(config.seed)
    device = torch.device(config.device)
    model, model_without_ddp, optimizer = setup_model(
        config, model_cls=Singularity, find_unused_parameters=True
    )
    for x in train_loader:
        loss = model(x.to(device)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    res = evaluation(MODEL, test_loader, device)
    return res
"""


def _project(root: Path, passed: str) -> list[tuple[str, int, str]]:
    files = {
        "tasks/__init__.py": "",
        "tasks/shared_utils.py": SHARED,
        "tasks/retrieval_utils.py": UTILS,
        "tasks/retrieval.py": RETRIEVAL.replace("MODEL", passed),
    }
    return severities(lint_project(root, files, entry="tasks/retrieval.py"), "DDP-WRAPPER-ATTR")


def test_the_plain_model_a_helper_returns_beside_the_wrapper_is_no_wrapper(tmp_path: Path) -> None:
    assert _project(tmp_path / "plain", "model_without_ddp") == []


def test_the_wrapper_the_same_helper_returns_still_fires(tmp_path: Path) -> None:
    assert _project(tmp_path / "wrapper", "model") == [("retrieval_utils.py", 8, "error")]
