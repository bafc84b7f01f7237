"""Round 15, after blind batch AE: a project helper that returns `model, model_without_ddp`
(the plain model aliased above the DDP wrap) hands its callers the plain model in the
second element; reading it as the wrapper gave 9 false errors on a correct project."""

from __future__ import annotations

import ast
import time
from pathlib import Path

import pytest
from lintproject import lint_project, severities

from ddptui.lint import nodes
from ddptui.lint.callsites import CallSites
from ddptui.lint.engine import lint_paths

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


# --- speed of the whole-project analysis (issue 19: "whole project < 10 s for 200 files") ---
# Generated, not cut: the shape of a real 208-file project (LibreYOLO, whose trainer calls
# into ~200 modules that call each other, cycles included) without its code.

MODULE = """\
import torch
import torch.distributed as dist

from pkg import m{nxt} as nxt


def step{i}(model, batch, depth):
    if depth > 0:
        return nxt.step{nxt}(model, batch, depth - 1)
    return model(batch)


def save{i}(model, path):
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), path)
    return back{i}(model, path)


def back{i}(model, path):
    if path:
        return save{i}(model, None)
    return nxt.save{nxt}(model, path)
"""

ENTRY = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from pkg.m0 import save0, step0


def main(loader):
    dist.init_process_group("nccl")
    model = DDP(torch.nn.Linear(8, 8).cuda())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in loader:
        loss = step0(model, batch, 3).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    save0(model, "ckpt.pt")
"""


def _rings(n: int) -> dict[str, str]:
    rings = range(0, n, 5)
    entry = ENTRY.replace(
        "from pkg.m0 import save0, step0",
        "\n".join(f"from pkg.m{k} import save{k}, step{k}" for k in rings),
    ).replace(
        "        loss = step0(model, batch, 3).sum()",
        "\n".join(f"        loss = step{k}(model, batch, 3).sum()" for k in rings),
    ).replace(
        '    save0(model, "ckpt.pt")', "\n".join(f'    save{k}(model, "ckpt.pt")' for k in rings)
    )
    files = {"train.py": entry, "pkg/__init__.py": ""}
    for i in range(n):
        # rings of five modules, each calling the next (a chain as deep as the project
        # is a different matter: Flow.function_sync recurses once per hop)
        files[f"pkg/m{i}.py"] = MODULE.format(i=i, nxt=i - i % 5 + (i + 1) % 5)
    return files


def test_a_project_of_210_modules_calling_each_other_in_cycles_lints_fast_and_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _rings(210)
    t0 = time.process_time()
    fast = [f.to_dict() for f in lint_project(tmp_path / "a", files)]
    elapsed = time.process_time() - t0
    assert elapsed < 60  # generous: a few seconds here; the bound guards against a blow-up
    assert any(Path(f["file"]).parent.name == "pkg" for f in fast)  # reached through the cycles
    # the same project with the call-site table, the own-nodes lists and the per-statement
    # call lists switched off
    monkeypatch.setattr(CallSites, "build", staticmethod(lambda calls, callees: None))
    monkeypatch.setattr(nodes, "_SCOPES", ())
    monkeypatch.setattr(
        nodes,
        "_root_calls",
        lambda root: tuple(n for n in (root, *nodes.own_nodes(root)) if isinstance(n, ast.Call)),
    )
    slow = [f.to_dict() for f in lint_project(tmp_path / "b", files)]
    assert repr(fast) == repr(slow).replace(str(tmp_path / "b"), str(tmp_path / "a"))


def test_a_call_chain_hundreds_of_modules_deep_is_a_note_not_a_traceback(tmp_path: Path) -> None:
    """One ring of 210 modules (each calls the next): a rule that follows calls hop by hop
    runs past Python's recursion limit. That check is skipped with a note naming why; the
    other checks still give their findings, and the run ends normally."""
    files = _rings(210)
    for i in range(210):
        files[f"pkg/m{i}.py"] = MODULE.format(i=i, nxt=(i + 1) % 210)
    root = tmp_path / "deep"
    lint_project(root, files)  # writes the files
    result = lint_paths([root / "train.py"], root=root)
    assert any("too deep to follow" in n for n in result.notes), result.notes
    assert any(Path(f.file).parent.name == "pkg" for f in result.findings)
    assert result.problems == ()
