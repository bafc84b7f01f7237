"""Round 25: blind batch R's four false errors on two correct projects, each on the real
lines (cited with repository and commit) beside a twin where the plain pitfall stays an
error."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project, severities

# FunAudioLLM/CosyVoice @ ace7c47f41bbd303aa6bf1ea80e6f9fbd595cd40,
# cosyvoice/utils/executor.py:27-59 (the device stored from RANK and never read; the loop
# entered under `model_context = model.join if ddp else nullcontext`).
COSY = """\
import os
from contextlib import nullcontext
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Executor:
    def __init__(self):
        self.rank = int(os.environ.get('RANK', 0))
        self.device = torch.device('cuda:{}'.format(self.rank))

    def train_one_epoc(self, model, optimizer, loader, info_dict):
        model.train()
        model_context = {CTX}
        with model_context():
            for batch_idx, batch in enumerate(loader):
                loss = model(batch)
                loss.backward()
                optimizer.step()
{USE}

def main():
    local_rank = int(os.environ['LOCAL_RANK'])
    torch.cuda.set_device(local_rank)
    dist.init_process_group('nccl')
    data = list(range(100))[dist.get_rank()::dist.get_world_size()]
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    model = DDP(torch.nn.Linear(4, 4).cuda(), device_ids=[local_rank])
    ex = Executor()
    ex.train_one_epoc(model, None, loader, {})
"""
_JOIN = "model.join if info_dict['train_engine'] == 'torch_ddp' else nullcontext"


def test_cosyvoice_unread_device_and_handed_join(tmp_path: Path) -> None:
    ok = lint_project(
        tmp_path / "ok", {"train.py": COSY.replace("{CTX}", _JOIN).replace("{USE}", "")}
    )
    assert all(s == "warning" for _, _, s in severities(ok, "DDP-HARDCODED-DEVICE")), ok
    assert any("read nowhere" in f.summary for f in ok)
    assert not severities(ok, "DDP-UNEVEN-BATCH"), ok
    # twin: the stored device is used, and no join: both errors stand
    use = "                batch = batch.to(self.device)\n"
    bad = lint_project(
        tmp_path / "bad", {"train.py": COSY.replace("{CTX}", "nullcontext").replace("{USE}", use)}
    )
    assert ("train.py", 11, "error") in severities(bad, "DDP-HARDCODED-DEVICE"), bad
    assert any(s == "error" for _, _, s in severities(bad, "DDP-UNEVEN-BATCH")), bad


# pytorch/torchrec @ a48cef79ebc333da92af1311c04b041ee21a8e75,
# examples/bert4rec/bert4rec_main.py:275-276 and 437-447.
TORCHREC = """\
import os
import torch
import torch.distributed as dist


def _train_one_epoch(model):
    if torch.cuda.is_available():
        torch.cuda.set_device(dist.get_rank())
    model.train()


def main():
{LOCAL}
    dist.init_process_group(backend="nccl")
    _train_one_epoch(None)
"""
_LOCAL = """\
    rank = int(os.environ["LOCAL_RANK"])
    device = torch.device(f"cuda:{rank}")
    torch.cuda.set_device(device)"""


def test_torchrec_global_rank_reset_after_local_device_is_a_warning(tmp_path: Path) -> None:
    ok = lint_project(tmp_path / "ok", {"train.py": TORCHREC.replace("{LOCAL}", _LOCAL)})
    sev = severities(ok, "DDP-HARDCODED-DEVICE")
    assert ("train.py", 8, "warning") in sev, sev
    # twin: the file reads LOCAL_RANK but never sets the GPU from it: the error stands
    bad_local = '    print(os.environ["LOCAL_RANK"], os.environ["NODE_RANK"])'
    bad = lint_project(tmp_path / "bad", {"train.py": TORCHREC.replace("{LOCAL}", bad_local)})
    assert ("train.py", 8, "error") in severities(bad, "DDP-HARDCODED-DEVICE"), bad
