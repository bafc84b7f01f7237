"""Round 23: the shapes of code that defeated the rules on blind batch P, each followed in
general. The code is the real projects' (only the lines needed, each cited with its
repository and commit); each wrong shape is beside a correct twin that stays silent."""

from __future__ import annotations

from pathlib import Path

from lintproject import lint_project
from lintproject import severities as _sev

# The world size given to init_process_group as this node's GPU count, the rank as the
# torchrun local rank (blind P). Guitaricet/relora @ 111f94d4a56766e13a9f2ea2fe484ae1ac860b9e:
# torchrun_main.py; fix 0113239 "fix multi-node distributed" reads RANK/WORLD_SIZE from
# the torchrun environment.
RELORA = """\
import os

import torch


def main(args):
    assert "LOCAL_RANK" in os.environ, "torchrun should set LOCAL_RANK"
    args.local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(args.local_rank)

    # assumes that we are using a single node
    torch.distributed.init_process_group(
        backend="nccl",
        {INIT}
    )
"""
RELORA_BAD = "rank=args.local_rank,\n        world_size=torch.cuda.device_count()"
RELORA_FIX = 'rank=int(os.environ["RANK"]),\n        world_size=int(os.environ["WORLD_SIZE"])'


def test_world_size_from_device_count_given_inline(tmp_path: Path) -> None:
    bad = lint_project(tmp_path / "bad", {"train.py": RELORA.replace("{INIT}", RELORA_BAD)})
    assert [(n, ln) for n, ln, _ in _sev(bad, "DDP-WORLD-FROM-DEVICE-COUNT")] == [("train.py", 15)]
    ok = lint_project(tmp_path / "ok", {"train.py": RELORA.replace("{INIT}", RELORA_FIX)})
    assert _sev(ok, "DDP-WORLD-FROM-DEVICE-COUNT") == []
    # the script starts its own processes on one node (mp.spawn): the GPU count is the world
    spawned = RELORA.replace("{INIT}", RELORA_BAD) + (
        "\n\nif __name__ == '__main__':\n"
        "    torch.multiprocessing.spawn(main, nprocs=torch.cuda.device_count())\n"
    )
    assert (
        _sev(lint_project(tmp_path / "spawn", {"train.py": spawned}), "DDP-WORLD-FROM-DEVICE-COUNT")
        == []
    )
